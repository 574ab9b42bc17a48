"""Serving: live metrics per endpoint, drawn from core's RunState.metrics (the metrics watcher's latest
values and rates). One row per endpoint with a sparkline of its recent rate (prompt tok/s for a
prefill, generation tok/s for a decode, req/s for the router; the router's active requests on a
worker without /metrics), its running/waiting requests and KV cache use; the router's error counters
under them. Hidden while no metrics came (a run still starting, an older ATOM and no router port)."""

from __future__ import annotations

from collections import deque

from rich.style import Style
from rich.text import Text
from textual.containers import Horizontal, Vertical
from textual.widgets import Sparkline, Static

from ...core.run.events import HEALTH_STAGES, RunState
from .quiet import update_quietly

HISTORY = 40  # points per sparkline (a scrape every 2 s: the last 80 s)


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


class ServingPanel(Vertical):
    COMPONENT_CLASSES = {"serving-panel--error"}
    DEFAULT_CSS = """
    ServingPanel > .serving-panel--error { color: $text-error; }
    ServingPanel { height: auto; }
    ServingPanel > Horizontal { height: 1; }
    ServingPanel .sv-name { width: 11; }
    ServingPanel Sparkline { width: 14; height: 1; margin: 0 1 0 0; }
    ServingPanel .sv-value { width: 1fr; }
    ServingPanel #sv-errors { height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.history: dict[str, deque] = {}
        self.seen: dict[str, float] = {}
        self.rows: list[str] = []
        self.cells: dict[str, tuple[Static, Sparkline, Static]] = {}

    def compose(self):
        yield Static("", id="sv-errors")

    def reset(self) -> None:
        self.history.clear()
        self.seen.clear()
        for name in self.rows:
            for w in self.query(f"#sv-row-{name}"):
                w.remove()
        self.rows = []
        self.cells = {}

    def show(self, state: RunState) -> None:
        order = [n for n in state.procs if n in state.metrics]
        for name in order:
            m = state.metrics[name]
            if m.get("t", 0) != self.seen.get(name):
                self.seen[name] = m.get("t", 0)
                role = state.procs[name].role
                self.history.setdefault(name, deque([0.0] * 2, maxlen=HISTORY)).append(rate_of(name, role, m)[0])
        new = [n for n in order if n not in self.rows]
        for name in new:
            cells = (Static("", classes="sv-name"), Sparkline([], summary_function=max), Static("", classes="sv-value"))
            self.cells[name] = cells
            self.mount(Horizontal(*cells, id=f"sv-row-{name}"), before=self.query_one("#sv-errors"))
            self.rows.append(name)
        err = self.get_component_rich_style("serving-panel--error", partial=True)
        for name in self.rows:
            p = state.procs[name]
            m = state.metrics.get(name, {})
            label, spark, val = self.cells[name]
            sick = p.stage in HEALTH_STAGES
            update_quietly(label, Text(name, style=Style(bold=True) + err if sick else "bold"))
            core_hist = (m.get("history") or {}).get(rate_key(p.role, m)[0])
            data = list(core_hist) if core_hist else list(self.history.get(name, [0.0]))
            if data != spark.data:
                spark.data = data
            value, unit = rate_of(name, p.role, m)
            words = f"{value:,.0f} {unit}" if unit != "active" else f"{value:.0f} active"
            if unit == "req/s":
                words = f"{value:.2f} {unit}"
            update_quietly(val, Text(f"{words} · {row_words(p.role, m)}", style=err if sick else "", no_wrap=True,
                                     overflow="ellipsis"), shape=1)  # one row (height 1)
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
