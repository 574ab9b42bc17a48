"""The cluster's nodes: state, GPUs (and, while a run is attached, their free VRAM), partition, why a node may not be
used, and its role."""

from __future__ import annotations

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text

from ...core.config.cluster import Cluster
from ...core.design.draft import Design
from ...core.design.inventory import Node
from ...core.design.lint import Assessment
from ...core.design.plan import node_verdict
from ...core.run.gpustate import NodeGpuState, node_cell
from ..gc_steward import settle_gc
from .vtable import VirtualTable

FREEZE_AT = 500  # nodes
COLUMNS = [("pick", "#"), ("node", "NODE"), ("addr", "ADDR"), ("state", "STATE"), ("gpus", "GPUS"),
           ("vram", "VRAM"), ("partition", "PARTITION"), ("role", "ROLE"), ("why", "WHY NOT / REASON")]


class NodeTable(VirtualTable):
    """Rows keyed by node name. Unusable nodes are dimmed with core's verdict (node_verdict). Drawn line by
    line (vtable.py): a filter keystroke costs the rows on screen, not the 2,000 nodes."""

    COMPONENT_CLASSES = {"node-table--prefill", "node-table--decode", "node-table--worker",
                         "node-table--router", "node-table--warning"}
    DEFAULT_CSS = """
    NodeTable > .node-table--prefill { color: $text-accent; }
    NodeTable > .node-table--decode { color: $text-primary; }
    NodeTable > .node-table--worker { color: $text-primary; }
    NodeTable > .node-table--router { color: $text-success; }
    NodeTable > .node-table--warning { color: $text-warning; }
    """
    ROLES = frozenset({"prefill", "decode", "worker", "router", "warning"})

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, zebra_stripes=True)
        self.verdicts: dict[str, str] = {}
        self._gpus: dict[str, NodeGpuState] = {}
        self.shown: list[str] = []  # node names currently listed, in order
        self._cells_key: tuple = ()
        self._node_rows: list[tuple[str, list[Text]]] = []  # every node's row, made once per inventory
        self._hay: list[str] = []  # each row's text, lower-case, for the filter
        self._drawn: list[int] | None = None

    def on_mount(self) -> None:
        self.set_columns(COLUMNS)

    @property
    def current(self) -> str | None:
        """The node under the cursor."""
        return self.cursor_key

    def show(self, nodes: list[Node], cluster: Cluster, design: Design, assessment: Assessment,
             filter_text: str = "", gpus: dict[str, NodeGpuState] | None = None) -> None:
        """Rows for the nodes matching the filter. The cells are computed once per inventory/design/
        assessment and reused while the filter is typed; when the matching set does not change the
        table is left alone (2,000 nodes stay responsive)."""
        # the App's version changes with every design, assessment, inventory or theme change
        gpus = gpus or {}
        key = (getattr(self.app, "version", None), id(nodes), len(nodes), id(cluster),
               tuple((n, g.since) for n, g in gpus.items()))  # a new GPU reading (every few seconds in a run)
        if key != self._cells_key:
            self._gpus = gpus
            sel = assessment.selection
            self.verdicts = {n.name: node_verdict(n, cluster) for n in nodes}
            rows = [(n.name, self._cells(n, design, sel)) for n in nodes]
            self._hay = [" ".join(c.plain for c in cells).lower() for _, cells in rows]
            # fixed widths from every node's cells: stable while the filter changes what is shown, and
            # nothing to measure on a keystroke
            widths = [cell_len(label) for _, label in COLUMNS]
            for _, cells in rows:
                for i, c in enumerate(cells):
                    widths[i] = max(widths[i], c.cell_len)
            self.set_columns(COLUMNS, widths)
            self._node_rows = rows
            self._cells_key = key
            self._drawn = None
            if len(nodes) >= FREEZE_AT:
                # tens of thousands of long-lived cells: keep them out of the cyclic GC's full passes
                # (a full pass over them took ~80 ms in the middle of a filter keystroke at 2,000 nodes).
                # Only the cyclic collector skips them; reference counting still frees them. Frozen
                # objects are never collected, so first thaw and collect what died since the last
                # rebuild (closed screens, old rows): one full pass per rebuild, none per keystroke.
                settle_gc()
        needle = filter_text.strip().lower()
        picked = [i for i, hay in enumerate(self._hay) if not needle or needle in hay]
        if picked == self._drawn:
            return
        self._drawn = picked
        self.shown = [self._node_rows[i][0] for i in picked]
        self.set_rows([self._node_rows[i] for i in picked])  # the cursor stays on its node

    def _cells(self, n: Node, design: Design, sel) -> list[Text]:
        verdict = self.verdicts[n.name]
        overridden = n.name in design.overrides
        dim = "dim" if verdict and not overridden else ""
        role = sel.role_of(n.name) if sel else ""
        if sel and sel.router == n.name and role != "router":
            role_text = Text(role, style=self._role(role)) + Text("+router", style=self._role("router"))
        else:
            role_text = Text(role, style=self._role(role))
        if design.nodes:
            pick = f"●{design.nodes.index(n.name) + 1}" if n.name in design.nodes else ""
        else:
            pick = "auto" if role else ""
        if verdict and overridden:
            why = Text(f"▲ overridden: {verdict}", style=self._role("warning"))
        else:
            why = Text(verdict or n.reason, style=dim)
        ns = self._gpus.get(n.name)
        plain = [pick, n.name, n.addr, n.state, str(n.gpus), node_cell(ns), ",".join(n.partitions)]
        cells = [Text(c, style=dim) for c in plain]
        cells[0].stylize("bold")
        cells[4].justify = cells[5].justify = "right"
        if ns is not None and ns.foreign:  # memory held by no process of the run: another job, or an orphan
            cells[5] = Text(f"▲ {len(ns.foreign)}/{len(ns.gpus)} held", style=self._role("warning"))
        return [*cells, role_text if not dim else Text(role, style="dim"), why]

    def _role(self, role: str) -> Style:
        """A role's (or 'warning') colour from the theme (none for a node without a role)."""
        if role not in self.ROLES:
            return Style()
        return self.get_component_rich_style(f"node-table--{role}", partial=True, default=Style())
