"""Serving: live metrics per endpoint, drawn from core's RunState.metrics (the metrics watcher's latest
values and rates). One row per endpoint with a sparkline of its recent rate (prompt tok/s for a
prefill, generation tok/s for a decode, req/s for the router; the router's active requests on a
worker without /metrics), its running/waiting requests and KV cache use, and a decode's requests parked
for their KV with the oldest one's age (core's figures: the row in the error colour while core says they wait
too long); the router's error counters under them. Hidden while no metrics came (a run still starting, an
older ATOM and no router port)."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from rich.color import Color, ColorTriplet
from rich.style import Style
from rich.text import Span, Text
from textual.containers import Vertical
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from ...core.run.diagnose import parked_words
from ...core.run.events import HEALTH_STAGES, RunState
from .quiet import update_quietly

HISTORY = 40  # points per sparkline (a scrape every 2 s: the last 80 s)
BARS = "▁▂▃▄▅▆▇█"
_STYLES: dict[tuple[int, int, int], Style] = {}  # a sparkline bar's colour -> its style


def spark_text(data: Sequence[float], width: int, lo: Color, hi: Color) -> Text:
    """A one-line sparkline as Text: what Textual's Sparkline renderable draws at height 1 with max as its
    summary (the same bars and colours, tests/tui/test_run_scale_redraw.py compares them), without its
    Fraction arithmetic and a console render per row (a row's line is rebuilt at each scrape: 129 rows
    every 2 s at 128 nodes)."""
    out = Text()
    n = len(data)
    if n == 0:
        out.append("▁" * width, Style.from_color(lo))
        return out
    if n == 1:
        out.append("█" * width, Style.from_color(hi))
        return out
    points = list(data)
    minimum, maximum = min(points), max(points)
    extent = maximum - minimum or 1
    # the renderable's buckets: [int(n / width * b), int(n / width * (b + 1))) with exact fractions
    buckets = [bucket for b in range(width) if (bucket := points[n * b // width:n * (b + 1) // width])]
    step = len(buckets) / width
    tops = len(BARS) - 1
    lo_rgb, hi_rgb = lo.triplet, hi.triplet
    plain: list[str] = []
    spans: list[Span] = []
    index = 0.0
    for x in range(width):
        ratio = (max(buckets[int(index)]) - minimum) / extent
        bar = int(ratio * tops)
        index += step
        if bar < 0:
            plain.append(" ")
            continue
        plain.append("█" if bar >= len(BARS) else BARS[bar])
        if lo_rgb is None or hi_rgb is None:
            style = Style.from_color(hi)
        else:  # (Color.from_rgb's int() of the blend: the same colour, its style made once)
            rgb = (int(lo_rgb[0] + (hi_rgb[0] - lo_rgb[0]) * ratio), int(lo_rgb[1] + (hi_rgb[1] - lo_rgb[1]) * ratio),
                   int(lo_rgb[2] + (hi_rgb[2] - lo_rgb[2]) * ratio))
            style = _STYLES.get(rgb)
            if style is None:
                if len(_STYLES) > 4096:
                    _STYLES.clear()
                style = _STYLES[rgb] = Style.from_color(Color.from_triplet(ColorTriplet(*rgb)))
        spans.append(Span(x, x + 1, style))
    out = Text("".join(plain), spans=spans)
    return out


def rate_key(role: str, m: dict) -> tuple[str, str]:
    """Which rate a row plots, and its unit."""
    src = m.get("source")
    if src == "mesh":
        return "req_s", "req/s"
    if src == "atom":
        return ("prompt_tok_s", "prompt tok/s") if role == "prefill" else ("gen_tok_s", "tok/s")
    return "active", "active"


def rate_of(name: str, role: str, m: dict) -> tuple[float, str]:
    """The one number a row plots, and its unit."""
    key, unit = rate_key(role, m)
    return float(m.get(key, 0.0)), unit


def row_words(role: str, m: dict) -> str:
    src = m.get("source")
    if src == "atom":  # KV cache use first: the row is cut at the panel's edge, this matters most
        kv = f"KV {100 * m['kv_cache_usage_ratio']:.0f}% · " if "kv_cache_usage_ratio" in m else ""
        return f"{kv}{m.get('requests_running', 0):.0f} run {m.get('requests_waiting', 0):.0f} wait"
    if src == "mesh":
        return f"{m.get('router_requests', 0):.0f} req · {m.get('router_errors', 0):.0f} err"
    return "no /metrics · router's count"


class ServingRows(Widget):
    """The endpoint rows, a line each, drawn line by line (the Line API): only the rows on screen are
    rendered, and a changed row repaints only its own line."""

    DEFAULT_CSS = "ServingRows { height: auto; width: 1fr; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.texts: list[Text] = []
        self._strips: dict[int, Strip] = {}
        self._style: Style | None = None  # the widget's own style as of its last style update

    def set_rows(self, texts: list[Text]) -> None:
        grew = len(texts) != len(self.texts)
        changed = [y for y, t in enumerate(texts) if y >= len(self.texts) or self.texts[y] is not t]
        self.texts = texts
        for y in changed:
            self._strips.pop(y, None)
        if grew:
            self._strips.clear()
            self.refresh(layout=True)
        else:
            w = max(1, self.size.width)
            for y in changed:
                self.refresh(Region(0, y, w, 1))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.texts)

    def on_resize(self) -> None:
        self._strips.clear()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
        self._style = None

    def render_line(self, y: int) -> Strip:
        strip = self._strips.get(y)
        if strip is None:
            width = self.size.width
            style = self._style
            if style is None:  # (walks the DOM: once until the styles change, not once a line)
                style = self._style = self.rich_style
            if y >= len(self.texts):
                return Strip.blank(width, style)
            strip = Strip(self.texts[y].render(self.app.console), self.texts[y].cell_len)
            strip = strip.adjust_cell_length(width, style).apply_style(style)
            self._strips[y] = strip
        return strip


class ServingPanel(Vertical):
    """Two widgets whatever the number of endpoints: the rows (one Static, a line per endpoint, its
    sparkline drawn into the line) and the router's errors. A widget per row (129 rows x 4 widgets at
    128 nodes) made every layout and screen update of the run view walk ~500 widgets: keys lagged by
    hundreds of milliseconds while a large run served. A row's line is rebuilt only when its data
    changed; the panel updates only when a line did."""

    COMPONENT_CLASSES = {"serving-panel--error", "serving-panel--spark-min", "serving-panel--spark-max"}
    DEFAULT_CSS = """
    ServingPanel > .serving-panel--error { color: $text-error; }
    ServingPanel > .serving-panel--spark-max { color: $primary; }
    ServingPanel > .serving-panel--spark-min { color: $primary 30%; }
    ServingPanel { height: auto; }
    ServingPanel #sv-errors { height: auto; }
    """
    NAME_W = 11
    SPARK_W = 14  # and one column of margin after it
    MIN_SPARK_W = 3

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history: dict[str, deque] = {}
        self.seen: dict[str, float] = {}
        self.rows: list[str] = []
        self.lines: dict[str, tuple[tuple, Text]] = {}  # name -> (what the line shows, the line)
        self._state: RunState | None = None
        self._memo: dict[str, tuple[dict, tuple, tuple]] = {}  # name -> (its metrics dict, (sick, role), row)
        self.drawn = 0  # how many times the rows were redrawn (tests: a redraw happens only on a change)

    def compose(self):
        yield ServingRows(id="sv-rows")
        yield Static("", id="sv-errors")

    def reset(self) -> None:
        self.history.clear()
        self.seen.clear()
        self.rows = []
        self.lines = {}
        self._memo = {}
        self._state = None
        self.query_one(ServingRows).set_rows([])

    def line(self, name: str) -> str:
        """The text of an endpoint's row as drawn (tests, screenshots)."""
        return self.lines[name][1].plain if name in self.lines else ""

    def spark_data(self, name: str) -> list[float]:
        """The points an endpoint's sparkline shows."""
        return list(self.lines[name][0][0][2]) if name in self.lines else []

    def on_resize(self) -> None:
        self.lines = {}  # cut again at the new width
        if self._state is not None:
            self.show(self._state)

    def _spark_colors(self) -> tuple[Color, Color]:
        _, base = self.background_colors
        lo = base + self.get_component_styles("serving-panel--spark-min").color
        hi = base + self.get_component_styles("serving-panel--spark-max").color
        return lo.rich_color, hi.rich_color

    def _spark(self, data: list[float], spark_w: int | None = None,
               colors: tuple[Color, Color] | None = None) -> Text:
        lo, hi = colors or self._spark_colors()
        return spark_text(data, spark_w or self.SPARK_W, lo, hi)

    def show(self, state: RunState) -> None:
        self._state = state
        order = [n for n in state.procs if n in state.metrics]
        for name in order:
            m = state.metrics[name]
            if m.get("t", 0) != self.seen.get(name):
                self.seen[name] = m.get("t", 0)
                role = state.procs[name].role
                self.history.setdefault(name, deque([0.0] * 2, maxlen=HISTORY)).append(rate_of(name, role, m)[0])
        known = set(self.rows)
        self.rows.extend(n for n in order if n not in known)
        err = self.get_component_rich_style("serving-panel--error", partial=True)
        colors: tuple[Color, Color] | None = None  # the sparklines' (once per redraw: reading them walks the DOM)
        changed = False
        width = self.size.width  # lines are cut here with an ellipsis (0 before the first layout: uncut)
        rows = []
        memo = self._memo
        for name in self.rows:
            p = state.procs[name]
            m = state.metrics.get(name, {})
            sick = p.stage in HEALTH_STAGES or bool(p.parked)  # (parked: core says its requests wait too long)
            hit = memo.get(name)
            if hit is not None and hit[0] is m and hit[1] == (sick, p.role):
                rows.append(hit[2])  # the same scrape as drawn (core replaces an endpoint's dict at each scrape)
                continue
            core_hist = (m.get("history") or {}).get(rate_key(p.role, m)[0])
            data = list(core_hist) if core_hist else list(self.history.get(name, [0.0]))
            value, unit = rate_of(name, p.role, m)
            words = f"{value:,.0f} {unit}" if unit != "active" else f"{value:.0f} active"
            if unit == "req/s":
                words = f"{value:.2f} {unit}"
            parked = parked_words(m, short=True)  # a decode's requests parked for their KV first: they matter most
            row = (name, sick, tuple(data), f"{words} · {parked + ' · ' if parked else ''}{row_words(p.role, m)}")
            if m:
                memo[name] = (m, (sick, p.role), row)
            rows.append(row)
        # the words matter more than the sparklines' length: they give up columns (down to MIN_SPARK_W, all
        # rows alike so they stay aligned) before a row is cut, so a narrow panel still shows what waits
        longest = max((len(r[3]) for r in rows), default=0)
        spark_w = max(self.MIN_SPARK_W, min(self.SPARK_W, width - self.NAME_W - 1 - longest)) if width \
            else self.SPARK_W
        for row in rows:
            name, sick, data, text = row
            key = (row, width, spark_w)
            old = self.lines.get(name)
            if old is not None and (old[0] == key):
                continue
            changed = True
            line = Text(no_wrap=True, overflow="ellipsis")
            line.append(name[: self.NAME_W].ljust(self.NAME_W), Style(bold=True) + err if sick else "bold")
            colors = colors or self._spark_colors()
            line.append_text(self._spark(data, spark_w, colors))
            line.append(" ")
            line.append(text, style=err if sick else "")
            if width:
                line.truncate(width, overflow="ellipsis")
            self.lines[name] = (key, line)
        if changed:
            self.drawn += 1
            self.query_one(ServingRows).set_rows([self.lines[n][1] for n in self.rows])
        router = state.metrics.get("router", {})
        out = Text(no_wrap=False)
        if router.get("source") == "mesh":
            by_type = router.get("errors_by_type") or {}
            by_status = router.get("responses_by_status") or {}
            out.append("router errors ", style="bold")
            out.append(", ".join(f"{k} {v:.0f}" for k, v in sorted(by_type.items())) or "none",
                       style=err if router.get("router_errors") else "dim")
            if router.get("errors_s"):
                out.append(f" ({router['errors_s']:.2f}/s)", style=err)
            bad = {k: v for k, v in by_status.items() if not str(k).startswith("2")}
            if bad:
                out.append(" · upstream " + ", ".join(f"HTTP {k} ×{v:.0f}" for k, v in sorted(bad.items())),
                           style=err)
        update_quietly(self.query_one("#sv-errors", Static), out)
