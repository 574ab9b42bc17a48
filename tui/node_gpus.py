"""The GPUs of the shown cluster's nodes that no attached run reads (core/run/nodegpus.py): free VRAM, and memory held
by another job or an orphan, for picking nodes before a launch. Read in the background when the Nodes view is shown
(again once the last reading is STALE_S old) and on its `g` key; the Nodes view draws what was read, merged under
the attached run's own readings (its watcher's). Used by app.py and the Nodes view only."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.run.gpustate import NodeGpuState

STALE_S = 60.0  # a reading older than this is taken again when the Nodes view is shown
# A cluster of more nodes is read on the `g` key only: at FAN_OUT (8) commands at once, an SSH cluster of 2,000 nodes
# would be 2,000 SSH commands and minutes of reading at every visit of the view after STALE_S.
AUTO_READ_MAX = 256


class NodeGpuBook:
    def __init__(self, app: Any, enabled: bool) -> None:
        self.app = app
        self.enabled = enabled  # off for a console given a made-up inventory (tests) or offline
        self.states: dict[str, NodeGpuState] = {}
        self.note = ""  # why nothing was read (a Slurm cluster), or what failed
        self.cluster = ""  # whose nodes `states` are
        self.reading = 0  # nodes being read now
        self.at: float | None = None  # when the last reading ended (the console's clock: app.now())
        self.version = 0  # changes whenever what the view shows of them does (a reading started or ended)
        self.on_change: Callable[[], None] | None = None  # the Nodes view's redraw, called when a reading ends
        self.too_many: tuple[str, int] | None = None  # (cluster, nodes) not read on its own: AUTO_READ_MAX

    def want(self, force: bool = False) -> bool:
        """Read the nodes' GPUs unless a reading of this cluster is fresh or running; `force` (the key): read now
        whatever the last reading's age. Returns whether a reading started."""
        ws = self.app.workspace
        if self.reading or not (self.enabled or force):
            return False
        fresh = self.at is not None and self.app.now() - self.at < STALE_S and self.cluster == ws.cluster.name
        if fresh and not force:
            return False
        live = self.app.live
        taken = set(live.run.plan.selection.all()) if live is not None else set()
        nodes = [(n.name, n.addr) for n in ws.inventory if n.name not in taken]
        if not nodes:
            return False
        if not force and len(nodes) > AUTO_READ_MAX:
            if self.too_many != (ws.cluster.name, len(nodes)):
                self.too_many = (ws.cluster.name, len(nodes))
                self.version += 1
            return False
        self.reading = len(nodes)
        self.version += 1
        self.app.run_worker(self._read(ws.cluster, nodes), group="node-gpus", exclusive=True, exit_on_error=False)
        return True

    async def _read(self, cluster, nodes: list[tuple[str, str]]) -> None:
        from ..core.run.nodegpus import read_nodes

        try:
            states, note = await read_nodes(cluster, nodes)
        except Exception as e:  # a reading must never take the console down
            states, note = {}, f"GPUs not read: {e}"
        finally:
            self.reading = 0
            self.version += 1
        if cluster.name != self.cluster:
            self.states = {}
        self.states.update(states)
        self.note, self.cluster, self.at = note, cluster.name, self.app.now()
        self.app.node_gpus_read()  # (the nodes whose memory others hold are not auto-picked)
        if self.on_change is not None:
            self.on_change()

    def shown(self, cluster_name: str) -> dict[str, NodeGpuState]:
        return self.states if cluster_name == self.cluster else {}

    def status(self, cluster_name: str) -> str:
        """The Nodes view's line about them."""
        if self.reading:
            return f"GPUs: reading {self.reading} nodes (amd-smi) …"
        if self.cluster != cluster_name or self.at is None:
            if self.enabled and self.too_many is not None and self.too_many[0] == cluster_name:
                return f"GPUs: not read ({self.too_many[1]} nodes: g reads them all)"
            return "GPUs: not read (g reads them)" if not self.enabled else "GPUs: not read yet"
        if self.note:
            return self.note
        held = sum(1 for s in self.states.values() if s.flag())
        when = time.strftime("%H:%M:%S", time.localtime(self.at))
        holds = f" · {held} node{' holds' if held == 1 else 's hold'} memory" if held else ""
        return f"GPUs read {when} (g reads again){holds}"
