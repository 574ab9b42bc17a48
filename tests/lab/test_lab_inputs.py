"""Cluster-file inputs against the lab's real sshd (issue 17.8)."""

from __future__ import annotations

import asyncio

import pytest
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.remote.ssh.runner import ssh_runner_for_login

pytestmark = [pytest.mark.lab]

LAB_SSH = "/var/lib/atomdeck-lab/ssh"


def test_an_explicit_port_22_overrides_port_2222_from_the_ssh_config(lab, tmp_path):
    config = tmp_path / "ssh_config"
    # OpenSSH takes the first value it reads: this Port 2222 would win over the lab's Port 22 below
    config.write_text("Host mia1-login\n  Port 2222\n\n" + open(f"{LAB_SSH}/ssh_config").read())

    def hostname(port_line: str) -> tuple[bool, str]:
        cluster = parse_cluster(f"name: c\nlauncher: slurm\nlogin:\n  host: mia1-login\n{port_line}"
                                f"  ssh_config: {config}\n  known_hosts: {LAB_SSH}/known_hosts\n"
                                "ssh: {connect_timeout_s: 3}\n")

        async def go():
            runner = ssh_runner_for_login(cluster)
            try:
                res = await runner.run(["hostname"], timeout=20)
                return res.ok, res.stdout.strip()
            except Exception as e:
                return False, str(e)
            finally:
                await runner.close()

        return asyncio.run(go())

    assert hostname("  port: 22\n") == (True, "mia1-login")
    ok, why = hostname("")  # unset: the ssh config's Port 2222 applies, and nothing listens there
    assert not ok and "2222" in why, why
