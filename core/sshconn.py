"""SSH to login hosts and nodes: one pooled asyncssh connection per host, and a Runner over it.

`SshRunner` has the same API as `LocalRunner` (run, stream, open_connection, close) so Slurm
commands, pre-flight checks, launchers and probes do not care where they run. Connections are
pooled per event loop: one per (host, port, user, jump, and the files that decide trust), shared
by every runner, reconnected with bounded exponential back-off when they drop. Host keys are
checked against known_hosts and an unknown or changed key is refused, never accepted silently
(ssh_trust.py); targets, errors and the command string sent to sshd are in ssh_target.py.

asyncssh is imported inside functions only: it costs ~0.3 s and `import atomdeck.core` must stay
fast for the TUI and the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal
import socket
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from .shell import CommandError, Result, Runner
from .ssh_target import (
    Backoff,
    HostKeyChanged,
    HostKeyUnknown,
    SshAuthFailed,
    SshConfigError,
    SshConnectionLost,
    SshError,
    SshTarget,
    SshUnreachable,
    remote_command,
)
from .ssh_trust import describe_resolved, host_key_error, known_hosts_paths, read_known_hosts, resolve_config

if TYPE_CHECKING:  # pragma: no cover
    import asyncssh

    from .cluster import Cluster

__all__ = [  # the SSH API in one place: targets and errors live in ssh_target, trust in ssh_trust
    "Backoff", "ConnState", "HostKeyChanged", "HostKeyUnknown", "SshAuthFailed", "SshConfigError", "SshConnection",
    "SshConnectionLost", "SshError", "SshRunner", "SshTarget", "SshUnreachable", "close_all", "pooled_connections",
    "remote_command", "ssh_runner_for_login", "ssh_runner_for_node",
]

log = logging.getLogger(__name__)

# OpenSSH's MaxSessions default: the 11th session channel on one connection is refused.
MAX_SESSIONS = 10

StateName = Literal["idle", "connecting", "up", "lost", "reconnecting", "failed", "closed"]


@dataclass(frozen=True)
class ConnState:
    """A change in a host's SSH connection, as the console shows it per node."""

    host: str  # the name the user knows (node name, login host alias)
    state: StateName
    reason: str = ""  # why: the error text for lost/failed/reconnecting
    at: float = field(default_factory=time.time)  # wall-clock time of the change
    attempt: int = 0  # 1, 2, ... while (re)connecting


# ------------------------------------------------------------------------------------ connection


