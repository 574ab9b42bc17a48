"""The run's view of its nodes' GPUs, as the GPU watcher reports it (events of kind "gpus"), and the words the
console and the CLI show for it. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..design.inventory import Node
    from ..design.plan import Plan
    from ..remote.gpus import NodeGpus

# InferenceX's idle threshold, as core/remote/gpus.py's (a test keeps them equal): not imported from there, because
# the console imports this module at its start and must not load remote/ (tests/tui/test_first_frame.py)
VRAM_IDLE_PCT = 10


@dataclass(frozen=True)
class GpuView:
    index: int
    used_mb: int | None
    total_mb: int | None
    util_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None

    @property
    def busy(self) -> bool:
        if self.used_mb is None or not self.total_mb:
            return False
        return 100 * self.used_mb / self.total_mb > VRAM_IDLE_PCT


@dataclass
class NodeGpuState:
    node: str
    tool: str = ""
    error: str = ""
    gpus: list[GpuView] = field(default_factory=list)
    foreign: list[int] = field(default_factory=list)  # GPUs holding memory with no live process of this run
    holders: list[tuple[int, int, str, int]] = field(default_factory=list)  # (gpu, pid, name, MiB) when listed
    since: float = 0.0
    owners: dict[str, list[int]] = field(default_factory=dict)  # the run's process -> the GPUs it uses here

    @staticmethod
    def from_event(node: str, tool: str, error: str, data: dict, t: float) -> NodeGpuState:
        gpus = [GpuView(*row) for row in data.get("gpus", [])]
        return NodeGpuState(node, tool, error, gpus, list(data.get("foreign", [])),
                            [(int(h[0]), int(h[1]), str(h[2]), int(h[3])) for h in data.get("holders", [])], t,
                            {k: list(v) for k, v in data.get("owners", {}).items()})

    def gpu(self, index: int) -> GpuView | None:
        return next((g for g in self.gpus if g.index == index), None)

    def free_mb(self) -> tuple[int, int]:
        """(free, total) VRAM over the node's GPUs that report both."""
        known = [(g.used_mb, g.total_mb) for g in self.gpus if g.used_mb is not None and g.total_mb]
        return sum(t - u for u, t in known), sum(t for _, t in known)

    def flag(self) -> str:
        """'8/8 GPUs hold 275 GB: another job, or an orphan (pid 4242 ATOM::TP3, ...)' or ''."""
        if not self.foreign:
            return ""
        held = [g.used_mb or 0 for g in self.gpus if g.index in self.foreign]
        most = max(held) if held else 0
        out = f"{len(self.foreign)}/{len(self.gpus)} GPUs hold {gb(most)}: another job, or an orphan"
        named = sorted({(pid, name) for gpu, pid, name, _ in self.holders if gpu in self.foreign})
        if named:
            shown = ", ".join(f"pid {pid} {name}".rstrip() for pid, name in named[:3])
            out += f" ({shown}{', ...' if len(named) > 3 else ''})"
        return out


def gpus_data(ng: NodeGpus, foreign: list[int], holders: list[tuple[int, int, str, int]],
              owners: dict[str, list[int]]) -> dict:
    """A node's reading as a "gpus" event carries it (NodeGpuState.from_event reads it back)."""
    return {"gpus": [[g.index, g.used_mb, g.total_mb, g.util_pct, g.power_w, g.temp_c] for g in ng.gpus],
            "foreign": foreign, "holders": [list(h) for h in holders], "owners": owners}


def gb(mb: int | float | None) -> str:
    """MiB as the console says it: '275 GB' (GiB, as amd-smi's MB are MiB), '1.9 TB' past 1,000 GB."""
    if mb is None:
        return "?"
    g = mb / 1024
    return f"{g / 1024:.1f} TB" if g >= 1000 else f"{g:.0f} GB"


def free_words(ns: NodeGpuState | None) -> str:
    """'1.9 TB free of 2.3 TB' for a node, or why there are no numbers."""
    if ns is None:
        return ""
    if ns.error and not ns.gpus:
        return ns.error
    free, total = ns.free_mb()
    return f"{gb(free)} free of {gb(total)}" if total else "no VRAM numbers"


def expected_gpus(plan: Plan) -> dict[str, tuple[str, list[int]]]:
    """Each worker's node and the GPUs it uses there: the ones it was given (HIP_VISIBLE_DEVICES when workers share a
    node), else the first `tp` of the node (ATOM puts rank r of EngineCore d on device d*tp + r)."""
    per_node = plan.cluster.gpus_per_node
    return {e.name: (e.node, list(e.gpus) if e.gpus else list(range(min(e.tp, per_node)))) for e in plan.endpoints}


def process_gpus(plan: Plan, gpus: dict[str, NodeGpuState], name: str) -> list[GpuView]:
    """The readings of the GPUs a worker uses (empty for the router, or before a reading)."""
    node, idx = expected_gpus(plan).get(name, ("", []))
    ns = gpus.get(node)
    if ns is None:
        return []
    return [g for g in (ns.gpu(i) for i in idx) if g is not None]


def gpus_words(views: list[GpuView]) -> str:
    """'8 GPUs 245 GB each, 12 %' (a worker's GPUs, in one line)."""
    if not views:
        return ""
    used = [g.used_mb for g in views if g.used_mb is not None]
    util = [g.util_pct for g in views if g.util_pct is not None]
    out = f"{len(views)} GPU{'s' if len(views) != 1 else ''}"
    if used:
        lo, hi = min(used), max(used)
        out += f" {gb(hi)}" + (" each" if len(views) > 1 and gb(lo) == gb(hi) else f" max, {gb(lo)} min")
    if util:
        out += f", {sum(util) / len(util):.0f} %"
    return out


def proc_gpus(gpus: dict[str, NodeGpuState], node: str, name: str) -> list[GpuView]:
    """The readings of the GPUs the run's process `name` uses on `node` (none for the router, or before a reading)."""
    ns = gpus.get(node)
    if ns is None:
        return []
    return [g for g in (ns.gpu(i) for i in ns.owners.get(name, [])) if g is not None]


def gpus_cell(views: list[GpuView]) -> str:
    """A table cell: '8×245G 12%' (count, the most VRAM used on one of them, mean GFX activity)."""
    if not views:
        return ""
    used = max((g.used_mb for g in views if g.used_mb is not None), default=None)
    util = [g.util_pct for g in views if g.util_pct is not None]
    out = f"{len(views)}×{'?' if used is None else f'{used / 1024:.0f}G'}"
    return out + (f" {sum(util) / len(util):.0f}%" if util else "")


def node_cell(ns: NodeGpuState | None) -> str:
    """A table cell: '2.2T free', 'no amd-smi' or ''."""
    if ns is None:
        return ""
    if ns.error and not ns.gpus:
        return "no amd-smi" if "neither" in ns.error else "unread"
    free, total = ns.free_mb()
    if not total:
        return ""
    g = free / 1024
    return (f"{g / 1024:.1f}T" if g >= 1000 else f"{g:.0f}G") + " free"


def mark_held(inventory: list[Node], states: Mapping[str, NodeGpuState]) -> list[Node]:
    """The inventory with each node's `held` as its GPUs were last read: what NodeGpuState.flag says of the memory
    no run of ours holds (a node not read keeps no mark). Such a node is not auto-picked, and picking it by hand
    is an error unless overridden, as for a drained node: the pre-flight check would refuse it at launch."""
    out = []
    for n in inventory:
        st = states.get(n.name)
        held = st.flag() if st is not None and not st.error else ""
        out.append(n if n.held == held else replace(n, held=held))
    return out
