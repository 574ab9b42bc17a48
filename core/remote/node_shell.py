"""One long-lived `sh` per node, over one SSH session, that runs short commands one after another.

Every SSH command normally starts the user's login shell on the node, which reads ~/.bashrc (pyenv,
conda and module inits often cost 0.1-2 s each time). The ssh launcher's short commands (start, poll,
sweep, pre-flight) go through this shell instead: one login shell per node, then a fork per command.
Long-running commands (log tails, the per-node watcher, teardown's grace loop) keep their own channels.

Framing: each command's stdout and stderr go to files in a private temp directory on the node; the
shell then prints `@@<id> <rc> <out bytes> <err bytes>` and both files, so output is exact bytes
whatever the command prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from typing import Any, Protocol, runtime_checkable

from .shell import CommandError, Result, Runner

_INIT = ('T=$(mktemp -d "${TMPDIR:-/tmp}/.atomdeck-sh.XXXXXX") || exit 1; trap \'rm -rf "$T"\' EXIT; '
         'echo "@@ready"\n')


@runtime_checkable
class NodeShell(Protocol):
    """Runs short commands on one node, one after another. RemoteShell (one persistent `sh` over SSH)
    is the one the ssh launcher uses; any Runner (LocalRunner, SshRunner) also fits."""

    async def run(self, argv: list[str], *, timeout: float | None = 60, check: bool = False) -> Result: ...
    async def close(self) -> None: ...


def _dropped(e: BaseException) -> bool:
    """The shell or its connection went away (EOF, a reset, asyncssh's ConnectionLost)."""
    if isinstance(e, (OSError, EOFError, asyncio.IncompleteReadError)):
        return True
    import asyncssh

    return isinstance(e, (asyncssh.ConnectionLost, asyncssh.DisconnectError, asyncssh.ChannelOpenError))


class RemoteShell:
    """Runs argv lists in one persistent shell on the runner's host. Same result type as Runner.run."""

    def __init__(self, runner: Runner):
        self.runner = runner
        self._proc: Any = None
        self._session: Any = None
        self._lock = asyncio.Lock()
        self._next = 0

    async def _start(self) -> None:
        from .ssh.runner import _open_process

        entry = self.runner.connection  # type: ignore[attr-defined]
        self._session = entry.session()
        await self._session.__aenter__()
        try:
            conn = await entry.get()
            self._proc = await _open_process(conn, "exec sh -s", encoding=None)
            self._proc.stdin.write(_INIT.encode())
            async with asyncio.timeout(30):  # not wait_for: it can lose a cancellation (barrier.checkpoint)
                line = await self._proc.stdout.readline()
            if line.strip() != b"@@ready":
                raise OSError(f"the shell on {self.runner.where} did not start: {line[:200]!r}")
        except BaseException:
            await self._close()
            raise

    async def _close(self) -> None:
        proc, session = self._proc, self._session
        self._proc = self._session = None
        if proc is not None:
            with contextlib.suppress(Exception):
                proc.stdin.write_eof()
            with contextlib.suppress(Exception):
                proc.close()
        if session is not None:
            with contextlib.suppress(Exception):
                await session.__aexit__(None, None, None)

    async def run(self, argv: list[str], *, timeout: float | None = 60, check: bool = False) -> Result:
        """Run argv in the node's shell. A timeout (rc 124) or a lost connection ends the shell; the next
        call starts a new one."""
        async with self._lock:
            try:
                if self._proc is None:
                    await self._start()
                async with asyncio.timeout(timeout):  # not wait_for: it can lose a cancellation
                    res = await self._exchange(list(argv))
            except TimeoutError:
                await self._close()
                res = Result(list(argv), 124, "", f"timed out after {timeout:g}s")
            except BaseException as e:
                await self._close()
                if not _dropped(e):
                    raise
                # the shell broke (connection dropped, node rebooted): this one command goes over a fresh
                # channel (so every command sent here must be safe to run twice: a start checks its start
                # token); the next call starts a new shell
                return await self.runner.run(list(argv), timeout=timeout, check=check)
        if check and not res.ok:
            raise CommandError(res)
        return res

    async def _exchange(self, argv: list[str]) -> Result:
        self._next += 1
        tag = f"@@{self._next}"
        script = (f'( {shlex.join(argv)} ) </dev/null >"$T/o" 2>"$T/e"; rc=$?; '
                  f'printf "%s %s %s %s\\n" {tag} "$rc" "$(wc -c <"$T/o" | tr -d " ")" '
                  f'"$(wc -c <"$T/e" | tr -d " ")"; cat "$T/o" "$T/e"\n')
        self._proc.stdin.write(script.encode())
        while True:
            line = await self._proc.stdout.readline()
            if not line:
                raise EOFError("the shell ended")
            parts = line.decode(errors="replace").split()
            if len(parts) == 4 and parts[0] == tag:
                break
        rc, n_out, n_err = int(parts[1]), int(parts[2]), int(parts[3])
        out = await self._proc.stdout.readexactly(n_out) if n_out else b""
        err = await self._proc.stdout.readexactly(n_err) if n_err else b""
        return Result(argv, rc, out.decode(errors="replace"), err.decode(errors="replace"))

    async def close(self) -> None:
        async with self._lock:
            await self._close()
