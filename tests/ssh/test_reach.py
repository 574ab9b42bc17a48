"""Does a cluster answer (core/run/reach.py)? Against real sshd daemons on loopback, a closed port and a port that
accepts and then says nothing: a cluster that does not answer is named with why, within its timeout, and a
cluster that answers is never held up by it."""

from __future__ import annotations

import asyncio
import socket

import pytest
from atomdeck.core.config.cluster import Cluster
from atomdeck.core.run.reach import check, check_all

from .harness import USER, free_port


def ssh_cluster(name: str, port: int, keys, known_hosts: str, timeout: float = 3.0) -> Cluster:
    login = {"host": "127.0.0.1", "port": port, "user": USER, "identity": str(keys.client.path),
             "known_hosts": known_hosts}
    return Cluster.model_validate({
        "name": name, "launcher": "ssh", "login": login,
        "ssh": {"via_login": True, "connect_timeout_s": timeout},
        "nodes": [{"name": "n1", "addr": "127.0.0.1"}]})


@pytest.fixture
def silent_port():
    """A loopback port that accepts connections and never says a word (a host whose sshd hangs)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield srv.getsockname()[1]
    srv.close()


async def test_an_ssh_cluster_whose_login_host_answers(sshd, keys, known_hosts):
    r = await check(ssh_cluster("up", sshd.port, keys, known_hosts(sshd)))
    assert r.answers and r.detail == "login host 127.0.0.1", r


async def test_a_closed_port_is_named_at_once(keys, known_hosts):
    r = await check(ssh_cluster("gone", free_port(), keys, known_hosts()))
    assert not r.answers and r.detail.startswith("login host 127.0.0.1: "), r
    assert "refused" in r.detail.lower() or "cannot connect" in r.detail.lower(), r


async def test_a_host_that_says_nothing_is_no_answer_within_the_timeout(silent_port, keys, known_hosts):
    r = await check(ssh_cluster("hung", silent_port, keys, known_hosts(), timeout=30), timeout=1.0)
    assert not r.answers and r.detail == "login host 127.0.0.1: no answer within 1 s", r


async def test_a_cluster_that_does_not_answer_never_holds_up_the_others(sshd, silent_port, keys, known_hosts):
    hung = asyncio.create_task(check(ssh_cluster("hung", silent_port, keys, known_hosts(), timeout=30),
                                     timeout=20))
    local = Cluster.model_validate({"name": "local", "launcher": "local", "nodes": [{"name": "a"}]})
    up = ssh_cluster("up", sshd.port, keys, known_hosts(sshd))
    found = await check_all([local, up])
    assert found["local"].answers and found["up"].answers
    assert not hung.done()  # both answered while the hung one still waits
    hung.cancel()


async def test_a_slurm_cluster_through_a_login_host_that_is_gone(keys, known_hosts):
    c = Cluster.model_validate({"name": "far", "launcher": "slurm", "login": {
        "host": "127.0.0.1", "port": free_port(), "user": USER, "identity": str(keys.client.path),
        "known_hosts": known_hosts()}})
    r = await check(c, timeout=5)
    assert not r.answers and r.detail.startswith("login host 127.0.0.1: "), r
