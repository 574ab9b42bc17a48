"""The barrier's floors (issue 19), checked without timing: every cadence here is an hour, so a cell that
opens while the test waits was probed because of the event under test, not because a timer came round.

- a hint (a log line "Starting server on ...") gets a probe at once, not after the fast cadence;
- a hint that arrives while the node's loop is in the middle of a probe is not lost;
- a listen in the node's own socket table (/proc/net/tcp of this namespace) makes the cell open with
  one confirming connect, and no other connect.
Real sockets on loopback; the table is the real /proc/net/tcp."""

from __future__ import annotations

import asyncio
import socket

import pytest
from atomdeck.core.remote.backoff import Backoff
from atomdeck.core.remote.listening import local_table
from atomdeck.core.remote.shell import LocalRunner
from atomdeck.core.run import barrier
from atomdeck.core.run.barrier import BarrierProber
from atomdeck.core.run.events import CellState

HOUR = 3600.0
WAIT = 60.0  # a condition wait; the cadences are an hour


@pytest.fixture
def hourly(monkeypatch):
    """Every cadence of the prober an hour: only the event under test can bring the next probe."""
    slow = Backoff(first_s=HOUR, factor=1.0, max_s=HOUR, give_up_s=None)
    monkeypatch.setattr(barrier, "PROBE_BACKOFF", slow)
    monkeypatch.setattr(barrier, "TABLE_BACKOFF", slow)
    monkeypatch.setattr(barrier, "HINT_FAST", slow, raising=False)
    monkeypatch.setattr(barrier, "FAST", HOUR)


