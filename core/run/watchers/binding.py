"""Ready but not bound: a worker logged that it is ready (ATOM's `EngineCore fully initialized and
ready` / `Starting server on`, AToMesh's `Router ready |`) but its port stays closed. Within
BIND_GRACE_S that is named, with what the process really listens on, read on its node from /proc
(a worker bound to another port or address is the usual cause)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ..events import TERMINAL, Event
from .base import RunHost, background

if TYPE_CHECKING:
    from .base import WatcherGroup as Watchers  # (the package imports this module)

BIND_GRACE_S = 5.0
RECHECK_S = 5.0


class BindWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group
        self.ready_at: dict[str, tuple[float, str]] = {}  # process -> (when it said ready, the line)
        self.told: dict[str, float] = {}
        self.tasks: set[asyncio.Task] = set()

    def ready(self, name: str, line: str) -> None:
        self.ready_at.setdefault(name, (time.time(), line.strip()))

    def cell_of(self, name: str):
        for c in self.run.state.cells.values():
            if c.owner == name and c.kind in ("http", "router"):
                return c
        return None

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.check(time.time())

    def check(self, now: float) -> None:
        run = self.run
        for name, (t, line) in list(self.ready_at.items()):
            c = self.cell_of(name)
            p = run.state.procs.get(name)
            if c is None or p is None or p.stage in TERMINAL or run.stopping:
                continue
            key = f"bind:{name}"
            if c.state == "open":
                if key in run.state.checks and run.state.checks[key].ok is False:
                    run.emit(Event("check", key, "ok", f"{c.node}:{c.port} open {now - t:.0f}s after the ready line"))
                self.ready_at.pop(name, None)
                continue
            if now - t < BIND_GRACE_S or now - self.told.get(name, 0) < RECHECK_S:
                continue
            self.told[name] = now
            background(self.tasks, self.tell(name, c, t, line))

    async def tell(self, name: str, c, t: float, line: str) -> None:
        run = self.run
        said = line
        for marker in ("EngineCore fully initialized", "Starting server on", "Router ready"):
            if marker in line:
                said = marker
        listens = await self.listening(name, c.node)
        if run.state.cells.get(c.key) is not None and run.state.cells[c.key].state == "open":
            return
        msg = (f"{name} logged '{said}' {time.time() - t:.0f}s ago but {c.node}:{c.port} is not open"
               f"{listens}")
        run.emit(Event("check", f"bind:{name}", "fail", msg, data={"node": c.node, "port": c.port}))

    async def listening(self, name: str, node: str) -> str:
        run = self.run

        try:
            async with asyncio.timeout(15):
                procs = await run.launcher.node_processes(node, f"{run.id}:{name}")
        except Exception as e:
            return f"; could not read its sockets on {node}: {str(e)[:120]}"
        socks = sorted({s for p in procs for s in p.listening})
        if not procs:
            return f"; no process of it found on {node}"
        if not socks:
            return f"; on {node} it listens on no TCP port yet"
        return f"; on {node} it listens on {', '.join(socks)}"
