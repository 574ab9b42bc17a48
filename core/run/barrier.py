"""Probing the barrier: every (node, port) cell, fast while it is expected soon, slow otherwise.

Each node has its own loop and its own budget of connects per second (a TokenBucket), so a big
deployment never floods a node. A cell whose process just logged "Starting server" is probed at
once, then at a short, growing cadence (HINT_FAST) until it opens. Where the launcher can read the
node's table of listening sockets (/proc/net/tcp of the node's kernel: core/remote/listening.py), a
listen seen there is confirmed by one connect at once, so a program that logs nothing is also seen
within the table's cadence, while the connects to closed ports keep their slow back-off.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

from ..remote.backoff import Backoff
from ..remote.listening import ListenTable, listens
from ..remote.probes import tcp_probe
from ..remote.shell import LocalRunner, Runner
from .events import CellState

FAST = 0.1  # s between probes of a cell expected to open any moment (the cap of HINT_FAST)
# after a hint (or a listen in the node's table): probe at once, then 10 ms, x1.5, up to FAST apart
HINT_FAST = Backoff(first_s=0.01, factor=1.5, max_s=FAST, give_up_s=None)
SLOW_START, SLOW_MAX = 0.3, 2.0  # back-off while a model loads
PROBE_BACKOFF = Backoff(first_s=SLOW_START, factor=1.5, max_s=SLOW_MAX, give_up_s=None)  # per cell, forever
# the same while the node's listening table is read: a listen there wakes the cell at once, so a connect is
# only the safety net (642 closed ports of a 128-node run at PROBE_BACKOFF were ~380 connects a second, a
# fifth of the watcher's CPU while it came up)
TABLE_BACKOFF = Backoff(first_s=SLOW_MAX, factor=1.5, max_s=10.0, give_up_s=None)
OPEN_RECHECK = 1.0  # an open cell is re-checked this often, to see it close if its process dies
MAX_RATE = 20.0  # connects per second per node
AT_ONCE = 16  # connects in flight at once per node (the cells due together; the bucket still paces them)


async def connect_probe(host: str, port: int, timeout: float, runner: Runner) -> str:
    """tcp_probe's answer ('open', 'refused', 'timeout', 'unreachable'). From this machine to an IP address,
    a bare non-blocking connect closed at once: no stream, transport or close handshake, so the answer
    costs one turn of the event loop instead of four (a busy loop makes each turn long)."""
    if type(runner) is not LocalRunner:
        return await tcp_probe(host, port, timeout=timeout, runner=runner)
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return await tcp_probe(host, port, timeout=timeout, runner=runner)
    loop = asyncio.get_running_loop()
    for wait in (timeout, timeout * 2):  # a timeout is tried once more, as tcp_probe does
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setblocking(False)
            try:
                async with asyncio.timeout(wait):  # not wait_for: see checkpoint()
                    await loop.sock_connect(s, (host, port))
                return "open"
            except TimeoutError:
                continue
            except ConnectionRefusedError:
                return "refused"
            except OSError as e:
                if e.errno == errno.ETIMEDOUT:
                    continue
                return "refused" if e.errno == errno.ECONNREFUSED else "unreachable"
    return "timeout"


def checkpoint() -> None:
    """Re-raise a cancellation that asyncio.wait_for swallowed, so loops stop. On Python 3.11 wait_for runs
    its awaitable in a task of its own; when that task finishes in the same turn of the loop as the
    caller is cancelled (an Event set and a cancel together), wait_for returns the result and the
    cancellation is lost: a loop around it runs on for good. Core's own waits use `asyncio.timeout` (no
    inner task, nothing lost; tests/unit/test_cancel_races.py keeps wait_for out of core); this stays after
    awaits that reach libraries which still use wait_for (asyncssh, for a node's listening table over ssh)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class TokenBucket:
    def __init__(self, rate: float, burst: float):
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.t = time.monotonic()

    def take(self) -> float:
        """Take a token; returns how long to wait first (0 when one was free)."""
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        wait = (1 - self.tokens) / self.rate
        self.tokens -= 1
        return wait


class BarrierProber:
    """Drives the probes of all cells. The caller says which cells are expected soon and gets results.

    `table_for(node)` gives the node's ListenTable (or None: connects only)."""

    def __init__(self, cells: list[CellState], runner_for: Callable[[str], Runner],
                 expected_soon: Callable[[CellState], bool], owner_alive: Callable[[CellState], bool | None],
                 on_result: Callable[[CellState, str], None], max_rate: float = MAX_RATE,
                 table_for: Callable[[str], ListenTable | None] | None = None):
        self.by_node: dict[str, list[CellState]] = defaultdict(list)
        for c in cells:
            self.by_node[c.node].append(c)
        self.runner_for = runner_for
        self.expected_soon = expected_soon
        self.owner_alive = owner_alive
        self.on_result = on_result
        self.max_rate = max_rate
        self.table_for = table_for or (lambda node: None)
        self.connects: dict[str, int] = defaultdict(int)
        self.table_reads: dict[str, int] = defaultdict(int)
        self.started = time.monotonic()
        self._wake: dict[str, asyncio.Event] = {n: asyncio.Event() for n in self.by_node}
        self._due: dict[str, float] = {}
        self._backoff: dict[str, tuple[Backoff, Iterator[float]]] = {}  # a closed cell's: its policy, its delays
        self._fast: dict[str, Iterator[float]] = {}  # HINT_FAST per cell while it is expected soon
        self.listed: set[str] = set()  # cells whose port the node's table shows listening, not yet confirmed
        self._readers: dict[int, tuple[set[str], asyncio.Task | None]] = {}
        self._changed = asyncio.Event()  # a cell's state or a process changed: the table readers look again
        self.reader_passes = 0  # times a table reader went over its cells (tests count them)

    def add_cells(self, cells: list[CellState]) -> list[str]:
        """Cells of a worker added to the live run; the nodes new to the prober (each needs a run_node task)."""
        new = []
        for c in cells:
            if c.node not in self.by_node:
                new.append(c.node)
                self._wake[c.node] = asyncio.Event()
            if not any(x.key == c.key for x in self.by_node[c.node]):
                self.by_node[c.node].append(c)
        self.wake()
        return sorted(set(new))

    def wake(self, node: str | None = None) -> None:
        """Re-plan now (a log line said a port is about to open, or a process died)."""
        self._changed.set()
        for n, ev in self._wake.items():
            if node is None or n == node:
                ev.set()

    def probe_now(self, cells: list[CellState]) -> None:
        """One probe of each of `cells` at once (then each keeps its cadence)."""
        now = time.monotonic()
        for c in cells:
            self._due[c.key] = now
            self._wake[c.node].set()

    def rate(self) -> dict[str, float]:
        """Connects per second per node since the start."""
        dt = max(1e-6, time.monotonic() - self.started)
        return {n: self.connects[n] / dt for n in self.by_node}

    def _soon(self, c: CellState) -> bool:
        return c.key in self.listed or self.expected_soon(c)

    def _interval(self, c: CellState) -> float | None:
        """After a probe of `c`: how long until the next one (None: not until something changes)."""
        alive = self.owner_alive(c)
        if alive is False:
            self._fast.pop(c.key, None)
            return None if c.state != "open" else 0.0  # one last look to see it close
        if c.state == "open":
            self._fast.pop(c.key, None)
            # with the node's listening table, the table watches an open cell (see _read_table): a
            # connect a second to each of a serving run's ports was most of the watcher's CPU at scale
            return None if self.table_for(c.node) is not None else OPEN_RECHECK
        if self._soon(c):
            if c.key not in self._fast:  # it became expected during this probe (a hint, a listen): look again now
                self._fast[c.key] = HINT_FAST.delays()
                return 0.0
            return next(self._fast[c.key])
        self._fast.pop(c.key, None)
        table = self.table_for(c.node)
        policy = TABLE_BACKOFF if table is not None and table.working else PROBE_BACKOFF
        got = self._backoff.get(c.key)
        if got is None or got[0] is not policy:  # (a table that starts or stops answering changes it)
            got = self._backoff[c.key] = (policy, policy.delays())
        return next(got[1])

    def _replan(self, c: CellState, now: float) -> None:
        """Woken (a hint, a death, a listen in the table): when `c` is probed next."""
        alive = self.owner_alive(c)
        due = self._due.get(c.key, float("inf"))
        if alive is False:
            if c.state == "open":
                self._due[c.key] = now  # see it close
            return
        if c.state == "open":
            if self.table_for(c.node) is None:
                self._due[c.key] = min(due, now + OPEN_RECHECK)
        elif self._soon(c):
            if c.key not in self._fast:  # newly expected: probe at once, then HINT_FAST
                self._fast[c.key] = HINT_FAST.delays()
                self._due[c.key] = now
        else:
            self._fast.pop(c.key, None)

    async def run_node(self, node: str) -> None:
        cells = self.by_node[node]
        bucket = TokenBucket(self.max_rate, self.max_rate / 2)
        runner = self.runner_for(node)
        wake = self._wake[node]
        now = time.monotonic()
        for c in cells:
            self._due[c.key] = now
        table = self.table_for(node)
        if table is not None:
            self._join_reader(node, table)
        try:
            while True:
                if wake.is_set():  # cleared here, before planning: a wake during a probe is never lost
                    wake.clear()
                    now = time.monotonic()
                    for c in cells:
                        self._replan(c, now)
                now = time.monotonic()
                due = min(cells, key=lambda c: self._due.get(c.key, float("inf")))
                at = self._due.get(due.key, float("inf"))
                if at <= now:
                    # every cell due now (up to AT_ONCE), probed together: a node's 8 handshake ports whose packets
                    # are dropped took 3 s each one after another (1 s, and the retry's 2 s), 24 s for the last
                    batch = sorted((c for c in cells if self._due.get(c.key, float("inf")) <= now),
                                   key=lambda c: self._due[c.key])[:AT_ONCE]
                    results = await asyncio.gather(*(self._probe(node, c, bucket.take(), runner) for c in batch))
                    checkpoint()
                    for c, result in zip(batch, results):
                        self.on_result(c, result)
                        if result == "open":
                            self._backoff.pop(c.key, None)
                            self.listed.discard(c.key)
                        nxt = self._interval(c)
                        self._due[c.key] = time.monotonic() + nxt if nxt is not None else float("inf")
                    self._changed.set()
                    continue  # then look at the wake and the plan again
                if at == float("inf"):
                    await wake.wait()
                    continue
                try:
                    async with asyncio.timeout(min(at - now, 5.0)):  # not wait_for: see checkpoint()
                        await wake.wait()
                except TimeoutError:
                    pass
        finally:
            if table is not None:
                await self._leave_reader(node, table)

    async def _probe(self, node: str, c: CellState, wait: float, runner: Runner) -> str:
        """One connect to a cell, after `wait` (the node's token bucket: MAX_RATE connects a second)."""
        if wait:
            await asyncio.sleep(wait)
        self.connects[node] += 1
        return await connect_probe(c.host, c.port, 1.0, runner)

    def _join_reader(self, node: str, table: ListenTable) -> None:
        """One reader per table, however many nodes share it (the local launcher's 128 nodes: one)."""
        nodes, task = self._readers.get(id(table), (set(), None))
        nodes.add(node)
        if task is None or task.done():
            task = asyncio.create_task(self._read_table(table, nodes), name=f"listen-table:{table.where}")
        self._readers[id(table)] = (nodes, task)

    async def _leave_reader(self, node: str, table: ListenTable) -> None:
        nodes, task = self._readers.get(id(table), (set(), None))
        nodes.discard(node)
        if not nodes and task is not None:
            self._readers.pop(id(table), None)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _read_table(self, table: ListenTable, nodes: set[str]) -> None:
        """Read the listening sockets every `table.cadence` s while a cell of its nodes is closed; a
        listen there makes that cell due at once (one confirming connect, then HINT_FAST). While every
        cell is open (a serving run) it looks only every OPEN_RECHECK, or when a cell or a process
        changes: going over a 128-node run's cells 20 times a second was a tenth of the watcher's CPU."""
        opened_read = 0.0  # when the table was last read for the open cells
        while True:
            self._changed.clear()  # before looking: a change while we look is seen next time
            self.reader_passes += 1
            cells = [c for n in list(nodes) for c in self.by_node[n] if self.owner_alive(c) is not False]
            closed = [c for c in cells if c.state != "open"]
            now = time.monotonic()
            opened = [c for c in cells if c.state == "open"] if now - opened_read >= OPEN_RECHECK else []
            if closed or opened:
                listening = await table.read()
                checkpoint()
                if opened:
                    opened_read = time.monotonic()
                if listening is not None:
                    for n in nodes:
                        self.table_reads[n] += 1
                    now_listed = {c.key for c in closed if listens(listening, c.host, c.port)}
                    self.listed -= {c.key for c in closed} - now_listed
                    for c in closed:
                        if c.key in now_listed and c.key not in self.listed:
                            self.listed.add(c.key)
                            self.wake(c.node)
                # an open cell no longer listed, or a table that could not be read: one connect decides
                # (at most one a cell per OPEN_RECHECK, as before the table watched open cells)
                for c in opened:
                    if listening is None or not listens(listening, c.host, c.port):
                        self._due[c.key] = min(self._due.get(c.key, float("inf")), time.monotonic())
                        self.wake(c.node)
            rest = OPEN_RECHECK - (time.monotonic() - opened_read)
            if closed or rest <= table.cadence:
                await asyncio.sleep(table.cadence)
                continue
            try:  # all open: nothing to look for until the open cells' next look, or a change
                async with asyncio.timeout(rest):  # not wait_for: see checkpoint()
                    await self._changed.wait()
            except TimeoutError:
                pass
