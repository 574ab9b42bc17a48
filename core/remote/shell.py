"""One way to run a command and read its output: locally, or on another host over SSH.

Slurm commands, pre-flight checks and the ssh launcher all go through a Runner, so the same
code works on the operator's machine and on a login host.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from ..config.errors import AtomdeckError


@dataclass(frozen=True)
class Result:
    argv: list[str]
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def explain(self) -> str:
        err = (self.stderr or self.stdout).strip().splitlines()
        tail = err[-1] if err else "(no output)"
        return f"`{' '.join(self.argv[:3])}...` exited {self.rc}: {tail}"


class CommandError(AtomdeckError):
    def __init__(self, result: Result, what: str = ""):
        self.result = result
        super().__init__(f"{what + ': ' if what else ''}{result.explain()}")


class Runner:
    """Runs commands somewhere. `where` names the place for messages ("local", "ssh mia1-login")."""

    where = "?"

    async def run(self, argv: list[str], *, input: str | None = None, timeout: float | None = 60,
                  env: Mapping[str, str] | None = None, check: bool = False) -> Result:
        raise NotImplementedError

    async def stream(self, argv: list[str], *, env: Mapping[str, str] | None = None) -> AsyncIterator[str]:
        raise NotImplementedError
        yield ""  # pragma: no cover

    async def open_connection(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection from this runner's vantage point (probes use it)."""
        raise NotImplementedError

    async def put(self, src: str, dest: str, mode: int = 0o755) -> None:
        """Copy this machine's file `src` to `dest` where this runner runs (its directory made), whole or not
        at all (written beside it, then renamed)."""
        raise NotImplementedError

    async def close(self) -> None:
        return None


class LocalRunner(Runner):
    where = "local"

    async def run(self, argv: list[str], *, input: str | None = None, timeout: float | None = 60,
                  env: Mapping[str, str] | None = None, check: bool = False) -> Result:
        full_env = {**os.environ, **env} if env else None
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=full_env,
                start_new_session=True)
        except FileNotFoundError:
            res = Result(list(argv), 127, "", f"{argv[0]}: command not found")
            if check:
                raise CommandError(res) from None
            return res
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate(input.encode() if input is not None else None)
        except (TimeoutError, asyncio.CancelledError):
            _kill_group(proc.pid)
            await proc.wait()
            if (task := asyncio.current_task()) is not None and task.cancelling():
                raise
            res = Result(list(argv), 124, "", f"timed out after {timeout:g}s")
            if check:
                raise CommandError(res) from None
            return res
        res = Result(list(argv), proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace"))
        if check and not res.ok:
            raise CommandError(res)
        return res

    async def stream(self, argv: list[str], *, env: Mapping[str, str] | None = None) -> AsyncIterator[str]:
        full_env = {**os.environ, **env} if env else None
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.STDOUT, env=full_env,
                                                    start_new_session=True)
        try:
            assert proc.stdout is not None
            async for raw in proc.stdout:
                yield raw.decode(errors="replace").rstrip("\n")
        finally:
            if proc.returncode is None:
                _kill_group(proc.pid)
            await proc.wait()

    async def open_connection(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)

    async def put(self, src: str, dest: str, mode: int = 0o755) -> None:
        if os.path.abspath(src) == os.path.abspath(dest):
            return
        await asyncio.to_thread(_copy_whole, src, dest, mode)

def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _copy_whole(src: str, dest: str, mode: int) -> None:
    import shutil

    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    tmp = f"{dest}.{os.getpid()}.part"
    shutil.copyfile(src, tmp)
    os.chmod(tmp, mode)
    os.replace(tmp, dest)


def low_priority(launcher: str) -> list[str]:
    """The argv prefix that runs a node command below everything else (a snapshot's, the nodes' GPU readings). At
    nice 19 the node's engines keep the CPU first; py-spy pauses each process it dumps, so it must not starve behind
    them for long. On the local launcher the "nodes" are the console's own machine: SCHED_IDLE, which any other task
    preempts at once, and, since the command runs in a session of its own (LocalRunner), its autogroup at nice 19:
    with the kernel's autogroups each session is scheduled as one group at nice 0 against the console's, whatever
    the policy of the tasks inside it (16 node commands at once had 16 times the console's share: its keys waited
    30-140 ms on the run queue while its own work per key was 5-10 ms). The kernel takes one group's nice value a
    tenth of a second from a user without CAP_SYS_ADMIN (EAGAIN otherwise; at 8 readings a second most failed, and
    ran as the console's equals): tried again LOW_GROUP_TRIES times, a tenth of a second apart, before it runs
    anyway. In the caller's session instead (tried 2026-12-06) they took the caller's group's whole share whenever
    it slept: 128 readings as the Nodes view opened slowed the start of 129 processes from ~10 s to ~20 s."""
    if launcher != "local":
        return ["nice", "-n", "19"]
    inner = ["chrt", "--idle", "0"] if shutil.which("chrt") else ["nice", "-n", "19"]
    return ["sh", "-c", LOW_GROUP, "low", *inner]


LOW_GROUP_TRIES = 20
LOW_GROUP = (f'i=0; until echo 19 2>/dev/null > /proc/self/autogroup; do i=$((i + 1)); '
             f'[ "$i" -ge {LOW_GROUP_TRIES} ] && break; sleep 0.1; done; exec "$@"')
