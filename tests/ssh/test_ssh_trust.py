"""Host keys, logins and ssh config: refuse what is not trusted, say how to fix it, never write ~/.ssh."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from atomdeck.core.config.errors import AtomdeckError
from atomdeck.core.remote.ssh import (
    HostKeyChanged,
    HostKeyUnknown,
    SshAuthFailed,
    SshConfigError,
    SshRunner,
    SshTarget,
)

from .harness import USER

pytestmark = pytest.mark.timeout(30)


async def test_known_host_is_accepted(sshd, target):
    r = SshRunner(target(sshd))
    assert (await r.run(["echo", "trusted"])).stdout == "trusted\n"
    assert r.state.state == "up"


async def test_unknown_host_key_is_refused_with_the_fix(sshd, target, known_hosts, keys):
    kh = known_hosts(name="empty_known_hosts")
    r = SshRunner(target(sshd, known_hosts=kh, label="mia1-p01-g01"))
    states = []
    r.watch(states.append)
    with pytest.raises(HostKeyUnknown) as err:
        await r.run(["true"])
    msg = str(err.value)
    assert isinstance(err.value, AtomdeckError)
    assert "mia1-p01-g01 (127.0.0.1)" in msg and f"is not in {kh}" in msg
    assert keys.host.fingerprint in msg
    fix = f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {kh}"
    assert fix in msg
    assert Path(kh).read_text() == ""  # refused, not added
    assert [s.state for s in states] == ["connecting", "failed"]  # permanent: no retries
    assert sshd.logins() == 0
    # The suggested command really is the fix (ssh-keyscan to loopback only).
    await asyncio.to_thread(subprocess.run, fix, shell=True, check=True, capture_output=True)
    assert (await SshRunner(target(sshd, known_hosts=kh, port=sshd.port)).run(["echo", "ok"])).stdout == "ok\n"


async def test_unknown_host_names_the_default_known_hosts(sshd, target, clean_home):
    r = SshRunner(target(sshd, known_hosts=None))
    with pytest.raises(HostKeyUnknown, match=f"is not in {clean_home}/.ssh/known_hosts"):
        await r.run(["true"])
    # clean_home asserts at teardown that ~/.ssh was not created


async def test_changed_host_key_is_refused(sshd, target, known_hosts, keys):
    kh = known_hosts(name="kh_changed", extra=sshd.known_hosts_line(keys.impostor))
    with pytest.raises(HostKeyChanged) as err:
        await SshRunner(target(sshd, known_hosts=kh)).run(["true"])
    msg = str(err.value)
    assert "CHANGED" in msg and keys.impostor.fingerprint in msg and keys.host.fingerprint in msg
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {kh}" in msg
    assert sshd.logins() == 0


async def test_hashed_known_hosts_are_honoured(sshd, target, known_hosts):
    kh = known_hosts(sshd, name="kh_hashed")
    await asyncio.to_thread(subprocess.run, ["ssh-keygen", "-q", "-H", "-f", kh], check=True, capture_output=True)
    assert "|1|" in Path(kh).read_text()
    assert (await SshRunner(target(sshd, known_hosts=kh)).run(["true"])).ok


async def test_auth_failure_names_host_and_what_to_check(sshd, target, keys):
    with pytest.raises(SshAuthFailed) as err:
        await SshRunner(target(sshd, identity=str(keys.stranger.path))).run(["true"])
    msg = str(err.value)
    assert f"{USER}@127.0.0.1:{sshd.port}" in msg
    assert str(keys.stranger.path) in msg and "authorized_keys" in msg and "agent" in msg
    assert "Traceback" not in msg


async def test_missing_identity_file_is_a_config_error(sshd, target, tmp_path):
    with pytest.raises(SshConfigError, match="ssh.identity"):
        await SshRunner(target(sshd, identity=str(tmp_path / "nope"))).run(["true"])


async def test_agent_login(sshd, target, agent):
    r = SshRunner(target(sshd, identity=None))  # no key file: the agent has it
    assert (await r.run(["echo", "via agent"])).stdout == "via agent\n"


async def test_agent_forwarding_is_off_unless_asked(sshd, target, agent):
    off = await SshRunner(target(sshd, identity=None)).run(["sh", "-c", 'echo "[$SSH_AUTH_SOCK]"'])
    on = await SshRunner(target(sshd, identity=None, agent_forwarding=True)).run(
        ["sh", "-c", 'echo "[$SSH_AUTH_SOCK]"; ssh-add -l'])
    assert off.stdout == "[]\n"
    assert on.stdout.startswith("[/") and "client" in on.stdout  # the forwarded agent lists our key


async def test_ssh_config_alias(sshd, keys, known_hosts, tmp_path):
    kh = known_hosts(sshd, name="kh_cfg")
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"""Host mia1-login
  HostName 127.0.0.1
  Port {sshd.port}
  User {USER}
  IdentityFile {keys.client.path}
  UserKnownHostsFile {kh}
Host untrusted
  HostName 127.0.0.1
  Port {sshd.port}
  User {USER}
  IdentityFile {keys.client.path}
  UserKnownHostsFile {tmp_path / 'other_known_hosts'}
""")
    r = SshRunner(SshTarget("mia1-login", ssh_config=str(cfg)))
    assert (await r.run(["echo", "from config"])).stdout == "from config\n"
    with pytest.raises(HostKeyUnknown, match=f"is not in {tmp_path / 'other_known_hosts'}"):
        await SshRunner(SshTarget("untrusted", ssh_config=str(cfg))).run(["true"])


async def test_ssh_config_that_disables_checking_is_not_obeyed(sshd, keys, tmp_path):
    """`StrictHostKeyChecking no` + `UserKnownHostsFile /dev/null` (common in lab configs) must not
    turn into a silent accept."""
    cfg = tmp_path / "lax_config"
    cfg.write_text(f"Host lax\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {USER}\n"
                   f"  IdentityFile {keys.client.path}\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n")
    with pytest.raises(HostKeyUnknown, match="/dev/null"):
        await SshRunner(SshTarget("lax", ssh_config=str(cfg))).run(["true"])


async def test_unknown_node_behind_a_jump_is_scanned_from_the_jump(sshd, login_sshd, target, known_hosts):
    """The node may be unreachable from here, so the fix runs ssh-keyscan on the login host."""
    login = target(login_sshd, label="mia1-login")
    only_login = known_hosts(login_sshd, name="kh_login_only")
    node = SshRunner(target(sshd, jump=login, known_hosts=only_login, label="mia1-p01-g01"))
    with pytest.raises(HostKeyUnknown) as err:
        await node.run(["true"])
    fix = f"ssh -p {login_sshd.port} {USER}@127.0.0.1 ssh-keyscan -p {sshd.port} 127.0.0.1 >> {only_login}"
    assert fix in str(err.value)
    assert login_sshd.logins() == 1 and sshd.logins() == 0  # the jump was trusted and used
