"""The run view's text panels, each drawn from core's RunState: the status line with the one-line
diagnosis, the router (stages, /readiness, /workers, the served model name, the smoke request),
the Mooncake handshake per prefill->decode pair, node connections, and (tail_panel.py) a process's last lines."""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.cells import cell_len
from rich.console import Group
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.content import Content

from ...core.run.diagnose import Diagnosis
from ...core.run.events import PAIR_STAGES, ROUTER_STAGES, CheckState, RunState
from ..formatting import ago, words
from ..logtext import clean
from .line_static import LineStatic
from .pair_matrix import pair_matrix
from .quiet import update_quietly
from .tail_panel import TailPanel  # noqa: F401 - the run view's panels, all importable from here

MATRIX_FROM = 5  # pairs: from this many on, the handshake panel is a prefill x decode matrix
MANY_NODES = 12  # from this many nodes on, the nodes panel lists only the nodes with a problem

CHECKS = [("readiness", "/readiness"), ("workers", "/workers"), ("models", "/v1/models"), ("smoke", "smoke request")]
PAIR_WORDS = {"both_registered": "both registered", "ports_reachable": "ports reachable",
              "transferred": "first transfer"}


BOLD = Style(bold=True)
DIM = Style(dim=True)
PALETTE = ("ok", "warning", "error", "info", "prefill", "decode", "worker", "router")