class SshConnection:
    """One pooled SSH connection to a target, shared by all runners for it; reconnects on demand."""

    def __init__(self, target: SshTarget, jump: SshConnection | None):
        self.target = target
        self.jump = jump
        self.refs = 0
        self.connects = 0  # successful logins so far (tests and benchmarks read it)
        self.open_channels = 0
        self.peak_channels = 0
        self.last_connect_s = 0.0  # duration of the last successful connect
        self.state = ConnState(target.name, "idle")
        self.listeners: set[Callable[[ConnState], None]] = set()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()
        self._sessions = asyncio.Semaphore(MAX_SESSIONS)
        self._round = 0  # connect rounds finished; waiters behind a failed round share its error
        self._round_error: SshError | None = None
        self._closing = False

    # -- state
    def _emit(self, state: StateName, reason: str = "", attempt: int = 0) -> None:
        self.state = ConnState(self.target.name, state, reason, time.time(), attempt)
        for cb in list(self.listeners):
            try:
                cb(self.state)
            except Exception:  # a broken listener must not break the connection
                log.exception("ssh state listener failed")

    def _on_lost(self, conn: object, exc: Exception | None) -> None:
        if conn is not self._conn or conn is None:
            return  # a failed attempt, or a connection we already replaced
        self._conn = None
        if self._closing:
            return
        self._emit("lost", str(exc) if exc else "closed by the server")

    # -- sessions
    @contextlib.asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        """Hold one of the MAX_SESSIONS session slots: beyond that, callers queue here."""
        async with self._sessions:
            self.open_channels += 1
            self.peak_channels = max(self.peak_channels, self.open_channels)
            try:
                yield
            finally:
                self.open_channels -= 1

    # -- connect
    async def get(self) -> asyncssh.SSHClientConnection:
        """The live connection, connecting (or reconnecting with back-off) if needed."""
        if self._conn is not None:
            return self._conn
        seen_round = self._round
        async with self._lock:
            if self._conn is not None:
                return self._conn
            if self._round != seen_round and self._round_error is not None:
                # We queued behind a round that just failed: share its verdict instead of repeating it.
                raise type(self._round_error)(str(self._round_error), self._round_error.host)
            try:
                return await self._connect_with_backoff()
            except SshError as exc:
                self._round_error = exc
                raise
            finally:
                self._round += 1

    async def _connect_with_backoff(self) -> asyncssh.SSHClientConnection:
        bo = self.target.backoff
        first = self.connects == 0  # the first connect fails fast: the operator wants to know now
        loop = asyncio.get_running_loop()
        start = loop.time()
        delay = bo.first_s
        reason = self.state.reason if self.state.state == "lost" else ""
        attempt = 0
        while True:
            attempt += 1
            self._emit("connecting" if first else "reconnecting", reason, attempt)
            t0 = loop.time()
            try:
                conn = await self._connect_once()
            except SshError as exc:
                reason = str(exc)
                if exc.permanent or first or loop.time() - start + delay > bo.give_up_s:
                    self._emit("failed", reason, attempt)
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * bo.factor, bo.max_s)
                continue
            self._conn = conn
            self.connects += 1
            self.last_connect_s = loop.time() - t0
            self._emit("up", "", attempt)
            return conn

    async def _connect_once(self) -> asyncssh.SSHClientConnection:
        import asyncssh

        t = self.target
        tunnel: Any = ()
        if self.jump is not None:
            try:
                tunnel = await self.jump.get()
            except SshError as exc:
                raise type(exc)(f"cannot reach {t.describe()}: its jump host failed: {exc}", t.name) from None
        opts = resolve_config(t)
        where = describe_resolved(t, opts)
        kh_paths = known_hosts_paths(t, opts)
        kh_data = read_known_hosts(kh_paths)
        seen: dict[str, Any] = {}
        kwargs: dict[str, Any] = {
            "config": [t.ssh_config] if t.ssh_config else (), "tunnel": tunnel,
            "known_hosts": kh_data, "agent_forwarding": t.agent_forwarding,
            "connect_timeout": t.connect_timeout_s, "keepalive_interval": t.keepalive_s,
            "keepalive_count_max": t.keepalive_count_max,
            "client_factory": lambda: _client_class()(self, seen)}
        if t.port is not None:
            kwargs["port"] = t.port
        if t.user is not None:
            kwargs["username"] = t.user
        if t.identity is not None:
            kwargs["client_keys"] = [os.path.expanduser(t.identity)]
        try:
            # asyncssh's connect_timeout covers TCP + handshake + auth; the outer wait_for is a
            # backstop for a tunnel channel that never opens.
            return await asyncio.wait_for(asyncssh.connect(t.host, **kwargs), t.connect_timeout_s + 2)
        except asyncssh.HostKeyNotVerifiable as exc:
            raise host_key_error(t, opts, seen, kh_paths, kh_data, exc) from None
        except asyncssh.PermissionDenied as exc:
            ids = t.identity or "ssh config IdentityFile / ~/.ssh/id_*"
            agent = "`ssh-add -l`" if os.environ.get("SSH_AUTH_SOCK") else "none: SSH_AUTH_SOCK is unset"
            raise SshAuthFailed(
                f"SSH login to {where} was refused ({exc.reason}). Check the user name "
                f"({opts['user']}), the identity file ({ids}), the keys in your agent ({agent}), and that "
                f"the public key is in ~{opts['user']}/.ssh/authorized_keys on {t.name}", t.name) from None
        except asyncssh.ChannelOpenError as exc:
            raise SshUnreachable(
                f"cannot reach {where}: {t.jump.name if t.jump else 'the jump host'} could not "
                f"connect to it ({exc.reason}). Check that {t.name} is up and that sshd listens on port "
                f"{opts['port']} there", t.name) from None
        except asyncssh.DisconnectError as exc:
            raise SshUnreachable(f"SSH to {where} failed: {exc.reason}", t.name) from None
        except TimeoutError:
            raise SshUnreachable(
                f"no SSH answer from {where} within {t.connect_timeout_s:g} s. Check that the host "
                f"is up and reachable{' from ' + t.jump.name if t.jump else ''}, that port {opts['port']} is "
                f"sshd, or raise ssh.connect_timeout_s", t.name) from None
        except ConnectionRefusedError:
            raise SshUnreachable(
                f"cannot connect to {where}: connection refused. Check that sshd runs there and "
                f"listens on port {opts['port']}", t.name) from None
        except socket.gaierror as exc:
            raise SshUnreachable(
                f"cannot resolve the host name {opts['host']!r} ({exc.strerror}). Check the name, or give it "
                f"a HostName in your ssh config", t.name) from None
        except (asyncssh.KeyImportError, FileNotFoundError, PermissionError) as exc:
            raise SshConfigError(f"cannot use the SSH key for {t.name}: {exc}. Check ssh.identity", t.name) from None
        except OSError as exc:
            raise SshUnreachable(f"cannot connect to {where}: {exc.strerror or exc}", t.name) from None

    async def close(self) -> None:
        """Close the connection now (in-flight commands fail with SshConnectionLost)."""
        self._closing = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await conn.wait_closed()
        self._emit("closed")
        self._closing = False

    def lost_error(self, exc: BaseException | None, what: str) -> SshConnectionLost:
        reason = getattr(exc, "reason", None) or (str(exc) if exc else "") or self.state.reason or "closed"
        return SshConnectionLost(f"lost the SSH connection to {self.target.describe()} while {what}: "
                                 f"{reason}", self.target.name)


