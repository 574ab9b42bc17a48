"""The connection pool: reuse, the MaxSessions limit, ProxyJump, direct-tcpip, the cluster factories."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from atomdeck.core.config.cluster import Cluster, LoginHost, SshSpec, StaticNode
from atomdeck.core.remote.ssh import (
    SshRunner,
    SshTarget,
    pooled_connections,
    ssh_runner_for_login,
    ssh_runner_for_node,
)
from atomdeck.core.remote.ssh.connection import MAX_SESSIONS

from .harness import USER, InprocServer, http_server

pytestmark = pytest.mark.timeout(30)


def _direct_tcpip(daemon, port: int) -> int:
    """How many direct-tcpip channels to 127.0.0.1:port the (DEBUG1) daemon opened."""
    pattern = re.compile(rf"server_request_direct_tcpip: .*target 127\.0\.0\.1 port {port}\b")
    return sum(1 for ln in daemon.log_text().splitlines() if pattern.search(ln))


async def test_one_connection_shared_by_runners(sshd, target):
    t = target(sshd)
    a, b = SshRunner(t), SshRunner(replace(t, label="other name"))
    results = await asyncio.gather(*(r.run(["echo", str(i)]) for i, r in enumerate([a, b] * 6)))
    assert [res.stdout for res in results] == [f"{i}\n" for i in range(12)]
    assert sshd.logins() == 1
    assert a.connection is b.connection and a.connection.connects == 1
    await a.close()
    assert len(pooled_connections()) == 1  # b still holds it
    await b.close()
    assert pooled_connections() == []


async def test_reuse_counted_by_the_server(keys, known_hosts):
    """The in-process server counts accepted TCP connections itself."""
    srv = await InprocServer().start(keys.host, Path(f"{keys.client.path}.pub"))
    try:
        kh = known_hosts(extra=f"[127.0.0.1]:{srv.port} {' '.join(keys.host.pub.split()[:2])}\n")
        runners = [SshRunner(SshTarget("127.0.0.1", port=srv.port, user=USER, identity=str(keys.client.path),
                                       known_hosts=kh)) for _ in range(3)]
        for _ in range(5):
            await asyncio.gather(*(r.run(["true"]) for r in runners))
        assert srv.connections == 1
    finally:
        for r in runners:
            await r.close()
        await srv.stop()


async def test_channel_limit_queues_beyond_max_sessions(sshd, target):
    r = SshRunner(target(sshd))
    await r.connect()
    t0 = time.monotonic()
    results = await asyncio.gather(*(r.run(["sh", "-c", f"sleep 0.4; echo {i}"]) for i in range(15)))
    elapsed = time.monotonic() - t0
    assert [res.stdout for res in results] == [f"{i}\n" for i in range(15)]
    assert r.connection.peak_channels == MAX_SESSIONS == 10
    assert elapsed >= 0.75  # two waves: the last five waited for free sessions
    assert sshd.logins() == 1

    # Control: without the semaphore this sshd refuses the 11th session, so the test above can fail.
    import asyncssh

    conn = await r.connection.get()
    raw = await asyncio.gather(*(conn.run("sleep 0.3") for _ in range(11)), return_exceptions=True)
    assert any(isinstance(x, asyncssh.ChannelOpenError) for x in raw)


async def test_proxyjump_through_a_login_host(sshd, login_sshd, target):
    login = target(login_sshd, label="mia1-login")
    node = SshRunner(target(sshd, jump=login, label="mia1-p01-g01"))
    assert (await node.run(["echo", "on node"])).stdout == "on node\n"
    assert (await node.run(["echo", "again"])).ok
    assert _direct_tcpip(login_sshd, sshd.port) == 1  # one tunnel, reused
    assert login_sshd.logins() == 1 and sshd.logins() == 1
    # Slurm commands on the login host share the jump's connection.
    login_runner = SshRunner(login)
    assert (await login_runner.run(["true"])).ok
    assert login_sshd.logins() == 1
    assert login_runner.connection is node.connection.jump


async def test_proxyjump_from_ssh_config(sshd, login_sshd, keys, known_hosts, tmp_path):
    kh = known_hosts(sshd, login_sshd, name="kh_both")
    cfg = tmp_path / "ssh_config"
    common = f"  User {USER}\n  IdentityFile {keys.client.path}\n  UserKnownHostsFile {kh}\n"
    cfg.write_text(f"Host login\n  HostName 127.0.0.1\n  Port {login_sshd.port}\n{common}"
                   f"Host node1\n  HostName 127.0.0.1\n  Port {sshd.port}\n  ProxyJump login\n{common}")
    node = SshRunner(SshTarget("node1", ssh_config=str(cfg)))
    assert (await node.run(["echo", "jumped"])).stdout == "jumped\n"
    assert _direct_tcpip(login_sshd, sshd.port) == 1
    assert node.connection.jump is not None and node.connection.jump.target.host == "login"
    assert len(pooled_connections()) == 2


async def test_open_connection_through_the_login_host(sshd, login_sshd, target):
    server, port = await http_server(lambda: b"ready")
    try:
        login = SshRunner(target(login_sshd))
        node = SshRunner(target(sshd, jump=login.target))
        for vantage in (login, node):
            reader, writer = await vantage.open_connection("127.0.0.1", port)
            writer.write(b"GET /readiness HTTP/1.0\r\nHost: x\r\n\r\n")
            await writer.drain()
            reply = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            assert reply.startswith(b"HTTP/1.0 200 OK") and reply.endswith(b"ready")
        assert _direct_tcpip(login_sshd, port) == 1  # the login host itself opened it once...
        assert _direct_tcpip(login_sshd, sshd.port) == 1  # ...and once carried the node's tunnel
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectionRefusedError):
            await login.open_connection("127.0.0.1", port)  # closed port: refused, not an SSH error
    finally:
        server.close()


def _cluster(sshd, login_sshd, keys, kh: str) -> Cluster:
    return Cluster(
        name="lab", launcher="ssh",
        login=LoginHost(host="127.0.0.1", port=login_sshd.port, user=USER, known_hosts=kh,
                        identity=str(keys.client.path)),
        ssh=SshSpec(user=USER, port=sshd.port, known_hosts=kh, identity=str(keys.client.path),
                    connect_timeout_s=3, keepalive_s=5),
        nodes=[StaticNode(name="mia1-p01-g01", addr="127.0.0.1")])


async def test_cluster_factories(sshd, login_sshd, keys, known_hosts):
    cluster = _cluster(sshd, login_sshd, keys, known_hosts(sshd, login_sshd, name="kh_cluster"))
    login = ssh_runner_for_login(cluster)
    node = ssh_runner_for_node(cluster, "mia1-p01-g01")
    assert node.where == "ssh mia1-p01-g01" and node.target.host == "127.0.0.1"
    assert node.target.keepalive_s == 5 and node.target.connect_timeout_s == 3
    assert not node.target.agent_forwarding
    assert (await login.run(["echo", "slurm here"])).ok
    assert (await node.run(["echo", "worker here"])).ok
    assert login_sshd.logins() == 1 and sshd.logins() == 1
    assert _direct_tcpip(login_sshd, sshd.port) == 1  # via_login: the node was reached through the login host
    direct = ssh_runner_for_node(cluster.model_copy(update={"ssh": cluster.ssh.model_copy(
        update={"via_login": False})}), "127.0.0.1")
    assert direct.target.jump is None and (await direct.run(["true"])).ok
