"""The validity gate around a bench's steps: before each step, where every worker's log ends and who is already
unhealthy; during it, the run's health events as they come, and a sentinel that asks every endpoint's health
twice a second (the watcher asks a healthy one every 2 s: a process frozen mid-step would be named up to ~3 s
later, bench/README.md "Bench: live health"); after it, the engines' lines of the step and the verdict.

The sentinel is the watcher's own health check (run/watchers/health.py `ServingHealth.check`: a check not answered
within 0.5 s reads the process's state on its node, a stopped process is unresponsive at once), on a tighter
cadence and only while a bench runs; its events are the run's events like any session's (recorded, folded, heard
by the console and by the gate).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from .evidence import SETTLE_S, HealthLog, LogCursor, is_pd, kv_and_routing
from .stats import RequestRecord
from .validity import HealthNote, Verdict, judge

SENTINEL_EVERY_S = 0.5  # between two health checks of one endpoint while a bench runs
SETTLE_POLL_S = 0.02  # between two reads of the logs while a step's last lines are awaited


def _accounted(run: Any, lines: dict[str, list[str] | str], completed: int) -> bool:
    """Every completed request of a P/D step has its prefill's, its decode's queue and write-done lines."""
    kv, _ = kv_and_routing(run, lines)
    return not kv.unread and min(kv.transfers, kv.remote, sum(kv.prefilled.values())) >= completed


class Sentinel:
    """Every endpoint's health asked every SENTINEL_EVERY_S while it runs (cancel it to stop); with `stalls`, also
    the watcher's metrics scrapes and their stall check (requests in flight, no output for 8 s: `stalled`), for a
    bench of a run nobody else watches (the CLI's, a layout search's; the console's watcher process does it)."""

    def __init__(self, run: Any, stalls: bool = True):
        from ..run.watchers.health import ServingHealth  # the run engine: loaded when a bench of a run starts
        from ..run.watchers.metrics import MetricsWatcher

        self.run = run
        self.health = ServingHealth(run, run.watchers)
        self.metrics = MetricsWatcher(run, run.watchers) if stalls else None

    async def watch(self) -> None:
        try:
            eps = self.health.endpoints()
            extra = [self.metrics.watch()] if self.metrics is not None else []
            await asyncio.gather(*(self._follow(ep, SENTINEL_EVERY_S * i / max(1, len(eps)))
                                   for i, ep in enumerate(eps)), *extra)
        finally:
            await self.health.http.aclose()

    async def _follow(self, ep: Any, phase: float) -> None:
        from ..run.events import TERMINAL
        from ..run.watchers.health import MISSES

        await asyncio.sleep(phase)
        while True:
            t0 = time.monotonic()
            p = self.run.state.procs.get(ep.name)
            if p is not None and p.stage not in TERMINAL and p.alive is not False and not self.run.stopping:
                try:
                    await self.health.check(ep, MISSES)
                except (OSError, RuntimeError):  # a node that cannot be asked: the watcher says so, not the bench
                    pass
            await asyncio.sleep(max(0.05, SENTINEL_EVERY_S - (time.monotonic() - t0)))


class Gate:
    """The evidence of one bench of one run, step by step. `begin` before a step, `end` after it; `trouble` is
    what went wrong in the step under way so far (health), for whoever shows it live."""

    def __init__(self, run: Any, sentinel: bool = True, on_trouble: Callable[[HealthNote], None] | None = None,
                 halt_on_trouble: bool = True, stalls: bool = True):
        self.run = run
        self.on_trouble = on_trouble
        self.halt_on_trouble = halt_on_trouble
        self.halt = asyncio.Event()  # set when the step under way went wrong (and halting is asked)
        self.health = HealthLog(run, self._heard)
        self.logs = LogCursor(run)
        self.pd = is_pd(run)
        self.start = 0.0
        self.before: list[HealthNote] = []
        self.trouble: list[HealthNote] = []
        self.in_step = False
        self._sentinel = asyncio.ensure_future(Sentinel(run, stalls).watch()) if sentinel else None
        self._unread: dict[str, str] = {}
        self.settle_reads = 0  # reads of the logs the last step's end took (1: every line was there at once)

    def _heard(self, note: HealthNote) -> None:
        if self.in_step:
            self.trouble.append(note)
            if self.halt_on_trouble:
                self.halt.set()
            if self.on_trouble is not None:
                self.on_trouble(note)

    async def begin(self) -> None:
        self._unread = await self.logs.skip_to_end()
        self.before = self.health.now_sick()
        self.trouble = list(self.before)
        self.halt.clear()
        if self.before and self.halt_on_trouble:
            self.halt.set()
        self.start = time.time()
        self.in_step = True
        if self.on_trouble is not None:
            for note in self.before:
                self.on_trouble(note)

    async def end(self, records: Sequence[RequestRecord]) -> Verdict:
        lines = await self._settled(records)
        end = time.time()
        self.in_step = False
        for name, why in self._unread.items():
            lines[name] = why  # a log unreadable at the step's start: its count would be the whole log's
        kv, routing = kv_and_routing(self.run, lines)
        notes = self.before + self.health.between(self.start, end)
        return judge(records, notes=notes, start=self.start, kv=kv, pd=self.pd, routing=routing if self.pd else None)

    async def _settled(self, records: Sequence[RequestRecord]) -> dict[str, list[str] | str]:
        """The step's lines of every worker's log, once they are all there: at once when every request completed and
        the engines' lines account for each of them (the lines come before the answer's last token: a prefill caches
        its blocks, the decode queues the receive and gets the write-done, then decodes), else what came within
        SETTLE_S of the step's last answer (a failure's lines and health events may follow it). Waiting SETTLE_S
        after every step cost a 4-step sweep of ~14 s of server time 1.2 s (bench/README.md, "the client's
        overhead")."""
        completed = sum(r.success for r in records)
        expect_lines = self.pd and completed > 0  # other runs have no per-request lines to wait for
        whole = completed == len(records) and not self.halt.is_set()
        deadline = time.monotonic() + SETTLE_S
        lines: dict[str, list[str] | str] = {}
        self.settle_reads = 0
        while True:
            for name, got in (await self.logs.read()).items():
                had = lines.get(name)
                lines[name] = had + got if isinstance(had, list) and isinstance(got, list) else got
            self.settle_reads += 1
            if whole and (not expect_lines or _accounted(self.run, lines, completed)):
                return lines
            left = deadline - time.monotonic()
            if left <= 0:
                return lines
            await asyncio.sleep(min(SETTLE_POLL_S, left))

    async def close(self) -> None:
        self.health.close()
        if self._sentinel is not None:
            self._sentinel.cancel()
            await asyncio.gather(self._sentinel, return_exceptions=True)


def verdict_without_run(records: Sequence[RequestRecord]) -> Verdict:
    """A step measured against a bare server (no run): what its answers alone say."""
    return judge(records)
