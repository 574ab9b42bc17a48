"""The watchers a Run has, each a small object of its own (composition, not mixins):

- logs: every process's liveness and log lines (classified into stages, errors, pair lines)
- barrier: the (node, port) cells, and the worker checks when a port opens
- pairs: the Mooncake KV path per prefill->decode pair, probed from the consumer's node
- router: /readiness, /workers, /v1/models and the smoke request
- nodes: Slurm's / the SSH pool's view of the nodes
- timeouts: the recipe's worker and router timeouts
- binding: ready-but-not-bound ports, with what the process really listens on
- health: health after the start (unresponsive endpoints), with recovery
- metrics: live metrics per endpoint and stalls
- gpus: each node's GPUs (VRAM, activity, power, temperature), GPUs held by no process of the run

`Watchers.watch` runs them all until a condition holds; `Watchers.refresh` is one bounded pass (for
`atomdeck status`).
"""

from __future__ import annotations

import asyncio
import resource
import time
from collections.abc import Callable

from ..barrier import checkpoint
from ..diagnose import diagnose
from ..events import HEALTH_STAGES, LIVE, Event, RunState
from .base import RunHost, cancel_all, keep_going
from .binding import BindWatcher
from .gpus import GpuWatcher
from .health import ServingHealth
from .logs import LogWatcher
from .metrics import MetricsWatcher
from .nodes import NodeHealthWatcher
from .pairs import HandshakeWatcher
from .ports import BarrierWatcher
from .router import RouterWatcher
from .timeouts import TimeoutWatcher

__all__ = ["Watchers", "cancel_all", "keep_going", "raise_open_files_limit"]


def raise_open_files_limit(want: int = 65536) -> int:
    """Lift this process's soft limit on open files toward `want` (never above the hard limit) and
    return it. A watch holds a kept HTTP connection per endpoint and check, a tail per log and a
    channel per node: ~4 per process, which at 256 nodes passes the 1,024 that login shells often
    set as the soft limit, and a watcher out of descriptors reads as ports closed and checks failing."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


class Watchers:
    def __init__(self, run: RunHost, changed: asyncio.Event | None = None):
        self.run = run
        self.changed = changed or asyncio.Event()
        self.logs = LogWatcher(run, self)
        self.barrier = BarrierWatcher(run, self)
        self.pairs = HandshakeWatcher(run, self)
        self.router = RouterWatcher(run, self)
        self.nodes = NodeHealthWatcher(run, self)
        self.timeouts = TimeoutWatcher(run, self)
        self.binding = BindWatcher(run, self)
        self.health = ServingHealth(run, self)
        self.metrics = MetricsWatcher(run, self)
        self.gpus = GpuWatcher(run, self)

    def settle(self) -> None:
        """After a health change: the run is degraded while an endpoint is unresponsive or stalled or a
        pair failed, and serving again once none is."""
        run = self.run
        s = run.state
        if s.status not in LIVE or run.stopping:
            return
        sick = [p for p in s.procs.values() if p.stage in HEALTH_STAGES]
        broken = [pr for pr in s.pairs.values() if pr.stage == "failed"]
        if sick or broken:
            run._set_status("degraded", diagnose(s).headline)
        elif s.status == "degraded":
            run._set_status("serving", f"serving again: {s.readiness()}")

    async def watch(self, until: Callable[[RunState], bool] | None = None, timeout: float | None = None) -> RunState:
        """Watch every process, port and check until `until(state)` holds, the timeout passes, or cancelled."""
        run = self.run

        def keep(what, factory):
            return keep_going(run.emit, what, factory)

        tasks = [asyncio.create_task(keep(f"watching {name}", lambda n=name: self.logs.watch_proc(n)),
                                     name=f"proc:{name}") for name in run.handles]
        prober = self.barrier.make_prober()
        tasks += [asyncio.create_task(keep(f"probing {n}", lambda n=n: prober.run_node(n)), name=f"probe:{n}")
                  for n in prober.by_node]
        tasks += [asyncio.create_task(keep("router checks", self.router.run_checks), name="router"),
                  asyncio.create_task(keep("timeouts", self.timeouts.tick), name="ticker"),
                  asyncio.create_task(keep("node health", self.nodes.poll), name="nodes"),
                  asyncio.create_task(keep("ready-but-not-bound checks", self.binding.watch), name="binding"),
                  asyncio.create_task(keep("health checks", self.health.watch), name="health"),
                  asyncio.create_task(keep("metrics", self.metrics.watch), name="metrics"),
                  asyncio.create_task(keep("GPU telemetry", self.gpus.poll), name="gpus")]
        conn_hook = getattr(run.launcher, "on_connection_state", None)
        if conn_hook is not None:
            conn_hook(lambda node, state, reason: run.emit(Event("conn", node, "ok" if state == "up" else state,
                                                                  reason)))
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while True:
                if until is not None and until(run.state):
                    break
                self.changed.clear()
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if wait == 0.0:
                    break
                try:
                    async with asyncio.timeout(min(wait or 1.0, 1.0)):
                        await self.changed.wait()
                except TimeoutError:
                    pass
                checkpoint()  # a cancel that raced the wake-up (Python 3.11) still stops the watch
        finally:
            self.barrier.watching = False
            await cancel_all(tasks + list(self.barrier.background) + list(self.binding.tasks))
            run.save_offsets()
        return run.state

    async def finish_start(self, live: float) -> None:
        """A run nobody watched since its launch (`atomdeck up` without `--wait`) is still `starting` in
        run.json: once its router's port is open, run the router's checks and the smoke request (at most
        `live` seconds), so `status` and `runs` say `serving` when it serves. A check cut short by the bound
        writes nothing: the next pass tries again."""
        run = self.run
        router = run.state.procs.get("router")
        if router is None or router.alive is False:
            return
        if not any(c.kind == "router" and c.state == "open" for c in run.state.cells.values()):
            return
        run.emit_stage("router", "http_up")  # as the barrier says when it sees the router's port open
        try:
            async with asyncio.timeout(live):
                await self.router.run_checks()
        except TimeoutError:
            pass

    async def refresh(self, live: float = 6.0) -> RunState:
        """One pass of every watcher (for `atomdeck status`): liveness, new log lines, ports, then a
        bounded live pass of the health checks and two metric scrapes (at most `live` seconds)."""
        await self.logs.refresh()
        await self.barrier.probe_once()
        if self.run.state.status == "starting" and not self.run.stopping:
            await self.finish_start(live)
        if self.run.state.status in LIVE:
            try:
                async with asyncio.timeout(live):
                    await asyncio.gather(self.health.check_once(), self.metrics.scrape_once(), self.gpus.poll_once())
            except TimeoutError:
                pass
            self.settle()
        self.run.save_offsets()
        return self.run.state
