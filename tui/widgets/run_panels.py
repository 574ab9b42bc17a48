"""The run view's text panels, each drawn from core's RunState: the status line with the one-line
diagnosis, the router (stages, /readiness, /workers, the served model name, the smoke request),
the Mooncake handshake per prefill->decode pair, node connections, and a process's last lines."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ...core.run.diagnose import Diagnosis
from ...core.run.events import PAIR_STAGES, ROUTER_STAGES, CheckState, RunState
from ..formatting import ago, words
from ..logtext import HIGHLIGHT, clean
from ..palette import STATUS_BG, role_color, var_color
from .pair_matrix import pair_matrix

MATRIX_FROM = 5  # pairs: from this many on, the handshake panel is a prefill x decode matrix

CHECKS = [("readiness", "/readiness"), ("workers", "/workers"), ("models", "/v1/models"), ("smoke", "smoke request")]
PAIR_WORDS = {"both_registered": "both registered", "ports_reachable": "ports reachable",
              "transferred": "first transfer"}


class RunHeader(Static):
    """Status, readiness and the diagnosis headline: always on screen."""

    def show(self, state: RunState, d: Diagnosis, now: float, *, watching: bool, note: str = "") -> None:
        app = self.app
        status = state.status
        bg = var_color(app, STATUS_BG.get(status, "panel"), "blue")
        out = Text()
        out.append(f" {status.upper()} ", style=f"bold #ffffff on {bg}" if status != "stopped" else "bold reverse")
        out.append("  ")
        out.append(state.readiness() or "no processes", style="bold")
        if state.started and status not in ("stopped", "dirty"):
            out.append(f" · up {ago(now - state.started)}")
        if note:
            out.append(f" · {note}", style=f"bold {var_color(app, 'text-warning')}")
        elif watching:
            out.append(" · watching", style="dim")
        elif status not in ("stopped",):
            out.append(" · not watching (reattach on 5 Runs)", style="dim")
        out.append("\n")
        sev = _severity(status)
        icon = {"ok": "✓", "warning": "▲", "error": "×", "info": "…"}[sev]
        color = {"ok": "text-success", "warning": "text-warning", "error": "text-error", "info": "text-accent"}[sev]
        out.append(f"{icon} {d.headline}", style=f"bold {var_color(app, color)}")
        self.update(out)


def _severity(status: str) -> str:
    return {"serving": "ok", "degraded": "warning", "failed": "error", "dirty": "error", "stopping": "warning",
            "stopped": "ok"}.get(status, "info")


def _mark(ok: bool | None, app, waiting_word: str = "waiting") -> Text:
    if ok:
        return Text("✓", style=f"bold {var_color(app, 'text-success')}")
    if ok is False:
        return Text("×", style=f"bold {var_color(app, 'text-error')}")
    return Text("…", style="dim")


class RouterPanel(Static):
    """AToMesh: its stages from its log, then the checks core runs through it."""

    def show(self, state: RunState, now: float, *, node: str, url: str, model: str) -> None:
        app = self.app
        ok_color, err = var_color(app, "text-success"), var_color(app, "text-error")
        head = Text()
        r = state.procs.get("router")
        head.append("router", style=f"bold {role_color(app, 'router')}")
        head.append(f" on {node} · {url}\nmodel ")
        head.append(model, style="bold")
        if r is None:
            self.update(Group(head, Text("no router in this run", style="dim")))
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
            parts.append(Text(f"× router failed: {r.exit_detail or 'exited'}", style=f"bold {err}"))
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
                detail = Text(clean(text, 200), style="" if c.ok else err if ok is False else "dim")
            checks.add_row(_mark(ok, app), Text(label, style="bold"), detail)
        parts.append(checks)
        self.update(Group(*parts))


class HandshakePanel(Static):
    """The Mooncake KV handshake per prefill->decode pair, and each worker's kv_role."""

    def show(self, state: RunState, now: float) -> None:
        app = self.app
        out = Text()
        if not state.pairs:
            out.append("aggregate workers: no KV transfer between workers", style="dim")
            self.update(out)
            return
        ok_style = var_color(app, "text-success")
        if len(state.pairs) >= MATRIX_FROM:
            out.append_text(pair_matrix(state, app, max(20, self.size.width or 56)))
            self.update(out)
            return
        for i, pr in enumerate(state.pairs.values()):
            if i:
                out.append("\n")
            out.append(pr.prefill, style=f"bold {role_color(app, 'prefill')}")
            out.append(" → ")
            out.append(pr.decode, style=f"bold {role_color(app, 'decode')}")
            out.append(f"  {ago(now - pr.since) if pr.since else ''}\n", style="dim")
            if pr.stage == "failed":
                out.append(f"  × failed: {clean(pr.failed, 240)}", style=f"bold {var_color(app, 'text-error')}")
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
                out.append_text(_mark(c.ok, app))
                out.append(f" {name} ")
                out.append(c.detail.replace("kv_role=", "") if c.ok else clean(c.detail, 160),
                           style="dim" if c.ok else var_color(app, "text-error"))
                out.append("  ")
        out.rstrip()
        self.update(out)


class NodesPanel(Static):
    """Each node of the run: the connection or Slurm health core reports, and what runs there."""

    def show(self, state: RunState, nodes: Iterable[str], now: float, launcher: str) -> None:
        app = self.app
        out = Text()
        by_node: dict[str, list[str]] = {}
        for p in state.procs.values():
            by_node.setdefault(p.node, []).append(p.name)
        width = max((len(n) for n in nodes), default=8)
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
                           style=var_color(app, "text-success" if good else "text-error"))
                if detail:
                    out.append(f" {clean(detail, 80)}", style="" if good else var_color(app, "text-error"))
                if since and not good:
                    out.append(f" {ago(now - since)}", style="dim")
            out.append(f"  {', '.join(by_node.get(node, []))}", style="dim")
        self.update(out)


class WhyPanel(Static):
    """The diagnosis in detail (core's Diagnosis.details): each missing port's owner, alive or not,
    its stage and last line; sick nodes."""

    def show(self, state: RunState, d: Diagnosis) -> None:
        app = self.app
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
            out.append(clean(line, 400), style=var_color(app, "text-error") if state.status in ("failed", "dirty")
                       else "")
        self.update(out)


class TailPanel(Static):
    """The last lines of one process (errors highlighted)."""

    def show(self, lines: list[str], empty: str = "(no output yet)") -> None:
        app = self.app
        err = var_color(app, "text-error", "red")
        out = Text(no_wrap=True, overflow="ellipsis")
        if not lines:
            out.append(empty, style="dim")
        for i, line in enumerate(lines):
            if i:
                out.append("\n")
            line = clean(line, 400)
            out.append(line, style=err if HIGHLIGHT.search(line) else "")
        self.update(out)