_CLIENT_CLASS: type | None = None


def _client_class() -> type:
    """asyncssh.SSHClient subclass, built on first use so asyncssh is imported lazily."""
    global _CLIENT_CLASS
    if _CLIENT_CLASS is None:
        import asyncssh

        class _Client(asyncssh.SSHClient):
            def __init__(self, owner: SshConnection, seen: dict[str, Any]):
                self._owner = owner
                self._seen = seen
                self._conn: object = None

            def connection_made(self, conn: asyncssh.SSHClientConnection) -> None:
                self._conn = conn

            def connection_lost(self, exc: Exception | None) -> None:
                self._owner._on_lost(self._conn, exc)

            def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
                # Only reached when known_hosts did not vouch for the key: remember it for the
                # message, and refuse. Never trust on first use.
                self._seen.update(host=host, addr=addr, port=port, key=key)
                return False

        _CLIENT_CLASS = _Client
    return _CLIENT_CLASS


# ------------------------------------------------------------------------------------------ pool


class _Pool:
    def __init__(self) -> None:
        self.entries: dict[tuple, SshConnection] = {}

    def acquire(self, target: SshTarget, depth: int = 0) -> SshConnection:
        entry = self.entries.get(target.key)
        if entry is None:
            resolved = target
            if target.jump is None:
                pj = resolve_config(target)["proxyjump"]  # honour ProxyJump from ssh config, pooled
                if pj:
                    if depth > 4:
                        raise SshConfigError(f"ProxyJump loop in the SSH config for {target.name}", target.name)
                    hop: SshTarget | None = None
                    for spec in pj.split(","):
                        hop = SshTarget.parse(spec, jump=hop, ssh_config=target.ssh_config,
                                              known_hosts=target.known_hosts, identity=target.identity,
                                              connect_timeout_s=target.connect_timeout_s,
                                              keepalive_s=target.keepalive_s, backoff=target.backoff)
                    resolved = replace(target, jump=hop)
            jump = self.acquire(resolved.jump, depth + 1) if resolved.jump else None
            entry = SshConnection(resolved, jump)
            self.entries[target.key] = entry
        entry.refs += 1
        return entry

    async def release(self, entry: SshConnection) -> None:
        entry.refs -= 1
        if entry.refs > 0:
            return
        self.entries = {k: e for k, e in self.entries.items() if e is not entry}
        await entry.close()
        if entry.jump is not None:
            await self.release(entry.jump)


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()


def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = _Pool()
    return pool


def pooled_connections() -> list[SshConnection]:
    """The live pool entries of the running event loop (status screens, tests, benchmarks)."""
    return list(_pool().entries.values())


async def close_all() -> None:
    """Close every pooled SSH connection of the running event loop (at exit, and between tests)."""
    pool = _pool()
    entries, pool.entries = list(pool.entries.values()), {}
    for e in entries:
        await e.close()


# ---------------------------------------------------------------------------------------- runner


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
                proc = await _open_process(conn, cmd, encoding="utf-8", errors="replace")
                try:
                    if input is not None:
                        proc.stdin.write(input)
                        proc.stdin.write_eof()
                    out, err = await asyncio.wait_for(proc.communicate(), timeout)
                except TimeoutError:
                    _hang_up(proc)
                    res = Result(argv, 124, "", f"timed out after {timeout:g}s")
                    if check:
                        raise CommandError(res) from None
                    return res
                finally:
                    if proc.exit_status is None and proc.exit_signal is None:
                        _hang_up(proc)
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


async def _open_process(conn: asyncssh.SSHClientConnection, cmd: str, **kw: Any) -> Any:
    """Open a session channel. sshd frees a finished session's slot a moment after the channel
    closes, so an open that races it is refused although we hold at most MAX_SESSIONS: retry
    briefly before calling it an error."""
    import asyncssh

    for delay in (0.01, 0.03, 0.1, 0.3, None):
        try:
            return await conn.create_process(cmd, **kw)
        except asyncssh.ChannelOpenError:
            if delay is None:  # sshd says only "open failed" (code 2) whatever the cause
                raise
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def _hang_up(proc: Any) -> None:
    # Closing the channel is what the remote guard waits for; a signal request helps commands run
    # without the guard (input= given) on OpenSSH >= 7.9.
    with contextlib.suppress(Exception):
        if proc.exit_status is None and proc.exit_signal is None:
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
    # Port 22 is the schema default: leave it unset so a Port in ~/.ssh/config still applies.
    return SshTarget(host=login.host, port=None if login.port == 22 else login.port, user=login.user,
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
        host=host, port=None if spec.port == 22 else spec.port, user=spec.user, jump=jump,
        ssh_config=spec.ssh_config, known_hosts=spec.known_hosts, identity=spec.identity,
        agent_forwarding=spec.agent_forwarding, connect_timeout_s=spec.connect_timeout_s,
        keepalive_s=spec.keepalive_s, label=name))
