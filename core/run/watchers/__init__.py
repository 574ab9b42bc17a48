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
from collections.abc import Awaitable, Callable

from ..barrier import checkpoint
from ..diagnose import diagnose
from ..events import HEALTH_STAGES, LIVE, Event, RunState
from .actions import ActionWatcher
from .base import RunHost, cancel_all, keep_going
from .binding import BindWatcher
from .gpus import GpuWatcher
from .health import ServingHealth
from .logs import LogWatcher
from .metrics import MetricsWatcher
from .nodes import NodeHealthWatcher
from .pairs import PARKED_S, HandshakeWatcher
from .policy import RestartPolicyWatcher
from .ports import BarrierWatcher
from .router import RouterWatcher
from .timeouts import TimeoutWatcher

__all__ = ["Watchers", "cancel_all", "keep_going", "raise_open_files_limit"]

SMOKE_S = 3.0  # `atomdeck status`'s fresh smoke request: a deadline short enough for a status


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
        self.actions = ActionWatcher(run, self)
        self.policy = RestartPolicyWatcher(run, self)
        self.gpus = GpuWatcher(run, self)
        self.tasks: list[asyncio.Task] = []  # the watch's tasks (a worker added while watching gets its own)
        self.followed: dict[str, asyncio.Task] = {}  # the processes the watch follows, and the task that does
        self.passed: dict[str, float] = {}  # refresh(): when each part of the pass was done (`atomdeck status`)

    def adopt(self, names: list[str]) -> None:
        """While watching: follow processes that joined the run after the watch began (a worker an action added):
        their log and liveness, and their barrier cells."""
        run = self.run
        names = [n for n in names if n in run.handles and (n not in self.followed or self.followed[n].done())]
        if not names or not self.barrier.watching or self.barrier.prober is None:
            return
        prober = self.barrier.prober
        def follow(n: str) -> Callable[[], Awaitable[None]]:
            return lambda: self.logs.watch_proc(n)

        def probe(node: str) -> Callable[[], Awaitable[None]]:
            return lambda: prober.run_node(node)

        for n in names:
            self.followed[n] = task = asyncio.create_task(keep_going(run.emit, f"watching {n}", follow(n)),
                                                          name=f"proc:{n}")
            self.tasks.append(task)
        cells = [c for c in run.state.cells.values() if c.owner in names]
        for node in prober.add_cells(cells):
            self.tasks.append(asyncio.create_task(keep_going(run.emit, f"probing {node}", probe(node)),
                                                  name=f"probe:{node}"))

    def settle(self) -> None:
        """After a health change: the run is degraded while an endpoint is unresponsive or stalled, a decode's
        requests stay parked for their KV, or a pair failed; and serving again once none is."""
        run = self.run
        s = run.state
        if run.stopping:
            return
        acting = [a for a in s.actions.values() if a.running]
        router = s.procs.get("router")
        if s.status == "failed" and acting and router is not None and "serving" in router.stages:
            # an operator brings back the worker whose end failed the run: out of `failed` while it comes back
            run._set_status("degraded", diagnose(s).headline)
        if s.status not in LIVE:
            return
        lost = self._lost_for_good()
        if lost:
            run._fail(lost)
            return
        sick = [p for p in s.procs.values() if p.stage in HEALTH_STAGES or (p.action and not p.removed)
                or (p.parked and p.alive is not False) or (p.stage == "failed" and not p.removed)]
        broken = [pr for pr in s.pairs.values() if pr.stage == "failed"]
        if sick or broken:
            run._set_status("degraded", diagnose(s).headline)
        elif s.status == "degraded":
            run._set_status("serving", f"serving again: {s.readiness()}")

    def _lost_for_good(self) -> str:
        """Why the run fails now: a worker of a critical role is down after the last action on it failed (it
        could not be brought back), or "" (nothing is)."""
        s = self.run.state
        for p in s.procs.values():
            if p.alive is not False or p.stage != "failed" or p.removed or p.action:
                continue
            last = max((a for a in s.actions.values() if a.target == p.name), key=lambda a: a.started, default=None)
            spec = self.policy.role(p.name)
            if last is not None and last.outcome == "failed" and spec is not None and spec.critical:
                return f"{p.name} is down: its {last.kind} failed: {last.detail}"
        return ""

    async def watch(self, until: Callable[[RunState], bool] | None = None, timeout: float | None = None) -> RunState:
        """Watch every process, port and check until `until(state)` holds, the timeout passes, or cancelled."""
        run = self.run

        def keep(what, factory):
            return keep_going(run.emit, what, factory)

        self.followed = {name: asyncio.create_task(keep(f"watching {name}", lambda n=name: self.logs.watch_proc(n)),
                                                   name=f"proc:{name}") for name in run.handles}
        self.tasks = tasks = list(self.followed.values())
        prober = self.barrier.make_prober()
        tasks += [asyncio.create_task(keep(f"probing {n}", lambda n=n: prober.run_node(n)), name=f"probe:{n}")
                  for n in prober.by_node]
        tasks += [asyncio.create_task(keep("router checks", self.router.run_checks), name="router"),
                  asyncio.create_task(keep("timeouts", self.timeouts.tick), name="ticker"),
                  asyncio.create_task(keep("node health", self.nodes.poll), name="nodes"),
                  asyncio.create_task(keep("ready-but-not-bound checks", self.binding.watch), name="binding"),
                  asyncio.create_task(keep("health checks", self.health.watch), name="health"),
                  asyncio.create_task(keep("metrics", self.metrics.watch), name="metrics"),
                  asyncio.create_task(keep("actions", self.actions.watch), name="actions"),
                  asyncio.create_task(keep("restart policy", self.policy.watch), name="policy"),
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
            await cancel_all(tasks + list(self.barrier.background) + list(self.binding.tasks) + list(self.policy.tasks))
            self.tasks, self.followed = [], {}
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
        """One pass of every watcher (for `atomdeck status`): liveness and new log lines, then, at once, the
        ports, a fresh smoke request (SMOKE_S deadline), the health checks and a metrics scrape, the logs followed
        meanwhile; a second scrape at least a second after the first (rates), and, when a decode had requests
        parked for their KV, no sooner than PARKED_S after it (whether they stay parked is then known). At most
        `live` seconds for the live part. When each part was done: `passed` (how old each figure is)."""
        run = self.run
        self.passed = {}
        await self.logs.refresh()
        self.actions.look()
        self.passed["processes"] = time.time()
        if run.state.status == "starting" and not run.stopping:
            await self.finish_start(live)
        tails = []
        if run.state.status in LIVE:  # lines as they come during the pass (a write-done, a write_request)
            tails = [asyncio.create_task(self.logs.tail(n, h)) for n, h in run.handles.items()
                     if run.state.procs.get(n) is not None and run.state.procs[n].alive is not False]
        try:
            async with asyncio.timeout(live):
                await self._live_pass()
        except TimeoutError:
            pass
        finally:
            await cancel_all(tails)
            await self.metrics.http.aclose()
        if run.state.status in LIVE:
            self.settle()
        run.save_offsets()
        return run.state

    async def _live_pass(self) -> None:
        run = self.run
        t0 = time.monotonic()

        async def ports() -> None:
            await self.barrier.probe_once()
            self.passed["barrier"] = time.time()

        if run.state.status not in LIVE:
            await ports()
            return

        async def smoke() -> None:
            await self.router.live_smoke(SMOKE_S)
            self.passed["smoke"] = time.time()

        async def scrape() -> None:
            await self.metrics.scrape_all()
            self.passed["metrics"] = time.time()

        async def health() -> None:
            await self.health.check_once()
            self.passed["health"] = time.time()

        async def gpus() -> None:
            await self.gpus.poll_once()
            self.passed["gpus"] = time.time()

        await asyncio.gather(ports(), smoke(), scrape(), health(), gpus())
        parked = any(m.get("parked") for m in run.state.metrics.values())
        wait = max(1.0, PARKED_S + 0.2 if parked else 0.0) - (time.monotonic() - t0)
        if wait > 0:
            await asyncio.sleep(wait)
        await scrape()
