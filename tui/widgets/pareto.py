"""The Pareto chart: output tok/s per GPU against tok/s per user, one curve per bench (a layout), this
run's curve over earlier ones of the same model and workload, the Pareto-optimal points marked.

Drawn by plotext through textual-plotext (the plotting library made for Textual); `chart_svg` renders
the same chart to SVG with Rich for the export.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.text import Text
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from ...core.measure.compare import pareto_front

X_LABEL = "tok/s per user (1000 / median TPOT)"
Y_LABEL = "output tok/s per GPU"
CURRENT_COLOR = "orange+"
EARLIER_COLORS = ("cyan", "green", "magenta", "blue", "yellow", "red", "gray")
POINT_MARKER = "●"
FRONT_MARKER = "◆"


@dataclass(frozen=True)
class Curve:
    """One bench's steps as points (x = tok/s per user, y = output tok/s per GPU), in concurrency order."""

    label: str
    points: tuple[tuple[float, float], ...] = field(default_factory=tuple)
    current: bool = False


def curve_of(report: dict, current: bool = False) -> Curve:
    """A bench report (measure.results JSON) as a curve labelled by its layout."""
    pts = tuple((r.get("interactivity", 0.0), r.get("output_throughput_per_gpu", 0.0))
                for r in report.get("results", []) if r.get("completed"))
    label = report.get("layout") or "?"
    return Curve(f"{label} (this run)" if current else f"{label} · {str(report.get('run', ''))[:15]}", pts, current)


def draw(plt: Plot, curves: Sequence[Curve], title: str = "") -> int:
    """Draw the curves on a plotext figure; returns how many points are on the Pareto front."""
    plt.clear_figure()  # data, labels and legend (the widget sets its theme again when it renders)
    plt.title(title or "Pareto: throughput per GPU vs interactivity")
    plt.xlabel(X_LABEL)
    plt.ylabel(Y_LABEL)
    ordered = [c for c in sorted(curves, key=lambda c: c.current) if c.points]  # this run last: on top
    colors, earlier = [], 0
    for c in ordered:
        colors.append(CURRENT_COLOR if c.current else EARLIER_COLORS[earlier % len(EARLIER_COLORS)])
        earlier += not c.current
    for c, color in zip(ordered, colors):  # lines first, so no line hides a measured point
        plt.plot([p[0] for p in c.points], [p[1] for p in c.points], color=color, marker="dot")
    for c, color in zip(ordered, colors):
        plt.scatter([p[0] for p in c.points], [p[1] for p in c.points], label=c.label, color=color,
                    marker=POINT_MARKER)
    every = [p for c in curves for p in c.points]
    front = sorted((every[i] for i in pareto_front(every)), key=lambda p: p[0])
    if front:
        plt.scatter([p[0] for p in front], [p[1] for p in front], marker=FRONT_MARKER, color="red+",
                    label="Pareto-optimal")
    if every:  # head room above the highest point for the legend, which plotext draws top left
        top = max(p[1] for p in every)
        plt.ylim(0, top * (1.15 + 0.08 * (len(ordered) + 1)) if top > 0 else 1)
    return len(front)


class ParetoChart(PlotextPlot):
    """The chart widget; `show(curves)` redraws it."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.curves: tuple[Curve, ...] = ()
        self.front = 0

    def on_mount(self) -> None:
        super().on_mount()
        self.show(self.curves)

    def show(self, curves: Sequence[Curve], title: str = "") -> None:
        self.curves = tuple(curves)
        self.front = draw(self.plt, self.curves, title)
        self.refresh()


def chart_svg(curves: Sequence[Curve], width: int = 100, height: int = 30, title: str = "") -> str:
    """The chart as an SVG document (plotext's text rendered by Rich)."""
    plt = Plot()
    plt.plotsize(width, height)
    plt._set_size(width, height)
    draw(plt, curves, title)
    plt.theme("dark")
    console = Console(record=True, width=width, file=io.StringIO(), color_system="truecolor")
    console.print(Text.from_ansi(plt.build()))
    return console.export_svg(title=title or "atomdeck bench: Pareto")
