"""A picture of the plan: one box per node with its endpoints, the router and every port on it.

Everything drawn comes from core's Plan (endpoints, router placement, handshake blocks); the
widget only arranges it. Focusable: arrows move between nodes, the Layout screen's keys act on
the highlighted node.
"""

from __future__ import annotations

from typing import ClassVar

from rich import box
from rich.columns import Columns
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget

from ...core.config.cluster import Cluster
from ...core.design.draft import Design
from ...core.design.inventory import Node
from ...core.design.lint import Assessment
from ...core.design.plan import Plan, node_verdict
from ..formatting import port_ranges

BOX_WIDTH = 28
BOLD = Style(bold=True)


class LayoutPicture(Widget, can_focus=True):
    COMPONENT_CLASSES = {"layout-picture--prefill", "layout-picture--decode", "layout-picture--worker",
                         "layout-picture--router", "layout-picture--error", "layout-picture--warning"}
    DEFAULT_CSS = """
    LayoutPicture > .layout-picture--prefill { color: $text-accent; }
    LayoutPicture > .layout-picture--decode { color: $text-primary; }
    LayoutPicture > .layout-picture--worker { color: $text-primary; }
    LayoutPicture > .layout-picture--router { color: $text-success; }
    LayoutPicture > .layout-picture--error { color: $text-error; }
    LayoutPicture > .layout-picture--warning { color: $text-warning; }
    """
    BINDINGS: ClassVar = [
        Binding("left,up,k,h", "move(-1)", "Previous node", show=False),
        Binding("right,down,j,l", "move(1)", "Next node", show=False),
    ]

    cursor: reactive[int] = reactive(0)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.assessment: Assessment | None = None
        self.design: Design | None = None
        self.inventory: list[Node] = []
        self.cluster: Cluster | None = None

    def show(self, assessment: Assessment, design: Design, inventory: list[Node], cluster: Cluster) -> None:
        self.assessment, self.design, self.inventory, self.cluster = assessment, design, inventory, cluster
        self.cursor = min(self.cursor, max(0, len(self.node_names) - 1))
        self.refresh(layout=True)

    @property
    def node_names(self) -> list[str]:
        a = self.assessment
        if a is None:
            return []
        if a.plan is not None:
            return [n.name for n in a.plan.nodes]
        return list(self.design.nodes) if self.design else []

    @property
    def current(self) -> str | None:
        names = self.node_names
        return names[self.cursor] if 0 <= self.cursor < len(names) else None

    def select(self, node: str) -> None:
        if node in self.node_names:
            self.cursor = self.node_names.index(node)

    def action_move(self, step: int) -> None:
        if self.node_names:
            self.cursor = (self.cursor + step) % len(self.node_names)

    def watch_cursor(self) -> None:
        self.refresh()

    def render(self) -> RenderableType:
        a = self.assessment
        if a is None:
            return Text("loading…", style="dim")
        parts: list[RenderableType] = []
        if a.plan is not None:
            parts += self._headline(a.plan)
            boxes = [self._node_box(a.plan, name, i == self.cursor and self.has_focus)
                     for i, name in enumerate(self.node_names)]
        else:
            err = next((f for f in a.findings if f.severity == "error"), None)
            parts.append(Text(f"no layout yet: {err.message if err else 'no plan'}",
                              style=BOLD + self._color("error")))
            boxes = [self._unplaced_box(name, i == self.cursor and self.has_focus)
                     for i, name in enumerate(self.node_names)]
        if boxes:
            parts.append(Columns(boxes, padding=(0, 1)))
        parts.append(self._others())
        return Group(*parts)

    def _headline(self, plan: Plan) -> list[RenderableType]:
        r = plan.recipe
        head = Text()
        head.append(plan.shape, style="bold")
        head.append(f" · router {plan.router.url} · policy {r.router.policy} · "
                    f"barrier {len(plan.barrier)} ports on {len(plan.nodes)} nodes")
        flow = Text("client → ")
        flow.append("router", style=BOLD + self._color("router"))
        for role in ("prefill", "decode", "worker"):
            eps = plan.role_endpoints(role)
            if not eps:
                continue
            sep = f" ─KV {r.mooncake.protocol or 'rdma'}→ " if role == "decode" else " → "
            flow.append(sep)
            flow.append(", ".join(e.name for e in eps), style=BOLD + self._color(role))
        return [head, flow]

    def _node_box(self, plan: Plan, name: str, focused: bool) -> Panel:
        node = plan.node(name)
        role = plan.selection.role_of(name) or "router"
        color = self._color(role)
        body = Text()
        body.append(f"{node.addr} · {node.gpus} GPUs", style="dim")
        if name in plan.overrides:
            body.append("\n▲ overridden", style=self._color("warning"))
        for ep in plan.on_node(name):
            ecolor = self._color(ep.role)
            body.append("\n")
            body.append(ep.name, style=BOLD + ecolor)
            gpus = f" GPU {ep.gpus[0]}-{ep.gpus[-1]}" if ep.gpus else ""
            body.append(f"  TP{ep.tp}{gpus}")
            body.append(f"\n  http :{ep.http_port}")
            if ep.engine_port is not None:
                body.append(f"  engine :{ep.engine_port}")
            if ep.handshake_ports:
                body.append(f"\n  handshake {port_ranges(ep.handshake_ports)}")
        if plan.router.node == name:
            body.append("\n")
            body.append("router", style=BOLD + self._color("router"))
            body.append(f" :{plan.router.port}")
            body.append(f"\n  prometheus :{plan.router.prometheus_port}")
        title = Text(f" {name} ", style=BOLD + color)
        title.append(f"{role} ", style=color)
        return Panel(body, title=title, title_align="left", width=BOX_WIDTH, border_style=color,
                     box=box.DOUBLE if focused else box.ROUNDED)

    def _color(self, name: str) -> Style:
        """A role's or a severity's colour (the theme's, through this widget's component classes)."""
        return self.get_component_rich_style(f"layout-picture--{name}", partial=True, default=Style())

    def _unplaced_box(self, name: str, focused: bool) -> Panel:
        return Panel(Text("picked, not placed", style="dim"), title=f" {name} ", title_align="left",
                     width=BOX_WIDTH, border_style="dim", box=box.DOUBLE if focused else box.ROUNDED)

    def _others(self) -> Text:
        placed = set(self.node_names)
        spare, unusable = [], []
        for n in self.inventory:
            if n.name in placed:
                continue
            (unusable if self.cluster and node_verdict(n, self.cluster) else spare).append(n.name)
        out = Text(style="dim")
        out.append(f"spare: {', '.join(spare) or 'none'}")
        if unusable:
            out.append(f" · not usable: {', '.join(unusable)}")
        return out
