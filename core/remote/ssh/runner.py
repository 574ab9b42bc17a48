"""A Runner over a pooled SSH connection (`SshRunner`), and runners for a cluster's login host and nodes.

`SshRunner` has the same API as `LocalRunner` (run, stream, open_connection, close) so Slurm
commands, pre-flight checks, launchers and probes do not care where they run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import posixpath
import shlex
import signal
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from ..backoff import Backoff
from ..shell import CommandError, Result, Runner
from .connection import ConnState, SshConnection, _pool
from .target import SshConfigError, SshConnectionLost, SshTarget, remote_command

if TYPE_CHECKING:  # pragma: no cover
    import asyncssh

    from ...config.cluster import Cluster

# a refused session open is retried 4 times: 0.01 s, then ×3 up to 0.27 s
SESSION_OPEN_RETRY = Backoff(first_s=0.01, factor=3.0, max_s=0.3, give_up_s=None, tries=4)


class SshRunner(Runner):
    """Runs commands on one host over a pooled SSH connection. Same API as LocalRunner.

    A command whose connection drops while it runs raises SshConnectionLost (it is never re-run:
    it may have had effects); the next call reconnects with back-off. Connection problems raise
    SshError subclasses; `timeout` bounds the command, the connect has its own timeout.
    """

    def __init__(self, target: SshTarget):
        self.target = target
        self.where = f"ssh {target.name}"
        self._entry_ref: SshConnection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchers: list[Callable[[ConnState], None]] = []

    # -- connection state
    @property
    def connection(self) -> SshConnection:
        """This runner's pooled connection in the running loop (acquired on first use)."""
        loop = asyncio.get_running_loop()
        if self._entry_ref is None or self._loop is not loop:
            self._entry_ref = _pool().acquire(self.target)
            self._entry_ref.listeners.add(self._fanout)
            self._loop = loop
        return self._entry_ref

    @property
    def state(self) -> ConnState:
        """The latest connection state (idle before first use)."""
        return self._entry_ref.state if self._entry_ref else ConnState(self.target.name, "idle")

    def watch(self, callback: Callable[[ConnState], None]) -> Callable[[], None]:
        """Call `callback` on every state change; returns a function that stops it. For a queue:
        `q = asyncio.Queue(); runner.watch(q.put_nowait)`."""
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    def _fanout(self, state: ConnState) -> None:
        for cb in list(self._watchers):
            cb(state)

    async def connect(self) -> None:
        """Connect now instead of on first use (raises the SshError, if any)."""
        await self.connection.get()

    # -- commands
    async def run(self, argv: list[str], *, input: str | None = None, timeout: float | None = 60,
                  env: Mapping[str, str] | None = None, check: bool = False) -> Result:
        """Run argv remotely and collect its output; rc 124 on timeout (the remote group is killed)."""
        argv = list(argv)
        # With input, stdin carries it and cannot watch for our hang-up: run without the guard.
        cmd = remote_command(argv, env, guard=input is None)
        entry = self.connection
        async with entry.session():
            conn = await entry.get()
            with _mapped(entry, f"running `{shlex.join(argv[:3])}`"):
                proc = await _open_process(conn, cmd, guarded=input is None, encoding="utf-8", errors="replace")
                try:
                    if input is not None:
                        proc.stdin.write(input)
                        proc.stdin.write_eof()
                    async with asyncio.timeout(timeout):
                        out, err = await proc.communicate()
                except TimeoutError:
                    _hang_up(proc, guarded=input is None)
                    res = Result(argv, 124, "", f"timed out after {timeout:g}s")
                    if check:
                        raise CommandError(res) from None
                    return res
                finally:
                    if proc.exit_status is None and proc.exit_signal is None:
                        _hang_up(proc, guarded=input is None)
        rc = _exit_code(proc)
        if rc is None:
            raise entry.lost_error(None, f"running `{shlex.join(argv[:3])}`")
        res = Result(argv, rc, out or "", err or "")
        if check and not res.ok:
            raise CommandError(res)
        return res

    async def stream(self, argv: list[str], *, env: Mapping[str, str] | None = None) -> AsyncIterator[str]:
        """Lines of stdout+stderr as they come, without the newline. Leaving the loop kills the
        remote command; a dropped connection raises SshConnectionLost."""
        cmd = remote_command(list(argv), env, merge_stderr=True)
        entry = self.connection
        what = f"streaming `{shlex.join(list(argv)[:3])}`"
        async with entry.session():
            conn = await entry.get()
            with _mapped(entry, what):
                proc = await _open_process(conn, cmd, encoding="utf-8", errors="replace")
            try:
                with _mapped(entry, what):
                    while True:
                        line = await proc.stdout.readline()
                        if not line:  # asyncssh reports EOF as '' (a blank line is '\n')
                            break
                        yield line.removesuffix("\n")
                    await proc.wait_closed()
                if _exit_code(proc) is None:
                    raise entry.lost_error(None, what)
            finally:
                _hang_up(proc)

    async def stream_bytes(self, argv: list[str], *, env: Mapping[str, str] | None = None,
                           chunk: int = 65536) -> AsyncIterator[bytes]:
        """Raw stdout chunks (stderr kept apart, so byte counts stay exact). Raises CommandError
        if the command exits non-zero, SshConnectionLost if the connection drops."""
        argv = list(argv)
        cmd = remote_command(argv, env)
        entry = self.connection
        what = f"streaming `{shlex.join(argv[:3])}`"
        async with entry.session():
            conn = await entry.get()
            with _mapped(entry, what):
                proc = await _open_process(conn, cmd, encoding=None)
            errbuf = bytearray()

            async def drain_stderr() -> None:
                while data := await proc.stderr.read(4096):
                    errbuf.extend(data)
                    del errbuf[:-4096]  # keep the tail: the last error is the useful one

            errs = asyncio.ensure_future(drain_stderr())
            try:
                with _mapped(entry, what):
                    while data := await proc.stdout.read(chunk):
                        yield data
                    await proc.wait_closed()
                with contextlib.suppress(Exception):
                    await errs
                rc = _exit_code(proc)
                if rc is None:
                    raise entry.lost_error(None, what)
                if rc != 0:
                    raise CommandError(Result(argv, rc, "", errbuf.decode(errors="replace")))
            finally:
                errs.cancel()
                _hang_up(proc)

    async def open_connection(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A TCP connection to host:port opened by the remote end (direct-tcpip), for probes.
        A refused port raises ConnectionRefusedError; a broken SSH link raises SshError, so a probe
        can tell "port closed" from "cannot see". The streams are asyncssh's, with the asyncio API."""
        import asyncssh

        entry = self.connection
        conn = await entry.get()
        try:
            reader, writer = await conn.open_connection(host, port)
        except asyncssh.ChannelOpenError as exc:
            if exc.code == asyncssh.OPEN_CONNECT_FAILED:
                raise ConnectionRefusedError(111, f"{host}:{port} (from {self.target.name}): {exc.reason}") from None
            raise SshConfigError(f"{self.target.name} refused to open a TCP connection to {host}:{port} "
                                 f"({exc.reason}); probes through it need AllowTcpForwarding yes in its "
                                 f"sshd_config", self.target.name) from None
        except (asyncssh.DisconnectError, asyncssh.ConnectionLost, OSError) as exc:
            raise entry.lost_error(exc, f"opening {host}:{port}") from None
        return cast(asyncio.StreamReader, reader), cast(asyncio.StreamWriter, writer)

    async def put(self, src: str, dest: str, mode: int = 0o755) -> None:
        """Over SFTP on the pooled connection: written beside `dest`, then renamed (no half file is ever used)."""
        import os

        import asyncssh

        from ...config.errors import AtomdeckError

        conn = await self.connection.get()
        # a name of its own: remote_dir is often a shared file system, where every node's copy is the same file
        part = f"{dest}.part-{os.getpid()}-{os.urandom(4).hex()}"
        what = f"copying {src} to {self.where}:{dest}"
        with _mapped(self.connection, what):
            async with conn.start_sftp_client() as sftp:
                try:
                    await sftp.makedirs(posixpath.dirname(dest) or ".", exist_ok=True)
                    await sftp.put(src, part)
                    await sftp.chmod(part, mode)
                    await sftp.posix_rename(part, dest)
                except asyncssh.SFTPError as e:
                    with contextlib.suppress(asyncssh.SFTPError):
                        await sftp.remove(part)
                    raise AtomdeckError(f"{what} failed: {e.reason or e}") from None

    async def close(self) -> None:
        """Give back this runner's share of the pooled connection (closed when nobody uses it)."""
        entry, self._entry_ref = self._entry_ref, None
        if entry is not None and self._loop is asyncio.get_running_loop():
            entry.listeners.discard(self._fanout)
            await _pool().release(entry)


@contextlib.contextmanager
def _mapped(entry: SshConnection, what: str) -> Iterator[None]:
    """asyncssh channel/connection errors → SshConnectionLost naming the host and the command."""
    import asyncssh

    try:
        yield
    except asyncssh.ChannelOpenError as exc:
        raise SshConnectionLost(f"{entry.target.describe()} refused a new session while {what}: {exc.reason}",
                                entry.target.name) from None
    except (asyncssh.DisconnectError, asyncssh.ConnectionLost, BrokenPipeError, ConnectionError) as exc:
        raise entry.lost_error(exc, what) from None


async def _open_process(conn: asyncssh.SSHClientConnection, cmd: str, *, guarded: bool = True, **kw: Any) -> Any:
    """Open a session channel. sshd frees a finished session's slot a moment after the channel
    closes, so an open that races it is refused although we hold at most MAX_SESSIONS: retry
    briefly before calling it an error."""
    import asyncssh

    for delay in (*SESSION_OPEN_RETRY.delays(), None):
        opening = asyncio.ensure_future(conn.create_process(cmd, **kw))
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            # asyncssh leaves the channel open when the exec request is cancelled, and sshd may
            # already run the command: hang it up as soon as the open completes.
            opening.add_done_callback(functools.partial(_hang_up_opened, guarded=guarded))
            raise
        except asyncssh.ChannelOpenError:
            if delay is None:  # sshd says only "open failed" (code 2) whatever the cause
                raise
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def _hang_up_opened(opening: asyncio.Future[Any], *, guarded: bool) -> None:
    if not opening.cancelled() and opening.exception() is None:
        _hang_up(opening.result(), guarded=guarded)


def _hang_up(proc: Any, *, guarded: bool = True) -> None:
    # Closing the channel is what the remote guard waits for: its watcher reads EOF and kills the
    # command's process group. A signal request (OpenSSH >= 7.9) is only for commands run without
    # the guard (input= given): sent to a guarded command it would SIGKILL the guard itself, and if
    # that lands after the guard started the command but before its watcher, the command outlives us.
    with contextlib.suppress(Exception):
        if not guarded and proc.exit_status is None and proc.exit_signal is None:
            proc.send_signal("KILL")
    with contextlib.suppress(Exception):
        proc.close()


def _exit_code(proc: Any) -> int | None:
    if proc.exit_status is not None:
        return int(proc.exit_status)
    if proc.exit_signal is not None:
        name = proc.exit_signal[0]
        try:
            return 128 + int(signal.Signals["SIG" + name])
        except KeyError:
            return 255
    return None


# ------------------------------------------------------------------------------------- factories


def _login_target(cluster: Cluster) -> SshTarget:
    login = cluster.login
    if login is None:
        raise SshConfigError(f"cluster {cluster.name} has no login host; add login: {{host: ...}}")
    spec = cluster.ssh
    common: dict[str, Any] = {"ssh_config": login.ssh_config, "known_hosts": login.known_hosts,
                              "identity": login.identity, "connect_timeout_s": spec.connect_timeout_s,
                              "keepalive_s": spec.keepalive_s}
    jump = SshTarget.parse(login.jump, **common) if login.jump else None
    # An unset port leaves the ssh config's Port in force; a port written in the cluster file wins, 22 too.
    return SshTarget(host=login.host, port=login.port, user=login.user,
                     jump=jump, label=login.host, **common)


def ssh_runner_for_login(cluster: Cluster) -> SshRunner:
    """A runner on the cluster's login host (Slurm commands, and the jump to nodes)."""
    return SshRunner(_login_target(cluster))


def ssh_runner_for_node(cluster: Cluster, node: str, *, label: str | None = None) -> SshRunner:
    """A runner on a node, by name or address, following `cluster.ssh` (through the login host
    when via_login). A listed node's `addr` is where we connect; its name labels messages."""
    spec = cluster.ssh
    host, name = node, label or node
    for n in cluster.nodes:
        if n.name == node or n.addr == node:
            host, name = n.addr or n.name, label or n.name
            break
    jump = _login_target(cluster) if spec.via_login and cluster.login is not None else None
    return SshRunner(SshTarget(
        host=host, port=spec.port, user=spec.user, jump=jump,
        ssh_config=spec.ssh_config, known_hosts=spec.known_hosts, identity=spec.identity,
        agent_forwarding=spec.agent_forwarding, connect_timeout_s=spec.connect_timeout_s,
        keepalive_s=spec.keepalive_s, label=name))
