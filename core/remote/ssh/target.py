"""Where and how to reach a host over SSH, the errors an operator sees, and the exact command string
sent to sshd. Pure data and text: no asyncssh, no I/O."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...config.cluster import parse_ssh_address
from ...config.errors import AtomdeckError
from ..backoff import Backoff

# SSH (re)connects: 0.25 s, ×2, at most 5 s apart; give up after 60 s (Backoff's defaults).
SSH_RECONNECT = Backoff()

# ---------------------------------------------------------------------------------------- errors


class SshError(AtomdeckError):
    """An SSH problem, phrased for the operator. `permanent` ones (trust, auth) are not retried."""

    permanent = False

    def __init__(self, message: str, host: str = ""):
        self.host = host
        super().__init__(message)


class SshUnreachable(SshError):
    """The host did not answer SSH: refused, timed out, unknown name, jump host could not reach it."""


class SshAuthFailed(SshError):
    """The server refused every key offered."""

    permanent = True


class HostKeyUnknown(SshError):
    """The server's host key is not in known_hosts."""

    permanent = True


class HostKeyChanged(SshError):
    """known_hosts has a different key for this host: possibly reinstalled, possibly an attack."""

    permanent = True


class SshConfigError(SshError):
    """Local SSH settings that cannot work (missing identity file, forwarding forbidden...)."""

    permanent = True


class SshConnectionLost(SshError):
    """The connection dropped while a command or stream was using it."""


# ---------------------------------------------------------------------------------------- target


@dataclass(frozen=True)
class SshTarget:
    """Where and how to connect. Unset fields fall back to ~/.ssh/config (or `ssh_config`)."""

    host: str
    port: int | None = None
    user: str | None = None
    jump: SshTarget | None = None  # ProxyJump: reach `host` through this one
    ssh_config: str | None = None  # OpenSSH config file; None = ~/.ssh/config
    known_hosts: str | None = None  # None = config UserKnownHostsFile, else ~/.ssh/known_hosts
    identity: str | None = None  # private key file; None = config, ~/.ssh/id_*, the agent
    agent_forwarding: bool = False
    connect_timeout_s: float = 10.0
    keepalive_s: float = 15.0
    keepalive_count_max: int = 3
    label: str | None = field(default=None, compare=False)  # name for messages (node name)
    lane: int = 0  # > 0: a separate connection to the same place (long-lived streams off the command one)
    backoff: Backoff = field(default=SSH_RECONNECT, compare=False)

    @property
    def name(self) -> str:
        return self.label or self.host

    @property
    def key(self) -> tuple:
        """Pool key: one connection per distinct key. Trust and identity files are part of it so a
        connection verified against one known_hosts is never reused for a caller that named another."""
        return (self.host, self.port, self.user, self.jump.key if self.jump else None,
                self.ssh_config, self.known_hosts, self.identity, self.agent_forwarding, self.lane)

    def describe(self) -> str:
        """`node (user@host:port via login)`, for messages."""
        where = f"{self.user + '@' if self.user else ''}{self.host}{':' + str(self.port) if self.port else ''}"
        via = f" via {self.jump.name}" if self.jump else ""
        return f"{self.label} ({where}{via})" if self.label and self.label != self.host else f"{where}{via}"

    @classmethod
    def parse(cls, spec: str, **kw: Any) -> SshTarget:
        """`[user@]host[:port]`, `[addr]:port` or `ssh://[user@]host[:port]`, as in LoginHost.jump and ProxyJump."""
        try:
            user, host, port = parse_ssh_address(spec)
        except ValueError as e:
            raise SshConfigError(str(e)) from None
        return cls(host=host, port=port, user=user, **kw)


# -------------------------------------------------------------------------------- remote commands

# Runs "$@" so that it dies with the channel: OpenSSH does not kill a session's processes when the
# channel or the connection closes (and ignored signal requests before 7.9), so a `tail -F` on a
# quiet log would outlive us. The guard holds the channel's stdin and, on EOF, kills the command's
# process group (setsid makes it a group leader). $1 = merge|split decides where stderr goes.
_GUARD = r"""m=$1; shift
[ "$m" = merge ] && exec 2>&1
exec 3<&0 </dev/null
if command -v setsid >/dev/null 2>&1; then setsid "$@" 3<&- & else "$@" 3<&- & fi
p=$!
{ while read -r _ <&3; do :; done; kill -s TERM -- "-$p" || kill -s TERM "$p"; } >/dev/null 2>&1 &
w=$!
exec 3<&-
wait "$p"; rc=$?
kill "$w" 2>/dev/null
exit "$rc"
"""
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def remote_command(argv: list[str], env: Mapping[str, str] | None = None, *, guard: bool = True,
                   merge_stderr: bool = False) -> str:
    """The exact string sent to sshd for `argv`: built only with shlex.join. `env` becomes an
    `env K=V` prefix because sshd refuses most variables (AcceptEnv)."""
    inner = list(argv)
    if not inner:
        raise ValueError("empty command")
    if env:
        for k, v in env.items():
            if not _ENV_KEY.match(k):
                raise ValueError(f"environment variable name {k!r} is not a valid shell name")
            if "\0" in v:
                raise ValueError(f"environment variable {k} contains a NUL byte")
        if "=" in inner[0]:
            raise ValueError(f"command {inner[0]!r} contains '=' and would be read as a variable by env")
        inner = ["env", *(f"{k}={v}" for k, v in env.items()), *inner]
    if guard:
        inner = ["sh", "-c", _GUARD, "atomdeck", "merge" if merge_stderr else "split", *inner]
    return shlex.join(inner)
