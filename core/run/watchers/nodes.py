"""Slurm's (or the SSH pool's) view of the run's nodes: a dead slurmd shows as 'not responding'."""

from __future__ import annotations

import asyncio

from ..events import Event
from .base import RunHost


class NodeHealthWatcher:
    def __init__(self, run: RunHost, group=None):
        self.run = run

    async def poll(self, every: float = 3.0) -> None:
        nodes = list(self.run.plan.selection.all())
        while True:
            health = await self.run.launcher.node_health(nodes)
            for node, why in health.items():
                self.run.emit(Event("conn", node, "ok" if not why else "unhealthy", why))
            await asyncio.sleep(every)
