"""Unreachable hosts, timeouts, dropped connections, keepalive, and reconnecting with back-off."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time

import pytest
from atomdeck.core.remote.ssh import Backoff, ConnState, SshConnectionLost, SshRunner, SshUnreachable

from .harness import free_port

pytestmark = pytest.mark.timeout(30)


async def test_connect_timeout_on_a_silent_socket(sshd, target):
    """A local socket that accepts TCP but never speaks SSH (a black-holed sshd)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        t = target(sshd, port=silent.getsockname()[1], connect_timeout_s=0.5, label="mia1-p01-g02")
        r = SshRunner(t)
        states: list[ConnState] = []
        r.watch(states.append)
        t0 = time.monotonic()
        with pytest.raises(SshUnreachable) as err:
            await r.run(["true"])
        took = time.monotonic() - t0
    assert took > 0.4  # the timeout fired (not a refusal); how long a black hole costs: bench/README.md notes
    msg = str(err.value)
    assert "mia1-p01-g02" in msg and "no SSH answer" in msg and "within 0.5 s" in msg and "connect_timeout_s" in msg
    assert [s.state for s in states] == ["connecting", "failed"]
    assert states[-1].reason == msg and states[-1].host == "mia1-p01-g02"


async def test_refused_port(sshd, target):
    with pytest.raises(SshUnreachable, match="connection refused. Check that sshd runs"):
        await SshRunner(target(sshd, port=free_port())).run(["true"])


async def test_not_an_ssh_server(sshd, target):
    async def http_only(reader, writer):
        writer.write(b"HTTP/1.0 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(http_only, "127.0.0.1", 0)
    try:
        with pytest.raises(SshUnreachable):
            await SshRunner(target(sshd, port=server.sockets[0].getsockname()[1])).run(["true"])
    finally:
        server.close()


async def test_jump_host_cannot_reach_the_node(login_sshd, target):
    node = SshRunner(target(login_sshd, port=free_port(), jump=target(login_sshd, label="mia1-login"),
                            label="mia1-p01-g03"))
    with pytest.raises(SshUnreachable, match="mia1-login could not connect to it"):
        await node.run(["true"])


async def test_jump_host_failure_names_the_jump(sshd, target):
    node = SshRunner(target(sshd, jump=target(sshd, port=free_port(), label="mia1-login"), label="mia1-p01-g03"))
    with pytest.raises(SshUnreachable, match="cannot reach .*mia1-p01-g03.* its jump host failed: .*mia1-login"):
        await node.run(["true"])


async def test_dropped_connection_fails_the_command_then_reconnects(sshd, target):
    r = SshRunner(target(sshd))
    states: list[ConnState] = []
    r.watch(states.append)
    await r.connect()
    running = asyncio.ensure_future(r.run(["sleep", "20"]))
    await asyncio.sleep(0.3)
    assert sshd.kill_connections()
    with pytest.raises(SshConnectionLost, match="while running `sleep 20`"):
        await asyncio.wait_for(running, 5)
    assert (await r.run(["echo", "back"])).stdout == "back\n"  # the next use reconnects
    assert r.connection.connects == 2 and sshd.logins() == 2
    assert [s.state for s in states] == ["connecting", "up", "lost", "reconnecting", "up"]


async def test_reconnect_with_backoff_while_sshd_is_down(sshd, target):
    bo = Backoff(first_s=0.05, factor=2.0, max_s=0.4, give_up_s=8.0)
    r = SshRunner(target(sshd, backoff=bo))
    states: list[ConnState] = []
    r.watch(states.append)
    await r.connect()
    sshd.stop()
    await _until(lambda: r.state.state == "lost")
    job = asyncio.ensure_future(r.run(["echo", "survived"]))
    await _until(lambda: sum(s.state == "reconnecting" for s in states) >= 6, timeout=20)  # past the cap
    assert not job.done()
    tries = [s for s in states if s.state == "reconnecting"]
    assert len(tries) >= 4 and "refused" in tries[-1].reason
    # the wait planned (and slept) before each attempt: none before the first, then first_s doubling,
    # capped at max_s (the schedule itself, not wall-clock gaps a loaded machine stretches)
    planned = [s.delay_s for s in tries]
    assert planned == pytest.approx([0.0, 0.05, 0.1, 0.2] + [0.4] * (len(tries) - 4))
    assert planned[-1] > planned[1] and max(planned) == pytest.approx(bo.max_s)  # grows, capped at max_s
    # the last attempt counted above may still be under way: let it fail, so the one that succeeds is later
    await _until(lambda: sum(s.state == "reconnecting" for s in states) > len(tries), timeout=20)
    sshd.start()
    assert (await asyncio.wait_for(job, 30)).stdout == "survived\n"  # the queued command ran once it was back
    all_tries = [s for s in states if s.state == "reconnecting"]
    assert states[-1].state == "up" and states[-1].attempt == len(all_tries) > len(tries)


async def test_gives_up_after_give_up_s(sshd, target):
    r = SshRunner(target(sshd, backoff=Backoff(first_s=0.05, max_s=0.1, give_up_s=0.5)))
    await r.connect()
    sshd.stop()
    await _until(lambda: r.state.state == "lost")
    t0 = time.monotonic()
    with pytest.raises(SshUnreachable, match="connection refused"):
        await r.run(["true"])
    assert time.monotonic() - t0 > 0.3  # it tried for give_up_s before giving up
    assert r.state.state == "failed"


async def test_queued_callers_share_a_failed_round(sshd, target):
    """Ten commands waiting on one dead host get one back-off round, not ten in a row."""
    r = SshRunner(target(sshd, backoff=Backoff(first_s=0.05, max_s=0.1, give_up_s=0.4)))
    await r.connect()
    sshd.stop()
    await _until(lambda: r.state.state == "lost")
    states: list[ConnState] = []
    r.watch(states.append)
    results = await asyncio.gather(*(r.run(["true"]) for _ in range(10)), return_exceptions=True)
    assert all(isinstance(x, SshUnreachable) for x in results)
    # one round, not ten: the attempts start from 1 once, and the round ends failed once
    assert [s.attempt for s in states if s.state == "reconnecting"][:1] == [1]
    assert sum(s.state == "reconnecting" and s.attempt == 1 for s in states) == 1
    assert sum(s.state == "failed" for s in states) == 1


async def test_keepalive_notices_a_hung_server(sshd, target):
    r = SshRunner(target(sshd, keepalive_s=0.2, keepalive_count_max=2))
    await r.connect()
    [child] = sshd.connection_pids()
    os.kill(child, signal.SIGSTOP)  # the host hangs: TCP stays up, nothing answers
    try:
        await _until(lambda: r.state.state == "lost", timeout=30)  # by the keepalives (how soon: bench notes)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


async def _until(cond, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
