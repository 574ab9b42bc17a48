"""The clock: the worker and router timeouts of the recipe, and the handshake panel's periodic checks."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ..diagnose import diagnose
from ..events import LIVE
from .base import RunHost

if TYPE_CHECKING:
    from .base import WatcherGroup as Watchers  # (the package imports this module)


class TimeoutWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group

    async def tick(self) -> None:
        run = self.run
        t0 = run.state.started or time.time()
        all_up_at: float | None = None
        while True:
            await asyncio.sleep(0.5)
            now = time.time()
            s = run.state
            if s.status not in ("starting", "launching"):
                if s.status in ("failed", "stopped", "dirty", *LIVE):
                    await self.group.pairs.checks()
                continue
            workers = [p for p in s.procs.values() if p.role != "router"]
            up = all(p.up_stage in ("http_up", "registered", "serving") for p in workers)
            if up and all_up_at is None:
                all_up_at = now
            if not up and now - t0 > run.recipe.health.worker_timeout_s:
                run._fail(f"timeout after {run.recipe.health.worker_timeout_s:g}s: {diagnose(s).headline}")
            if all_up_at and now - all_up_at > run.recipe.health.router_timeout_s and \
                    s.procs.get("router") and s.procs["router"].up_stage != "serving":
                run._fail(f"router not serving {run.recipe.health.router_timeout_s:g}s after every worker "
                          f"was up: {diagnose(s).headline}")
            await self.group.pairs.checks()
