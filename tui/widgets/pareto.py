"""The Pareto chart: output tok/s per GPU against tok/s per user, one curve per bench (a layout), this
run's curve over earlier ones of the same model and workload, the Pareto-optimal points marked.

Per GPU follows the basis the view shows (core/measure/compare.py BASES: srt-slurm's all GPUs or InferenceX's
decode GPUs) and the y axis says which. Invalid steps (core/measure/validity.py) are drawn as x and never on the
front. A curve may label its points (the layout search: "2P1D c=16"). Drawn by plotext through textual-plotext
(the plotting library made for Textual); `chart_svg` renders the same chart to SVG with Rich for the export.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.text import Text
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from ...core.measure.compare import BASES, DEFAULT_BASIS, pareto_front, y_of

X_LABEL = "tok/s per user (1000 / median TPOT)"
Y_LABEL = "output tok/s per GPU"
CURRENT_COLOR = "orange+"
EARLIER_COLORS = ("cyan", "green", "magenta", "blue", "yellow", "red", "gray")
POINT_MARKER = "●"
FRONT_MARKER = "◆"
INVALID_MARKER = "x"  # (Fira Code, the screenshots' font, has no ✗)


@dataclass(frozen=True)
class Curve:
    """One bench's steps as points (x = tok/s per user, y = output tok/s per GPU), in concurrency order."""

    label: str
    points: tuple[tuple[float, float], ...] = field(default_factory=tuple)
    current: bool = False
    valid: tuple[bool, ...] = ()  # per point (empty: all valid)
    names: tuple[str, ...] = ()  # per point, written beside it (empty: none)

    def is_valid(self, i: int) -> bool:
        return self.valid[i] if i < len(self.valid) else True


def chart_box_title(basis: str = DEFAULT_BASIS) -> str:
    return f"Pareto · {BASES[basis][1]} vs tok/s per user · per GPU: {BASES[basis][2]}"


def curve_of(report: dict, current: bool = False, basis: str = DEFAULT_BASIS, named: bool = False) -> Curve:
    """A bench report (measure.results JSON) as a curve labelled by its layout (`named`: each point too)."""
    steps = [r for r in report.get("results", []) if r.get("completed")]
    g = report.get("gpus") or {}
    pts = tuple((r.get("interactivity", 0.0), y_of({**g, **r}, basis)) for r in steps)
    label = report.get("layout") or "?"
    names = tuple(f"{label} c={r.get('max_concurrency')}" for r in steps) if named else ()
    return Curve(f"{label} (this run)" if current else f"{label} · {str(report.get('run', ''))[:15]}", pts, current,
                 tuple(bool(r.get("valid", True)) for r in steps), names)


def draw(plt: Plot, curves: Sequence[Curve], title: str = "", basis: str = DEFAULT_BASIS) -> int:
    """Draw the curves on a plotext figure; returns how many points are on the Pareto front."""
    plt.clear_figure()  # data, labels and legend (the widget sets its theme again when it renders)
    plt.title(title or "Pareto: throughput per GPU vs interactivity")
    plt.xlabel(X_LABEL)
    plt.ylabel(BASES[basis][1] if basis in BASES else Y_LABEL)
    ordered = [c for c in sorted(curves, key=lambda c: c.current) if c.points]  # this run last: on top
    colors, earlier = [], 0
    for c in ordered:
        colors.append(CURRENT_COLOR if c.current else EARLIER_COLORS[earlier % len(EARLIER_COLORS)])
        earlier += not c.current
    for c, color in zip(ordered, colors):  # lines first, so no line hides a measured point
        plt.plot([p[0] for p in c.points], [p[1] for p in c.points], color=color, marker="dot")
    said_invalid = False
    for c, color in zip(ordered, colors):
        good = [p for i, p in enumerate(c.points) if c.is_valid(i)]
        bad = [p for i, p in enumerate(c.points) if not c.is_valid(i)]
        if good:
            plt.scatter([p[0] for p in good], [p[1] for p in good], label=c.label, color=color, marker=POINT_MARKER)
        if bad:  # (plotext cannot draw an empty series: the legend's entry goes with the first invalid point)
            plt.scatter([p[0] for p in bad], [p[1] for p in bad], color="red", marker=INVALID_MARKER,
                        label=None if said_invalid else (c.label if not good else "") + " invalid: not on the front")
            said_invalid = True
        for i, name in enumerate(c.names):
            x, y = c.points[i]
            plt.text(f" {name}", x, y, color=color, background="default", alignment="left")
    every = [p for c in curves for i, p in enumerate(c.points) if c.is_valid(i)]
    front = sorted((every[i] for i in pareto_front(every)), key=lambda p: p[0])
    if front:
        plt.scatter([p[0] for p in front], [p[1] for p in front], marker=FRONT_MARKER, color="red+",
                    label="Pareto-optimal")
    shown = [p for c in curves for p in c.points]
    if shown:  # head room above the highest point for the legend, which plotext draws top left
        top = max(p[1] for p in shown)
        plt.ylim(0, top * (1.15 + 0.08 * (len(ordered) + 1)) if top > 0 else 1)
    return len(front)


class ParetoChart(PlotextPlot):
    """The chart widget; `show(curves)` redraws it."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.curves: tuple[Curve, ...] = ()
        self.front = 0
        self.basis = DEFAULT_BASIS
        self.title = ""

    def on_mount(self) -> None:
        super().on_mount()
        self.show(self.curves, self.title, self.basis)

    def show(self, curves: Sequence[Curve], title: str = "", basis: str = DEFAULT_BASIS) -> None:
        self.curves, self.title, self.basis = tuple(curves), title, basis
        self.front = draw(self.plt, self.curves, title, basis)
        self.refresh()


def chart_svg(curves: Sequence[Curve], width: int = 100, height: int = 30, title: str = "",
              basis: str = DEFAULT_BASIS) -> str:
    """The chart as an SVG document (plotext's text rendered by Rich)."""
    plt = Plot()
    plt.plotsize(width, height)
    plt._set_size(width, height)
    draw(plt, curves, title, basis)
    plt.theme("dark")
    console = Console(record=True, width=width, file=io.StringIO(), color_system="truecolor")
    console.print(Text.from_ansi(plt.build()))
    return console.export_svg(title=title or "atomdeck bench: Pareto")
