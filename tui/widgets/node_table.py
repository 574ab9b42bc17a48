"""The cluster's nodes: state, GPUs, partition, why a node may not be used, and its role."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from ...core.cluster import Cluster
from ...core.design import Design
from ...core.inventory import Node
from ...core.lint import Assessment
from ...core.plan import node_verdict
from ..palette import role_color, severity_color

COLUMNS = [("pick", "#"), ("node", "NODE"), ("addr", "ADDR"), ("state", "STATE"), ("gpus", "GPUS"),
           ("partition", "PARTITION"), ("role", "ROLE"), ("why", "WHY NOT / REASON")]


class NodeTable(DataTable):
    """Rows keyed by node name. Unusable nodes are dimmed with core's verdict (node_verdict)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.verdicts: dict[str, str] = {}
        self.shown: list[str] = []  # node names currently listed, in order

    def on_mount(self) -> None:
        for key, label in COLUMNS:
            self.add_column(label, key=key)

    @property
    def current(self) -> str | None:
        """The node under the cursor."""
        if not self.shown or self.cursor_row < 0 or self.cursor_row >= len(self.shown):
            return None
        return self.shown[self.cursor_row]

    def show(self, nodes: list[Node], cluster: Cluster, design: Design, assessment: Assessment,
             filter_text: str = "") -> None:
        keep = self.current
        sel = assessment.selection
        self.verdicts = {n.name: node_verdict(n, cluster) for n in nodes}
        needle = filter_text.strip().lower()
        self.clear()
        self.shown = []
        for n in nodes:
            cells = self._cells(n, design, sel)
            if needle and needle not in " ".join(c.plain for c in cells).lower():
                continue
            self.add_row(*cells, key=n.name)
            self.shown.append(n.name)
        if keep in self.shown:
            self.move_cursor(row=self.shown.index(keep), animate=False)

    def _cells(self, n: Node, design: Design, sel) -> list[Text]:
        verdict = self.verdicts[n.name]
        overridden = n.name in design.overrides
        dim = "dim" if verdict and not overridden else ""
        role = sel.role_of(n.name) if sel else ""
        if sel and sel.router == n.name and role != "router":
            role_text = Text(role, style=role_color(self.app, role)) + Text("+router",
                                                                            style=role_color(self.app, "router"))
        else:
            role_text = Text(role, style=role_color(self.app, role))
        if design.nodes:
            pick = f"●{design.nodes.index(n.name) + 1}" if n.name in design.nodes else ""
        else:
            pick = "auto" if role else ""
        if verdict and overridden:
            why = Text(f"▲ overridden: {verdict}", style=severity_color(self.app, "warning"))
        else:
            why = Text(verdict or n.reason, style=dim)
        plain = [pick, n.name, n.addr, n.state, str(n.gpus), ",".join(n.partitions)]
        cells = [Text(c, style=dim) for c in plain]
        cells[0].stylize("bold")
        cells[4].justify = "right"
        return [*cells, role_text if not dim else Text(role, style="dim"), why]