def bound_port() -> socket.socket:
    """A socket bound on 127.0.0.1 but not listening yet: a connect is refused, the table shows nothing."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s


class Gate(LocalRunner):
    """A real local runner whose connects each wait for the test to let them through (to wake the loop
    while a probe is in flight)."""

    def __init__(self):
        super().__init__()
        self.entered = 0
        self.arrived = asyncio.Event()
        self.passes = asyncio.Semaphore(0)

    async def open_connection(self, host, port):
        self.entered += 1
        self.arrived.set()
        await self.passes.acquire()
        return await super().open_connection(host, port)

    async def wait_inside(self, n: int) -> None:
        while self.entered < n:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), WAIT)


async def run_prober(cell: CellState, soon: set[str], runner=None, table=None):
    results: list[str] = []
    changed = asyncio.Event()

    def on_result(c: CellState, r: str) -> None:
        c.state = r
        results.append(r)
        changed.set()

    tables = {"table_for": lambda n: table} if table else {}
    prober = BarrierProber([cell], runner_for=lambda n: runner or LocalRunner(),
                           expected_soon=lambda c: c.key in soon, owner_alive=lambda c: True,
                           on_result=on_result, **tables)
    task = asyncio.create_task(prober.run_node(cell.node))

    async def until(n: int) -> None:
        while len(results) < n:
            changed.clear()
            await asyncio.wait_for(changed.wait(), WAIT)

    return prober, task, results, until


def test_a_hint_probes_at_once(hourly):
    sock = bound_port()
    cell = CellState("n1", "127.0.0.1", sock.getsockname()[1], "decode", "http", "decode-0")

    async def main():
        soon: set[str] = set()
        prober, task, results, until = await run_prober(cell, soon)
        await until(1)  # the first probe: refused, next one in an hour
        sock.listen()
        soon.add(cell.key)  # the process logged "Starting server on ..."
        prober.wake("n1")
        await until(2)
        task.cancel()
        return results, prober.connects["n1"]

    try:
        results, connects = asyncio.run(main())
    finally:
        sock.close()
    assert results == ["refused", "open"] and connects == 2


def test_probe_now_probes_a_cell_in_its_back_off_at_once_then_leaves_it_to_its_cadence(hourly):
    """Before "serving" is said the router watcher asks for one probe of every cell not yet seen open
    (the router's answers imply its port is up): one probe now, no hint, no fast cadence after it."""
    sock = bound_port()
    cell = CellState("n1", "127.0.0.1", sock.getsockname()[1], "prefill", "handshake", "prefill-0")

    async def main():
        prober, task, results, until = await run_prober(cell, set())
        await until(1)  # refused: the next probe in an hour
        sock.listen()
        prober.probe_now([cell])
        await until(2)
        await asyncio.sleep(0.2)  # nothing more comes: the cell is open and the cadence is an hour
        task.cancel()
        return results, prober.connects["n1"]

    try:
        results, connects = asyncio.run(main())
    finally:
        sock.close()
    assert results == ["refused", "open"] and connects == 2


def test_a_hint_during_a_probe_is_not_lost(hourly):
    sock = bound_port()
    cell = CellState("n1", "127.0.0.1", sock.getsockname()[1], "decode", "http", "decode-0")

    async def main():
        soon: set[str] = set()
        gate = Gate()
        prober, task, results, until = await run_prober(cell, soon, runner=gate)
        await gate.wait_inside(1)  # the loop is inside its first probe
        soon.add(cell.key)
        prober.wake("n1")  # the hint arrives now
        gate.passes.release()
        await until(1)  # that probe was refused (nothing listens yet)
        await gate.wait_inside(2)  # the next probe comes without waiting out the (hour-long) cadence
        sock.listen()
        gate.passes.release()
        await until(2)
        task.cancel()
        return results

    try:
        results = asyncio.run(main())
    finally:
        sock.close()
    assert results == ["refused", "open"]


def test_a_listen_in_the_kernel_table_opens_the_cell_with_one_confirming_connect(hourly):
    sock = bound_port()
    cell = CellState("n1", "127.0.0.1", sock.getsockname()[1], "decode", "http", "decode-0")

    async def main():
        table = local_table(0.01)  # this namespace's /proc/net/tcp, read every 10 ms
        prober, task, results, until = await run_prober(cell, set(), table=table)
        await until(1)  # refused: no log hint will come, and the back-off is an hour
        assert cell.key not in prober.listed
        sock.listen()  # the program starts listening and says nothing
        await until(2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return results, prober.connects["n1"], table.reads, prober._readers

    try:
        results, connects, reads, readers = asyncio.run(main())
    finally:
        sock.close()
    assert results == ["refused", "open"]
    assert connects == 2  # the first look and the one confirm: no polling connects
    assert reads >= 1 and readers == {}  # the table was read; its reader went with the node's loop


def test_a_listen_on_another_nodes_address_does_not_count(hourly):
    """All local nodes share one table: 127.0.0.2:P listening says nothing about 127.0.0.1:P."""
    other = socket.socket()
    other.bind(("127.0.0.2", 0))
    port = other.getsockname()[1]
    other.listen()
    cell = CellState("n1", "127.0.0.1", port, "decode", "http", "decode-0")

    async def main():
        table = local_table(0.01)
        prober, task, results, until = await run_prober(cell, set(), table=table)
        await until(1)
        reads = table.reads
        while table.reads < reads + 3:  # the table was read a few times since
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return results, prober.listed

    try:
        results, listed = asyncio.run(main())
    finally:
        other.close()
    assert results == ["refused"] and not listed


def test_an_open_cell_is_watched_through_the_table_not_by_connects(hourly, monkeypatch):
    """Serving, every cell open: with the node's listening table, the table watches them (a connect a
    second to each port of a 128-node run was most of the watcher's CPU); a port that stops listening
    is confirmed closed by one connect."""
    monkeypatch.setattr(barrier, "OPEN_RECHECK", 0.01)  # the open cells' look, a hundred times a second
    sock = bound_port()
    sock.listen()
    cell = CellState("n1", "127.0.0.1", sock.getsockname()[1], "decode", "http", "decode-0")

    async def main():
        table = local_table(0.01)
        prober, task, results, until = await run_prober(cell, set(), table=table)
        await until(1)  # open
        connects, reads = prober.connects["n1"], table.reads
        for _ in range(int(WAIT / 0.01)):  # the table read ten times for the open cell
            if table.reads >= reads + 10:
                break
            await asyncio.sleep(0.01)
        idle = prober.connects["n1"] - connects
        sock.close()  # the program stops listening
        await until(2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return results, idle, prober.connects["n1"] - connects, table.reads - reads

    try:
        results, idle, after, reads = asyncio.run(main())
    finally:
        sock.close()
    assert reads >= 10 and idle == 0  # the table, not a connect, while it listened
    assert results == ["open", "refused"] and after == 1  # gone from the table: one connect saw it closed


def test_a_serving_runs_cells_are_gone_over_only_when_the_open_ones_are_due(hourly, monkeypatch):
    """Every cell open: the table's reader goes over the cells once per OPEN_RECHECK, not at the table's
    cadence (at 128 nodes that walk, 20 times a second, was a tenth of the watcher's CPU)."""
    monkeypatch.setattr(barrier, "OPEN_RECHECK", 0.5)
    sock = bound_port()
    sock.listen()
    cell = CellState("n1", "127.0.0.1", sock.getsockname()[1], "decode", "http", "decode-0")

    async def main():
        table = local_table(0.01)  # while a cell is closed: read every 10 ms
        prober, task, results, until = await run_prober(cell, set(), table=table)
        await until(1)  # open
        passes, reads = prober.reader_passes, table.reads
        while table.reads < reads + 3:  # the open cell looked at three times through the table
            await asyncio.sleep(0.01)
        passes = prober.reader_passes - passes
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return results, passes

    try:
        results, passes = asyncio.run(main())
    finally:
        sock.close()
    assert results == ["open"]
    assert passes <= 5  # about one pass per look; at the 10 ms cadence it was ~150


def test_a_change_while_all_cells_are_open_is_looked_at_at_once(hourly, monkeypatch):
    """All open, the next look at the open cells an hour away: a process that comes back (a wake)
    brings its closed cell into the table's watch at once, and the listen there opens it."""
    monkeypatch.setattr(barrier, "OPEN_RECHECK", HOUR)
    up, down = bound_port(), bound_port()
    up.listen()
    cells = [CellState("n1", "127.0.0.1", up.getsockname()[1], "decode", "http", "decode-0"),
             CellState("n1", "127.0.0.1", down.getsockname()[1], "prefill", "http", "prefill-0")]
    alive = {"decode-0": True, "prefill-0": False}

    async def main():
        results: list[tuple[str, str]] = []
        changed = asyncio.Event()

        def on_result(c: CellState, r: str) -> None:
            c.state = r
            results.append((c.owner, r))
            changed.set()

        table = local_table(0.01)
        prober = BarrierProber(cells, runner_for=lambda n: LocalRunner(), expected_soon=lambda c: False,
                               owner_alive=lambda c: alive[c.owner], on_result=on_result,
                               table_for=lambda n: table)
        task = asyncio.create_task(prober.run_node("n1"))

        async def until(n: int) -> None:
            while len(results) < n:
                changed.clear()
                await asyncio.wait_for(changed.wait(), WAIT)

        await until(2)  # decode-0 open; prefill-0 refused, its process not alive: nothing to watch
        passes = prober.reader_passes
        while prober.reader_passes < passes + 1:  # the reader settled into its wait
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        idle = prober.reader_passes - passes
        alive["prefill-0"] = True  # it is back
        down.listen()
        prober.wake("n1")
        await until(3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return results, idle, prober.connects["n1"]

    try:
        results, idle, connects = asyncio.run(main())
    finally:
        up.close()
        down.close()
    assert idle <= 2  # waiting, not going over the cells every 10 ms
    assert results[2] == ("prefill-0", "open") and connects == 3  # seen through the table: one confirm


@pytest.mark.parametrize("with_table", [False, True])
def test_a_closed_port_nobody_expects_is_left_to_the_table_not_to_connects(monkeypatch, with_table):
    """While the node's listening table is read, a closed port nobody expects yet (a model loading) is
    probed on TABLE_BACKOFF (a safety net, seconds apart) instead of PROBE_BACKOFF: at 128 nodes those
    connects were a fifth of the watcher's CPU. Here PROBE_BACKOFF is a millisecond and TABLE_BACKOFF an
    hour; without a table the same cell is probed over and over (the setting the test relies on works)."""
    monkeypatch.setattr(barrier, "PROBE_BACKOFF", Backoff(first_s=0.001, factor=1.0, max_s=0.001, give_up_s=None))
    monkeypatch.setattr(barrier, "TABLE_BACKOFF", Backoff(first_s=HOUR, factor=1.0, max_s=HOUR, give_up_s=None))
    sock = bound_port()
    cell = CellState("n1", "127.0.0.1", sock.getsockname()[1], "decode", "http", "decode-0")

    async def main():
        table = local_table(0.01) if with_table else None
        if table is not None:
            assert await table.read() is not None and table.working  # it answers before the first probe
        prober, task, results, until = await run_prober(cell, set(), table=table)
        if table is not None:
            while table.reads < 10:  # the table read ten times (a tenth of a second), nothing listening
                await asyncio.sleep(0.01)
        else:
            await until(10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return prober.connects["n1"]

    try:
        connects = asyncio.run(main())
    finally:
        sock.close()
    if with_table:
        assert connects == 1  # the first look only
    else:
        assert connects >= 10


def test_the_cells_due_together_on_a_node_are_probed_together(hourly):
    """Issue 44.3: a node's 8 handshake ports whose packets were dropped were probed one after another, 3 s
    each (1 s, and the retry's 2 s): the last one 24 s after the first. The cells due at once are now probed
    at once (up to AT_ONCE): all 8 connects are in flight before any of them is let through."""
    socks = [bound_port() for _ in range(8)]
    cells = [CellState("n1", "127.0.0.1", s.getsockname()[1], "prefill", "handshake", "prefill-0") for s in socks]

    async def main():
        gate = Gate()
        results: list[str] = []
        prober = BarrierProber(cells, runner_for=lambda n: gate, expected_soon=lambda c: False,
                               owner_alive=lambda c: True, on_result=lambda c, r: results.append(r))
        task = asyncio.create_task(prober.run_node("n1"))
        await asyncio.wait_for(gate.arrived.wait(), WAIT)
        for _ in range(20):  # a few turns of the loop: every connect that is started together has entered
            await asyncio.sleep(0)
        entered = gate.entered
        for _ in cells:
            gate.passes.release()
        while len(results) < len(cells):
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return entered, results

    try:
        entered, results = asyncio.run(main())
    finally:
        for s in socks:
            s.close()
    assert entered == len(cells)
    assert results == ["refused"] * len(cells)
