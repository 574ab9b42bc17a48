"""The handshake probe "from the consumer's node" on the local launcher, whose nodes are addresses of this
machine: the connects are made in the watcher's own process (node_probes.connect_here), with the answers
of the command a remote node runs (`python3 -c`), and no process is started for them. Before, each decode
of a local 64P64D started an interpreter (each in a session, so a scheduling group, of its own)."""

from __future__ import annotations

import asyncio
import socket

from atomdeck.core.launch.local import LocalLauncher
from atomdeck.core.remote.node_probes import HERE_AT_ONCE, connect_from_node, connect_here
from atomdeck.core.remote.shell import LocalRunner
from atomdeck.core.run.watchers.pairs import HandshakeWatcher

from .test_pairs import one_prefill_two_decodes


def listener(host: str = "127.0.0.1", family: int = socket.AF_INET, backlog: int = 8) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen(backlog)
    return s


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def full_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A listener that accepts nothing and whose queue is full: a new connect gets no answer (timeout)."""
    s = listener(backlog=0)
    fillers = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(s.getsockname())
        fillers.append(c)
    return s, fillers


def test_connects_made_here_answer_as_the_command_on_the_node():
    opened, full = listener(), full_listener()
    v6 = None
    try:
        v6 = listener("::1", socket.AF_INET6)
    except OSError:  # no IPv6 loopback on this machine
        pass
    targets = [("127.0.0.1", opened.getsockname()[1]), ("127.0.0.1", closed_port()),
               ("127.0.0.1", full[0].getsockname()[1])]
    if v6 is not None:
        targets.append(("::1", v6.getsockname()[1]))

    async def node_run(argv: list[str], timeout: float):
        return await LocalRunner().run(argv, timeout=timeout)

    async def both():
        return await connect_here(targets, 0.5), await connect_from_node(node_run, targets, 0.5)

    try:
        here, there = asyncio.run(both())
    finally:
        for s in [opened, full[0], *full[1], *([v6] if v6 else [])]:
            s.close()
    assert here == there
    assert [here[t] for t in targets[:3]] == ["open", "refused", "timeout"]
    if v6 is not None:
        assert here[targets[3]] == "open"


def test_the_handshake_probe_on_the_local_launcher_starts_no_process(monkeypatch, tmp_path):
    run = one_prefill_two_decodes()
    run.launcher = LocalLauncher(run.id, str(tmp_path))
    opened = listener()
    targets = [("127.0.0.1", opened.getsockname()[1]), ("127.0.0.1", closed_port())]
    started: list = []
    real = asyncio.create_subprocess_exec

    async def counted(*argv, **kw):
        started.append(argv)
        return await real(*argv, **kw)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", counted)
    decode = run.plan.role_endpoints("decode")[0]
    try:
        results, where = asyncio.run(HandshakeWatcher(run, None).reach(decode.node, targets))  # type: ignore[arg-type]
    finally:
        opened.close()
    assert started == []
    assert results == {targets[0]: "open", targets[1]: "refused"}
    assert where == f"{decode.node} (the consumer's node)"


def test_more_targets_than_connects_at_once_are_each_answered():
    n = 5 * HERE_AT_ONCE
    opened = listener(backlog=512)
    port = opened.getsockname()[1]
    targets = [(f"127.0.{i // 200}.{i % 200 + 1}", port) for i in range(n)]
    try:
        got = asyncio.run(connect_here(targets, 1.0))
    finally:
        opened.close()
    # the listener is bound to 127.0.0.1 only: the other loopback addresses refuse
    assert got[("127.0.0.1", port)] == "open"
    assert sorted(set(got.values())) == ["open", "refused"] and list(got.values()).count("open") == 1
    assert len(got) == n


def pending(s: socket.socket) -> int:
    """Connections waiting in the listener's queue (each a connect that got in), taken out."""
    s.setblocking(False)
    n = 0
    while True:
        try:
            s.accept()[0].close()
        except BlockingIOError:
            return n
        n += 1


def test_a_port_open_for_one_node_is_open_for_the_next_without_another_connect(tmp_path, monkeypatch):
    """The local launcher's nodes are all this machine: a 64P64D's 64 decodes asked about the same 512
    handshake ports within seconds, 32,768 connects. A port that let one in lately is not connected again; a
    port that did not is tried again (it may have opened since)."""
    import atomdeck.core.launch.local as local

    launcher = LocalLauncher("r", str(tmp_path))
    opened = listener()
    later = socket.socket()
    later.bind(("127.0.0.1", 0))
    a, b = ("127.0.0.1", opened.getsockname()[1]), ("127.0.0.1", later.getsockname()[1])
    try:
        assert asyncio.run(launcher.connect_from("127.0.1.10", [a, b])) == {a: "open", b: "refused"}
        assert pending(opened) == 1
        later.listen(8)
        assert asyncio.run(launcher.connect_from("127.0.1.11", [a, b])) == {a: "open", b: "open"}
        assert (pending(opened), pending(later)) == (0, 1)
        monkeypatch.setattr(local, "OPEN_FOR_S", 0.0)  # past the time an answer is shared: connected again
        assert asyncio.run(launcher.connect_from("127.0.1.12", [a, b])) == {a: "open", b: "open"}
        assert (pending(opened), pending(later)) == (1, 1)
    finally:
        opened.close()
        later.close()


def test_a_failed_connect_gets_one_word_for_both_probes():
    """probes.tcp_probe and connect_here name a failed connect with the same helper."""
    import errno

    from atomdeck.core.remote.probes import connect_failed

    assert connect_failed(TimeoutError()) == "timeout"
    assert connect_failed(OSError(errno.ETIMEDOUT, "Connection timed out")) == "timeout"
    assert connect_failed(ConnectionRefusedError()) == "refused"
    assert connect_failed(OSError(errno.ECONNREFUSED, "Connection refused")) == "refused"
    assert connect_failed(OSError(errno.ENETUNREACH, "Network is unreachable")) == "unreachable"
    assert connect_failed(OSError(errno.EHOSTUNREACH, "No route to host")) == "unreachable"
    assert connect_failed(RuntimeError("Channel open failed")) == "refused"  # an SSH channel's refusal
    assert connect_failed(OSError(errno.EIO, "open failed")) == "unreachable"
