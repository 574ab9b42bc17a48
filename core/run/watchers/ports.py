"""The barrier: every (node, port) cell probed by core/run/barrier.py's prober, at once and then fast
when a log line says a port is about to open, or when the node's own table of listening sockets shows
it (launchers that can read one: `listen_table(node)`); a worker port that opens gets its /health and
kv_role checked."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ...remote.probes import http_get, tcp_probe
from ..barrier import BarrierProber
from ..events import WORKER_STAGES, CellState, Event
from .base import RunHost, background

if TYPE_CHECKING:
    from .base import WatcherGroup as Watchers  # (the package imports this module)


class BarrierWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group
        self.prober: BarrierProber | None = None
        self.hints: set[str] = set()  # processes whose log said their port opens any moment
        self.background: set[asyncio.Task] = set()
        self.watching = False  # a watch's prober is running (not `atomdeck status`'s one pass)

    def make_prober(self) -> BarrierProber:
        # local and ssh launchers read the node's /proc/net/tcp; Slurm has no per-node channel to read
        # it on a cadence (each srun step costs ~50 ms of CPU), so its barrier connects only
        table_for = getattr(self.run.launcher, "listen_table", None)
        self.prober = BarrierProber(list(self.run.state.cells.values()), self.run.launcher.probe_runner,
                                    self.expected_soon, self.owner_alive, self.on_cell, table_for=table_for)
        self.watching = True
        return self.prober

    def unconfirmed(self) -> list[CellState]:
        """Cells of live processes that the running prober has not seen open (none without a prober)."""
        if not self.watching:
            return []
        return [c for c in self.run.state.cells.values() if c.state != "open" and self.owner_alive(c) is not False]

    def look_again(self) -> None:
        """Before "serving" is said: the router's answers imply every port is up, so each cell not yet seen
        open is probed at once instead of at its back-off's next turn."""
        if self.watching and self.prober is not None:
            self.prober.probe_now(self.unconfirmed())

    def wake(self, node: str | None) -> None:
        if self.prober:
            self.prober.wake(node)

    def hint(self, name: str, node: str) -> None:
        self.hints.add(name)
        self.wake(node)

    def expected_soon(self, c: CellState) -> bool:
        p = self.run.state.procs.get(c.owner or "")
        if p is None:
            return False
        stage = p.up_stage
        if c.kind == "handshake":
            return WORKER_STAGES.index(stage) >= WORKER_STAGES.index("kv_registered") if stage in WORKER_STAGES \
                else False
        if c.kind == "router":
            return stage in ("workers_registered", "ready") or p.name in self.hints
        if c.kind == "http":
            return p.name in self.hints or stage == "http_up"
        return False

    def owner_alive(self, c: CellState) -> bool | None:
        p = self.run.state.procs.get(c.owner or "")
        return None if p is None else p.alive

    def on_cell(self, c: CellState, result: str) -> None:
        run = self.run
        was = run.state.cells[c.key].state if c.key in run.state.cells else None
        run.emit(Event("cell", c.key, result, data={"node": c.node, "port": c.port}))
        if result != "open" or was == "open":
            return  # only a cell that just opened starts its checks (open cells are re-probed every second)
        if c.kind == "http" and c.owner:
            background(self.background, self.check_worker(c.owner))
        if c.kind == "router":
            run.emit_stage("router", "http_up")

    async def check_worker(self, name: str) -> None:
        """Port open: confirm /health, and that the worker's kv_role is the one AToMesh expects."""
        run = self.run
        ep = run.plan.endpoint(name)
        runner = run.launcher.probe_runner(ep.node)
        for _ in range(20):
            r = await http_get(ep.host, ep.http_port, "/health", 2.0, runner)
            if r.ok:
                run.emit_stage(name, "http_up", "GET /health 200")
                break
            await asyncio.sleep(0.25)
        if ep.role in ("prefill", "decode"):
            info = await http_get(ep.host, ep.http_port, "/kv_transfer_info", 2.0, runner)
            role = (info.json() or {}).get("kv_role") if info.ok else None
            want = "kv_producer" if ep.role == "prefill" else "kv_consumer"
            if role is not None and role != want:
                run.emit(Event("check", f"kv_role:{name}", "fail",
                               f"{name} reports kv_role={role}, expected {want} (AToMesh refuses a prefill that "
                               f"is not a producer)"))
            elif role == want:
                run.emit(Event("check", f"kv_role:{name}", "ok", f"kv_role={role}"))

    async def probe_once(self) -> None:
        """Every cell once (for `atomdeck status`)."""
        run = self.run
        runner_for = run.launcher.probe_runner
        cells = list(run.state.cells.values())
        results = await asyncio.gather(*(tcp_probe(c.host, c.port, 1.0, runner_for(c.node)) for c in cells))
        for c, res in zip(cells, results):
            run.emit(Event("cell", c.key, res, data={"node": c.node, "port": c.port}))
