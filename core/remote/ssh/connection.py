"""SSH to login hosts and nodes: one pooled asyncssh connection per host (the Runner over it is in
runner.py). Connections are
pooled per event loop: one per (host, port, user, jump, and the files that decide trust), shared
by every runner, reconnected with bounded exponential back-off when they drop. Host keys are
checked against known_hosts and an unknown or changed key is refused, never accepted silently
(trust.py); targets, errors and the command string sent to sshd are in target.py.

asyncssh is imported inside functions only: it costs ~0.3 s and `import atomdeck.core` must stay
fast for the TUI and the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from .target import (
    SshAuthFailed,
    SshConfigError,
    SshConnectionLost,
    SshError,
    SshTarget,
    SshUnreachable,
)
from .trust import describe_resolved, host_key_error, known_hosts_paths, read_known_hosts, resolve_config

if TYPE_CHECKING:  # pragma: no cover
    import asyncssh



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
    delay_s: float = 0.0  # the back-off wait planned (and slept) before this attempt: 0 for a round's first


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
    def _emit(self, state: StateName, reason: str = "", attempt: int = 0, delay_s: float = 0.0) -> None:
        self.state = ConnState(self.target.name, state, reason, time.time(), attempt, delay_s)
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
        delays = bo.delays()
        reason = self.state.reason if self.state.state == "lost" else ""
        attempt, delay = 0, 0.0
        while True:
            attempt += 1
            self._emit("connecting" if first else "reconnecting", reason, attempt, delay)
            t0 = loop.time()
            try:
                conn = await self._connect_once()
            except SshError as exc:
                reason = str(exc)
                planned = next(delays, None)
                if exc.permanent or first or planned is None or (
                        bo.give_up_s is not None and loop.time() - start + planned > bo.give_up_s):
                    self._emit("failed", reason, attempt)
                    raise
                delay = planned
                await asyncio.sleep(delay)
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
            # asyncssh's connect_timeout covers TCP + handshake + auth; the outer timeout is a
            # backstop for a tunnel channel that never opens.
            async with asyncio.timeout(t.connect_timeout_s + 2):
                return await asyncssh.connect(t.host, **kwargs)
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