class RunPanel(LineStatic):
    """A run view panel: `color(name)` is a severity's or a role's colour, from the theme's variables
    (an empty style for none, e.g. an unknown role)."""

    COMPONENT_CLASSES = {"run-panel--ok", "run-panel--warning", "run-panel--error", "run-panel--info",
                         "run-panel--prefill", "run-panel--decode", "run-panel--worker", "run-panel--router"}
    DEFAULT_CSS = """
    RunPanel > .run-panel--ok { color: $text-success; }
    RunPanel > .run-panel--warning { color: $text-warning; }
    RunPanel > .run-panel--error { color: $text-error; }
    RunPanel > .run-panel--info { color: $text-accent; }
    RunPanel > .run-panel--prefill { color: $text-accent; }
    RunPanel > .run-panel--decode { color: $text-primary; }
    RunPanel > .run-panel--worker { color: $text-primary; }
    RunPanel > .run-panel--router { color: $text-success; }
    """

    def color(self, name: str) -> Style:
        return self.component_style(f"run-panel--{name}")

    def component_style(self, name: str) -> Style:
        """A component class's style, read once until the styles change (a read walks the styles and builds a
        Style: the panels drew with ~20 of them at every redraw)."""
        cache = self.__dict__.setdefault("_run_panel_styles", {})
        style = cache.get(name)
        if style is None:
            style = cache[name] = self.get_component_rich_style(name, partial=True, default=Style())
        return style

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.__dict__.pop("_run_panel_styles", None)

    def palette(self) -> tuple[Style, ...]:
        """The colours the panel draws with: part of what a kept drawing was made from. A theme changes
        them (and the first styles applied); a style update that changes none of them (focus moving
        inside the view, several per key press) does not, so it costs no rebuild."""
        return tuple(self.color(name) for name in PALETTE)

    # While a run comes up (the run view says so: keep_rows) the panel keeps the most lines it has shown:
    # fewer lines are padded with blank ones instead of re-laying the screen out. At 128 nodes the
    # diagnosis, the handshake panel and the header changed their line count back and forth, each change a
    # layout pass of the whole run view (40-540 ms while the simulators start), and the panels below jumped.
    holding = False
    _unpadded: Text | None = None  # what was asked for, while the panel shows it padded
    # While it keeps its rows, a panel that grows takes this many rows at a time (0: as many as it needs). A
    # panel in a box that scrolls shows the blank rows only when scrolled to its end.
    GROW_ROWS = 0

    def keep_rows(self, on: bool) -> None:
        """Keep the highest line count from now on (on), or show the content at its own size again (off)."""
        if on == self.holding:
            return
        self.holding = on
        asked, self._unpadded = self._unpadded, None
        if not on and asked is not None:
            self.set(asked)

    def set(self, content, shape: object = None) -> bool:
        """Show `content` if it changed, re-laying the screen out only if its size may have changed
        (the clock redraws these panels every second: see quiet.py; for Text, fit_shape; for a Group
        (the router's tables), the lines it renders into)."""
        last = self._unpadded if self._unpadded is not None else getattr(self, "_quiet_content", None)
        if isinstance(content, Text) and type(last) is Text and last == content:
            return False  # (before measuring its shape: most redraws change nothing in most panels)
        width = self.size.width
        if shape is None and isinstance(content, Text) and width > 0:
            shape = fit_shape(content, width)
            last, shown = getattr(self, "_quiet_shape", None), getattr(self, "_quiet_content", None)
            if isinstance(shown, Text) and not (isinstance(last, tuple) and last[0] == width):
                # drawn before the panel had this width (or a width at all): the layout since then sized
                # it for what it shows at this width
                self._quiet_shape = fit_shape(shown, width)
        elif shape is None and isinstance(content, Group) and width > 0 and self.is_mounted:
            # measured as Textual measures a renderable's height (textual.visual.RichVisual.get_height)
            app = self.app
            options = app.console_options.update_width(width).update(highlight=False)
            shape = width, sum(text.count("\n") for text, _, _ in app.console.render(content, options))
        self._unpadded = None
        held = getattr(self, "_quiet_shape", None)
        if self.holding and isinstance(content, Text) and isinstance(shape, tuple) and isinstance(held, tuple) \
                and held[0] == shape[0]:
            rows = held[1]
            if shape[1] > rows and self.GROW_ROWS:  # grows: by whole steps, each a layout pass
                rows = -(-shape[1] // self.GROW_ROWS) * self.GROW_ROWS
            if rows > shape[1]:
                padded = content.copy()
                padded.append("\n " * (rows - shape[1]))
                if fit_shape(padded, width) == (width, rows):
                    self._unpadded = content.copy()
                    content, shape = padded, (width, rows)
        return update_quietly(self, content, shape)


def fit_shape(text: Text, width: int) -> object:
    """What decides the size of `text` in a panel as wide as its box and as tall as its text: the rows it
    wraps into at `width` (a line that fits is one row whatever it says; a longer one is wrapped as Textual
    wraps it). None before the panel has a width. At 64P64D the handshake matrix, the held-back workers
    and the diagnosis change with each of ~800 pair events a second while the run comes up: each change
    re-laid the whole screen out (~50 ms) though the panels kept their size."""
    if width <= 0:
        return None
    rows = 0
    for line in text.plain.split("\n"):
        if (len(line) <= width and line.isascii()) or cell_len(line) <= width:
            rows += 1
            continue
        n = _WRAPPED.get((line, width))
        if n is None:  # (the same long lines come back at every redraw: the diagnosis, a failing pair)
            if len(_WRAPPED) > 512:
                _WRAPPED.clear()
            n = _WRAPPED[(line, width)] = len(Content(line).wrap(width))
        rows += n
    return width, rows


_WRAPPED: dict[tuple[str, int], int] = {}  # (line, width) -> rows it wraps into (fit_shape)


# The status badge: white on the status's theme colour; stopped in reverse.
STATUSES = ("launching", "starting", "serving", "degraded", "failed", "stopping", "dirty")


class RunHeader(RunPanel):
    """Status, readiness and the diagnosis headline: always on screen."""

    COMPONENT_CLASSES = {f"run-header--{s}" for s in STATUSES} | {"run-header--other"}
    DEFAULT_CSS = """
    RunHeader > .run-header--launching { color: #ffffff; background: $accent; }
    RunHeader > .run-header--starting { color: #ffffff; background: $accent; }
    RunHeader > .run-header--serving { color: #ffffff; background: $success; }
    RunHeader > .run-header--degraded { color: #ffffff; background: $warning; }
    RunHeader > .run-header--failed { color: #ffffff; background: $error; }
    RunHeader > .run-header--stopping { color: #ffffff; background: $warning; }
    RunHeader > .run-header--dirty { color: #ffffff; background: $error; }
    RunHeader > .run-header--other { color: #ffffff; background: $panel; }
    """

    def show(self, state: RunState, d: Diagnosis, now: float, *, watching: bool, note: str = "") -> None:
        status = state.status
        out = Text()
        badge = (Style(bold=True, reverse=True) if status == "stopped" else
                 BOLD + self.component_style(f"run-header--{status if status in STATUSES else 'other'}"))
        out.append(f" {status.upper()} ", style=badge)
        out.append("  ")
        out.append(state.readiness() or "no processes", style="bold")
        if state.started and status not in ("stopped", "dirty"):
            out.append(f" · up {ago(now - state.started)}")
        if note:
            out.append(f" · {note}", style=BOLD + self.color("warning"))
        elif watching:
            out.append(" · watching", style="dim")
        elif status not in ("stopped",):
            out.append(" · not watching (reattach on 5 Runs)", style="dim")
        out.append("\n")
        sev = _severity(status)
        icon = {"ok": "✓", "warning": "▲", "error": "×", "info": "…"}[sev]
        out.append(f"{icon} {d.headline}", style=BOLD + self.color(sev))
        self.set(out)


def _severity(status: str) -> str:
    return {"serving": "ok", "degraded": "warning", "failed": "error", "dirty": "error", "stopping": "warning",
            "stopped": "ok"}.get(status, "info")


def _mark(ok: bool | None, panel: RunPanel, waiting_word: str = "waiting") -> Text:
    if ok:
        return Text("✓", style=BOLD + panel.color("ok"))
    if ok is False:
        return Text("×", style=BOLD + panel.color("error"))
    return Text("…", style="dim")


class RouterPanel(RunPanel):
    """AToMesh: its stages from its log, then the checks core runs through it."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.shown_key: object = None  # what the panel on screen was drawn from
        self.drawn = 0  # how many times it was drawn (tests: only when what it shows changed)

    def outdated_colours(self) -> bool:
        """Drawn with colours no longer the theme's (the run view asks at its clock redraw: nothing else
        draws this panel again after a theme change until the router's state changes)."""
        return isinstance(self.shown_key, tuple) and self.shown_key[-1] != self.palette()

    def show(self, state: RunState, now: float, *, node: str, url: str, model: str) -> None:
        """Drawn only when what it shows changed: its content is a Group (tables), which the panel cannot
        compare, and each update re-lays the screen out (at 128 nodes a process's health event, several
        a second, re-laid the run view out through this panel)."""
        r = state.procs.get("router")
        key = (node, url, model, state.started or now, state.status == "failed",
               None if r is None else (r.stage, tuple(r.stages.items()), r.exit_detail),
               tuple((c.ok, c.detail) if (c := state.checks.get(name)) is not None else None for name, _ in CHECKS),
               self.palette())
        if key == self.shown_key:
            return
        self.shown_key = key
        self.drawn += 1
        ok_color, err = self.color("ok"), self.color("error")
        head = Text()
        head.append("router", style=BOLD + self.color("router"))
        head.append(f" on {node} · {url}\nmodel ")
        head.append(model, style="bold")
        if r is None:
            self.set(Group(head, Text("no router in this run", style="dim")))
            return
        start = state.started or now
        stages = Table.grid(padding=(0, 2))
        stages.add_column(no_wrap=True)
        stages.add_column(no_wrap=True)
        cells = []
        for stage in ROUTER_STAGES[2:]:
            t = r.stages.get(stage)
            cell = Text()
            if t is not None:
                cell.append("✓ ", style=ok_color)
                cell.append(words(stage), style="bold" if stage == r.stage else "")
                cell.append(f" +{max(0.0, t - start):.1f}s", style="dim")
            else:
                cell.append(f"○ {words(stage)}", style="dim")
            cells.append(cell)
        for i in range(0, len(cells), 2):
            stages.add_row(*cells[i:i + 2])
        parts: list = [head, stages]
        if r.stage == "failed":
            parts.append(Text(f"× router failed: {r.exit_detail or 'exited'}", style=BOLD + err))
        checks = Table.grid(padding=(0, 1))
        checks.add_column(no_wrap=True)
        checks.add_column(no_wrap=True)
        checks.add_column(ratio=1, overflow="fold")
        failed = state.status == "failed"
        for name, label in CHECKS:
            c: CheckState | None = state.checks.get(name)
            ok = None if c is None else c.ok
            if name == "readiness" and ok is False and not failed:
                ok = None  # core says "wait" until the router answers 200
            if c is None:
                detail = Text("waiting for the router's port" if name == "readiness" else "not yet", style="dim")
            else:
                text = f"serves '{model}', the name clients ask for" if name == "models" and c.ok else c.detail
                detail = Text(clean(text, 200), style="" if c.ok else err if ok is False else DIM)
            checks.add_row(_mark(ok, self), Text(label, style="bold"), detail)
        parts.append(checks)
        self.set(Group(*parts))


class HandshakePanel(RunPanel):
    """The Mooncake KV handshake per prefill->decode pair, and each worker's kv_role."""

    # While pairs keep changing (a 64P64D handshake sends ~800 pair events a second) the matrix is built at
    # most MATRIX_RATE times a second after a burst of MATRIX_BURST: each build collapses 4,096 pairs and
    # the panel's new text is drawn again (together ~30 % of the console coming up, at every 0.1 s redraw),
    # and a key press waited behind them. A change not built yet is built when a build is allowed again
    # (`show` says when: the run view sets a timer). A new width or theme is built at once.
    MATRIX_RATE = 2.0
    MATRIX_BURST = 4.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.matrix_key: object = None  # what the matrix on screen was built from
        self.matrices = 0  # how many times the matrix was built (tests: only when its input changed)
        self.deferred = 0  # how many times a change of the pairs waited for the rate (tests)
        self._tokens = self.MATRIX_BURST
        self._tokens_at = time.monotonic()

    def _may_build(self) -> float:
        """0 if a build of changed pairs is allowed now (and counts it), else the seconds until one is."""
        t = time.monotonic()
        self._tokens = min(self.MATRIX_BURST, self._tokens + (t - self._tokens_at) * self.MATRIX_RATE)
        self._tokens_at = t
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.MATRIX_RATE

    def show(self, state: RunState, now: float, version: object = None) -> float:
        """`version` names the pairs' content (the caller's count of pair events, with the state's
        identity): the matrix is a pure function of the pairs and the width, so it is built again only
        when either changed (at 64P64D collapsing 4,096 pairs every second was the run view's biggest
        cost). None: always built. Returns 0, or the seconds after which a change of the pairs not drawn
        yet (the rate above) may be: call again then."""
        out = Text()
        if not state.pairs:
            self.matrix_key = None
            out.append("aggregate workers: no KV transfer between workers", style="dim")
            self.set(out)
            return 0.0
        ok_style = self.color("ok")
        if len(state.pairs) >= MATRIX_FROM:
            width = max(20, self.size.width or 56)
            key = (version, len(state.pairs), width, self.palette())
            if version is not None and key == self.matrix_key:
                return 0.0
            old = self.matrix_key
            if version is not None and isinstance(old, tuple) and old[1:] == key[1:]:  # only pairs changed
                wait = self._may_build()
                if wait:
                    self.deferred += 1
                    return wait
            self.matrices += 1
            out.append_text(pair_matrix(state, self.color, width))
            self.set(out)
            self.matrix_key = key
            return 0.0
        self.matrix_key = None
        for i, pr in enumerate(state.pairs.values()):
            if i:
                out.append("\n")
            out.append(pr.prefill, style=BOLD + self.color("prefill"))
            out.append(" → ")
            out.append(pr.decode, style=BOLD + self.color("decode"))
            out.append(f"  {ago(now - pr.since) if pr.since else ''}\n", style="dim")
            if pr.stage == "failed":
                out.append(f"  × failed: {clean(pr.failed, 240)}", style=BOLD + self.color("error"))
                continue
            reached = PAIR_STAGES.index(pr.stage) if pr.stage in PAIR_STAGES else 0
            out.append("  ")
            for j, stage in enumerate(PAIR_STAGES[1:], 1):
                if j <= reached:
                    out.append(f"✓ {PAIR_WORDS[stage]}  ", style=ok_style)
                else:
                    out.append(f"○ {PAIR_WORDS[stage]}  ", style="dim")
        roles = [(k.split(":", 1)[1], c) for k, c in state.checks.items() if k.startswith("kv_role:")]
        if roles:
            out.append("\nkv_role ", style="bold")
            for name, c in sorted(roles):
                out.append_text(_mark(c.ok, self))
                out.append(f" {name} ")
                out.append(c.detail.replace("kv_role=", "") if c.ok else clean(c.detail, 160),
                           style=DIM if c.ok else self.color("error"))
                out.append("  ")
        out.rstrip()
        self.set(out)
        return 0.0


class NodesPanel(RunPanel):
    """Each node of the run: the connection or Slurm health core reports, and what runs there. Past
    MANY_NODES, the nodes with a problem only (then how many are fine): 128 lines would push the
    panels under it off the screen."""

    def show(self, state: RunState, nodes: Iterable[str], now: float, launcher: str) -> None:
        out = Text()
        by_node: dict[str, list[str]] = {}
        for p in state.procs.values():
            by_node.setdefault(p.node, []).append(p.name)
        nodes = list(nodes)
        width = max((len(n) for n in nodes), default=8)
        if len(nodes) > MANY_NODES:
            sick = [n for n in nodes if n in state.conns and state.conns[n][0] != "ok"]
            silent = sum(1 for n in nodes if n not in state.conns)
            fine = len(nodes) - len(sick) - silent
            out.append(f"{len(nodes)} nodes", style="bold")
            if launcher == "local" and not state.conns:
                out.append(" · local, nothing to watch", style="dim")
            else:
                out.append(f" · {fine} ok", style=self.color("ok") if fine else "dim")
                if sick:
                    out.append(f" · {len(sick)} not ok", style=BOLD + self.color("error"))
                if silent:
                    out.append(f" · {silent} not reported", style="dim")
            nodes = sick[:MANY_NODES]
            if len(sick) > MANY_NODES:
                out.append(f"\n… and {len(sick) - MANY_NODES} more not ok (first {MANY_NODES} below)", style="dim")
            if nodes:
                out.append("\n")
        for i, node in enumerate(nodes):
            if i:
                out.append("\n")
            out.append(f"{node:<{width}} ", style="bold")
            conn = state.conns.get(node)
            if conn is None:
                out.append("· not reported" if launcher != "local" else "· local, nothing to watch", style="dim")
            else:
                st, detail, since = conn
                good = st == "ok"
                out.append(f"{'●' if good else '×'} {st}",
                           style=self.color("ok" if good else "error"))
                if detail:
                    out.append(f" {clean(detail, 80)}", style="" if good else self.color("error"))
                if since and not good:
                    out.append(f" {ago(now - since)}", style="dim")
            out.append(f"  {', '.join(by_node.get(node, []))}", style="dim")
        self.set(out)


class WhyPanel(RunPanel):
    """The diagnosis in detail (core's Diagnosis.details): each missing port's owner, alive or not,
    its stage and last line; sick nodes."""

    # (its box scrolls. While 128 nodes came up its text grew a row or two at a time, 1.5 times a second, and
    # each growth re-laid the run view out and drew it whole: half the view's layout passes)
    GROW_ROWS = 8

    def show(self, state: RunState, d: Diagnosis) -> None:
        out = Text()
        details = d.details or ([d.headline] if state.status not in ("serving", "stopped") else [])
        recovered = [f"{p.name}: recovered, {p.recovered}" for p in state.procs.values() if p.recovered]
        details = details + recovered
        if not details:
            out.append("nothing to explain: " + (d.headline or state.status), style="dim")
        for i, line in enumerate(details):
            if i:
                out.append("\n")
            out.append("• ", style="dim")
            out.append(clean(line, 400), style=self.color("error") if state.status in ("failed", "dirty") else "")
        self.set(out)
