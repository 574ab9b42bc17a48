"""Real OpenSSH sshd daemons on 127.0.0.1 high ports, each in its own directory, plus an in-process
asyncssh server and a tiny HTTP server. Nothing here talks to anything but loopback."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = "/usr/sbin/sshd"
USER = getpass.getuser()


def ensure_sshd() -> None:
    """sshd must exist: install it as root (without starting services), else skip, or fail on CI."""
    if not os.path.exists(SSHD) and os.getuid() == 0 and shutil.which("apt-get"):
        # policy-rc.d keeps the package's postinst from starting sshd (no systemd here).
        prc = Path("/usr/sbin/policy-rc.d")
        ours = not prc.exists()
        if ours:
            prc.write_text("#!/bin/sh\nexit 101\n")
            prc.chmod(0o755)
        try:
            subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True)
            subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openssh-server"],
                           check=False, capture_output=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        finally:
            if ours:
                prc.unlink(missing_ok=True)
    if not os.path.exists(SSHD):
        msg = f"{SSHD} is missing and cannot be installed here (not root or no apt-get)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


@dataclass(frozen=True)
class Keypair:
    path: Path  # private key; path.with_suffix(".pub") is the public one
    pub: str  # "ssh-ed25519 AAAA... comment"
    fingerprint: str  # "SHA256:..."


def keygen(path: Path, comment: str = "atomdeck-test") -> Keypair:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)
    pub = Path(f"{path}.pub").read_text().strip()
    fp = subprocess.run(["ssh-keygen", "-lf", f"{path}.pub", "-E", "sha256"], check=True, capture_output=True,
                        text=True).stdout.split()[1]
    return Keypair(path, pub, fp)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == pid]


def processes_matching(marker: str) -> list[int]:
    """PIDs whose command line contains marker (to prove remote commands did not outlive us)."""
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != os.getpid():
            with contextlib.suppress(OSError):
                if marker.encode() in Path(f"/proc/{p}/cmdline").read_bytes():
                    out.append(int(p))
    return out


class Sshd:
    """One OpenSSH sshd in the foreground (-D -e), logging to its own file."""

    def __init__(self, root: Path, host_key: Keypair, authorized: list[str], *, port: int | None = None,
                 log_level: str = "INFO", extra: str = ""):
        self.dir = root
        root.mkdir(parents=True, exist_ok=True)
        self.host_key = host_key
        self.port = port or free_port()
        self.log = root / "sshd.log"
        (root / "authorized_keys").write_text("".join(k + "\n" for k in authorized))
        self.config = root / "sshd_config"
        self.config.write_text(f"""ListenAddress 127.0.0.1
Port {self.port}
HostKey {host_key.path}
AuthorizedKeysFile {root / 'authorized_keys'}
PidFile none
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
X11Forwarding no
UseDNS no
LogLevel {log_level}
{extra}
""")
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> Sshd:
        if os.getuid() == 0:  # sshd's privilege-separation dir; another test run's teardown may remove it
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        start_at = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.config)], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=logf, start_new_session=True)
        want = f"Server listening on 127.0.0.1 port {self.port}"
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[start_at:].decode(errors="replace")
            if want in text:
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited {self.proc.returncode}: {text}")
            time.sleep(0.005)
        raise RuntimeError(f"sshd did not listen on {self.port}: {self.log.read_text()}")

    def connection_pids(self) -> list[int]:
        """The per-connection sshd processes (children of the listener)."""
        return children_of(self.pid) if self.proc and self.proc.poll() is None else []

    def kill_connections(self) -> list[int]:
        pids = self.connection_pids()
        for p in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        return pids

    def stop(self) -> None:
        """Kill the listener and its per-connection children, as a crashed or rebooted host would."""
        if self.proc is None or self.proc.poll() is not None:
            return
        kids = self.connection_pids()
        self.proc.kill()
        self.proc.wait()
        for p in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def logins(self) -> int:
        """Successful logins so far: one per TCP connection that authenticated."""
        return self.log_text().count("Accepted publickey")

    def known_hosts_line(self, key: Keypair | None = None) -> str:
        k = key or self.host_key
        return f"[127.0.0.1]:{self.port} {' '.join(k.pub.split()[:2])}\n"


# ------------------------------------------------------------------------- in-process asyncssh


class InprocServer:
    """asyncssh server that runs each command with /bin/sh in its own process group; counts the
    TCP connections it accepted. Faster than sshd for many small commands."""

    def __init__(self) -> None:
        self.connections = 0
        self.port = 0
        self._server: object = None

    async def start(self, host_key: Keypair, client_pub: Path) -> InprocServer:
        import asyncssh

        outer = self

        class _Server(asyncssh.SSHServer):
            def connection_made(self, conn: object) -> None:
                outer.connections += 1

        self._server = await asyncssh.create_server(
            _Server, "127.0.0.1", 0, server_host_keys=[str(host_key.path)],
            authorized_client_keys=str(client_pub), process_factory=self._handle, encoding=None)
        self.port = self._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    @staticmethod
    async def _handle(process: object) -> None:
        p = await asyncio.create_subprocess_shell(
            process.command or "true", stdin=asyncio.subprocess.PIPE,  # type: ignore[attr-defined]
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)

        async def pump_in() -> None:
            with contextlib.suppress(Exception):
                while data := await process.stdin.read(65536):  # type: ignore[attr-defined]
                    p.stdin.write(data)
                    await p.stdin.drain()
            with contextlib.suppress(Exception):
                p.stdin.close()  # the client hung up: EOF for the command, as sshd does

        async def pump_out(src: asyncio.StreamReader, dst: object) -> None:
            while data := await src.read(65536):
                dst.write(data)  # type: ignore[attr-defined]

        feeder = asyncio.ensure_future(pump_in())
        try:
            await asyncio.gather(pump_out(p.stdout, process.stdout), pump_out(p.stderr, process.stderr))  # type: ignore
            rc = await p.wait()
            process.exit(rc if rc >= 0 else 128 - rc)  # type: ignore[attr-defined]
        finally:
            feeder.cancel()
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # type: ignore[attr-defined]
            await self._server.wait_closed()  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------------ HTTP


async def http_server(body: Callable[[], bytes] = lambda: b"hello") -> tuple[asyncio.Server, int]:
    """A one-route HTTP/1.0 server on 127.0.0.1 (the "node port" probes look at)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            await reader.readuntil(b"\r\n\r\n")
            data = body()
            writer.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]
