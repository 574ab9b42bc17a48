"""What the SSH config makes of a target, which known_hosts files vouch for it, and the message
when a host key is unknown or changed. An unknown or changed key is refused, never accepted."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from .target import HostKeyChanged, HostKeyUnknown, SshConfigError, SshError, SshTarget

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"




def resolve_config(t: SshTarget) -> dict[str, Any]:
    """What the ssh config makes of the target: host, port, user, ProxyJump, UserKnownHostsFile."""
    import asyncssh

    try:
        o = asyncssh.SSHClientConnectionOptions(
            config=[t.ssh_config] if t.ssh_config else (), host=t.host, port=t.port if t.port else (),
            username=t.user if t.user else (), client_keys=None, known_hosts=None)
    except (OSError, ValueError, asyncssh.ConfigParseError) as exc:
        raise SshConfigError(f"cannot read the SSH config for {t.name} ({t.ssh_config or '~/.ssh/config'}): "
                             f"{exc}", t.name) from None
    jump = o.tunnel if isinstance(o.tunnel, str) and o.tunnel.lower() != "none" else None
    return {"host": o.host, "port": o.port, "user": o.username, "proxyjump": jump,
            "known_hosts": o.config.get("UserKnownHostsFile", ())}


def describe_resolved(t: SshTarget, opts: dict[str, Any]) -> str:
    via = f" via {t.jump.name}" if t.jump else ""
    label = f"{t.label} " if t.label and t.label != opts["host"] else ""
    return f"{label}({opts['user']}@{opts['host']}:{opts['port']}{via})" if label else \
        f"{opts['user']}@{opts['host']}:{opts['port']}{via}"


def known_hosts_paths(t: SshTarget, opts: dict[str, Any]) -> list[str]:
    if t.known_hosts:
        return [os.path.expanduser(t.known_hosts)]
    configured = [os.path.expanduser(p) for p in opts["known_hosts"] if p.lower() != "none"]
    return configured or [os.path.expanduser(DEFAULT_KNOWN_HOSTS)]


def read_known_hosts(paths: list[str]) -> bytes:
    # We hand asyncssh the bytes, not the paths: a missing file must mean "no keys trusted", while
    # asyncssh would treat an empty value as "fall back to ~/.ssh/known_hosts".
    data = b""
    for p in paths:
        with contextlib.suppress(OSError):
            data += Path(p).read_bytes() + b"\n"
    return data + b"# atomdeck: end of known hosts\n"


def host_key_error(t: SshTarget, opts: dict[str, Any], seen: dict[str, Any], paths: list[str],
                    data: bytes, exc: Exception) -> SshError:
    import asyncssh

    files = " or ".join(paths)
    key = seen.get("key")
    if key is None:  # revoked key, certificate problem: asyncssh's reason is the best we have
        return HostKeyUnknown(f"refusing {t.describe()}: {exc}; check {files}", t.name)
    host, addr, port = seen["host"], seen.get("addr") or "", seen["port"]
    fp = key.get_fingerprint("sha256")
    shown = f"{t.name} ({host})" if t.name != host else host
    if addr and addr != host:
        shown += f" [{addr}]"
    trusted = asyncssh.match_known_hosts(data, host, addr, None if port == 22 else port)[0]
    entry = host if port == 22 else f"[{host}]:{port}"
    if trusted:
        old = ", ".join(dict.fromkeys(k.get_fingerprint("sha256") for k in trusted))
        return HostKeyChanged(
            f"REFUSED: the host key of {shown} has CHANGED. {files} has {old}, the server now offers "
            f"{key.get_algorithm()} {fp}. This is expected only if {t.name} was reinstalled; confirm with its "
            f"administrator, then remove the old key with: ssh-keygen -R '{entry}' -f {paths[0]} and add "
            f"the new one with ssh-keyscan as for a new host", t.name)
    scan = f"ssh-keyscan -p {port} {host}"
    if t.jump is not None:  # the node may be unreachable from here: scan from the jump host
        j = resolve_config(t.jump)
        scan = f"ssh -p {j['port']} {j['user']}@{j['host']} {scan}"
    return HostKeyUnknown(
        f"REFUSED: the host key of {shown} is not in {files}; check its fingerprint {key.get_algorithm()} "
        f"{fp} (ask its administrator, or `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` on it) and add it "
        f"with: {scan} >> {paths[0]}", t.name)
