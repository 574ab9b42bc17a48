"""Probing the barrier: every (node, port) cell, fast while it is expected soon, slow otherwise.

Each node has its own loop and its own budget of connects per second, so a big deployment never
floods a node, and a cell whose process just logged "Starting server" is checked every 0.1 s.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

from ..remote.backoff import Backoff
from ..remote.probes import tcp_probe
from ..remote.shell import Runner
from .events import CellState

FAST = 0.1  # s between probes of a cell expected to open any moment
SLOW_START, SLOW_MAX = 0.3, 2.0  # back-off while a model loads
PROBE_BACKOFF = Backoff(first_s=SLOW_START, factor=1.5, max_s=SLOW_MAX, give_up_s=None)  # per cell, forever
OPEN_RECHECK = 1.0  # an open cell is re-checked this often, to see it close if its process dies
MAX_RATE = 20.0  # connects per second per node


def checkpoint() -> None:
    """Re-raise a cancellation that asyncio.wait_for swallowed (a race in Python 3.11), so loops stop."""
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
    """Drives the probes of all cells. The caller says which cells are expected soon and gets results."""

    def __init__(self, cells: list[CellState], runner_for: Callable[[str], Runner],
                 expected_soon: Callable[[CellState], bool], owner_alive: Callable[[CellState], bool | None],
                 on_result: Callable[[CellState, str], None], max_rate: float = MAX_RATE):
        self.by_node: dict[str, list[CellState]] = defaultdict(list)
        for c in cells:
            self.by_node[c.node].append(c)
        self.runner_for = runner_for
        self.expected_soon = expected_soon
        self.owner_alive = owner_alive
        self.on_result = on_result
        self.max_rate = max_rate
        self.connects: dict[str, int] = defaultdict(int)
        self.started = time.monotonic()
        self._wake: dict[str, asyncio.Event] = {n: asyncio.Event() for n in self.by_node}
        self._due: dict[str, float] = {}
        self._backoff: dict[str, Iterator[float]] = {}

    def wake(self, node: str | None = None) -> None:
        """Re-plan now (a log line said a port is about to open, or a process died)."""
        for n, ev in self._wake.items():
            if node is None or n == node:
                ev.set()

    def rate(self) -> dict[str, float]:
        """Connects per second per node since the start."""
        dt = max(1e-6, time.monotonic() - self.started)
        return {n: self.connects[n] / dt for n in self.by_node}

    def _interval(self, c: CellState) -> float | None:
        alive = self.owner_alive(c)
        if alive is False:
            return None if c.state != "open" else 0.0  # one last look to see it close
        if c.state == "open":
            return OPEN_RECHECK
        if self.expected_soon(c):
            return FAST
        return next(self._backoff.setdefault(c.key, PROBE_BACKOFF.delays()))

    async def run_node(self, node: str) -> None:
        cells = self.by_node[node]
        bucket = TokenBucket(self.max_rate, self.max_rate / 2)
        runner = self.runner_for(node)
        wake = self._wake[node]
        now = time.monotonic()
        for c in cells:
            self._due[c.key] = now
        while True:
            now = time.monotonic()
            due = [c for c in cells if self._due.get(c.key, float("inf")) <= now]
            for c in due:
                wait = bucket.take()
                if wait:
                    await asyncio.sleep(wait)
                self.connects[node] += 1
                result = await tcp_probe(c.host, c.port, timeout=1.0, runner=runner)
                checkpoint()
                self.on_result(c, result)
                if result == "open":
                    self._backoff.pop(c.key, None)
                nxt = self._interval(c)
                self._due[c.key] = time.monotonic() + nxt if nxt is not None else float("inf")
            if not any(v != float("inf") for k, v in self._due.items() if k in {c.key for c in cells}):
                wake.clear()
                await wake.wait()
            nearest = min((self._due.get(c.key, float("inf")) for c in cells), default=float("inf"))
            delay = max(0.0, nearest - time.monotonic())
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), timeout=min(delay, 5.0))
                # woken: re-plan every cell of this node from now
                for c in cells:
                    nxt = self._interval_peek(c)
                    if nxt is not None:
                        self._due[c.key] = min(self._due.get(c.key, float("inf")), time.monotonic() + nxt)
            except TimeoutError:
                pass

    def _interval_peek(self, c: CellState) -> float | None:
        alive = self.owner_alive(c)
        if alive is False:
            return 0.0 if c.state == "open" else None
        if c.state == "open":
            return OPEN_RECHECK
        return FAST if self.expected_soon(c) else None
