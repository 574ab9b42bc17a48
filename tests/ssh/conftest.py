"""Fixtures for the SSH tests: real sshd daemons on loopback, keys, known_hosts, a clean HOME."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from atomdeck.core.remote import ssh as sshconn
from atomdeck.core.remote.ssh import Backoff, SshTarget

from .harness import USER, InprocServer, Keypair, Sshd, ensure_sshd, keygen

FAST = Backoff(first_s=0.05, factor=2.0, max_s=0.4, give_up_s=5.0)


@dataclass(frozen=True)
class Keys:
    client: Keypair  # authorized on every test sshd
    stranger: Keypair  # authorized nowhere
    host: Keypair  # host key of `sshd`
    host2: Keypair  # host key of `login_sshd`
    impostor: Keypair  # a different key claiming to be `sshd`


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    d = tmp_path_factory.mktemp("keys")
    return Keys(*(keygen(d / n, n) for n in ("client", "stranger", "host", "host2", "impostor")))


@pytest.fixture(autouse=True)
def clean_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A HOME with no ~/.ssh and no agent, so the operator's own files never leak in; and proof
    afterwards that nothing wrote to ~/.ssh."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    yield home
    assert not (home / ".ssh").exists(), "something wrote to ~/.ssh"


@pytest.fixture(autouse=True)
async def close_pool() -> AsyncIterator[None]:
    """Each test has its own event loop: close its pooled connections before the loop goes."""
    yield
    await sshconn.close_all()


@pytest.fixture
def sshd(tmp_path: Path, keys: Keys) -> Iterator[Sshd]:
    ensure_sshd()
    d = Sshd(tmp_path / "sshd", keys.host, [keys.client.pub]).start()
    yield d
    d.stop()


@pytest.fixture
def login_sshd(tmp_path: Path, keys: Keys) -> Iterator[Sshd]:
    """A second sshd acting as the login host; DEBUG1 so its log shows the direct-tcpip opens."""
    ensure_sshd()
    d = Sshd(tmp_path / "login", keys.host2, [keys.client.pub], log_level="DEBUG1").start()
    yield d
    d.stop()


@pytest.fixture
def known_hosts(tmp_path: Path) -> Callable[..., str]:
    """known_hosts(*sshds) -> path of a file trusting exactly those daemons' host keys."""

    def make(*daemons: Sshd | InprocServer, name: str = "known_hosts", extra: str = "") -> str:
        path = tmp_path / name
        lines = []
        for d in daemons:
            if isinstance(d, Sshd):
                lines.append(d.known_hosts_line())
        path.write_text("".join(lines) + extra)
        return str(path)

    return make


@pytest.fixture
def target(keys: Keys, known_hosts: Callable[..., str]) -> Callable[..., SshTarget]:
    """target(sshd, **overrides) -> an SshTarget for a test daemon, trusting it, with fast back-off."""

    def make(d: Sshd, **kw: Any) -> SshTarget:
        base: dict[str, Any] = {"host": "127.0.0.1", "port": d.port, "user": USER,
                                "identity": str(keys.client.path), "connect_timeout_s": 3.0, "backoff": FAST}
        if "known_hosts" not in kw:
            base["known_hosts"] = known_hosts(d, name=f"kh-{d.port}")
        return SshTarget(**{**base, **kw})

    return make


@pytest.fixture
def agent(tmp_path: Path, keys: Keys, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private ssh-agent (a local Unix socket) holding the client key; SSH_AUTH_SOCK points at it."""
    if not shutil.which("ssh-agent"):  # Debian's openssh-client; tests/run installs it as root
        if os.environ.get("CI") == "true":
            pytest.fail("ssh-agent is not installed (openssh-client) but CI must run the agent test")
        pytest.skip("ssh-agent is not installed")
    sock = tmp_path / "agent.sock"
    proc = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", str(keys.client.path)], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        yield str(sock)
    finally:
        proc.kill()
        proc.wait()
