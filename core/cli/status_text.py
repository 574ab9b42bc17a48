"""What `atomdeck status` says of a run, as text and as JSON: stages, barrier, handshake, metrics, checks, the
actions taken on it and what could not be written; each figure with how old it is."""

from __future__ import annotations

import time

from ..run.diagnose import diagnose, parked_words
from ..run.events import LIVE, RunState, jsonable
from ..run.run import Run


def status_json(run: Run, state: RunState) -> dict:
    d = diagnose(state)
    return {"run": run.id, "meta": run.rd.meta(), "status": state.status, "readiness": state.readiness(),
            "diagnosis": state.diagnosis if state.status in ("failed", *LIVE) else d.headline,
            "details": d.details, "processes": jsonable(state.procs), "barrier": jsonable(state.cells),
            "handshake": jsonable(state.pairs), "checks": jsonable(state.checks), "metrics": jsonable(state.metrics),
            "storage": {"problems": dict(state.storage), "waiting": run.rd.waiting_words(),
                        "unsaved": run.unsaved_words},
            "as_of": dict(run.watchers.passed), "actions": jsonable(state.actions)}


def _ago(t: float | None, now: float) -> str:
    """How old a figure is, in words: "now", "3s ago", "2m ago"; "" when not known."""
    if not t:
        return ""
    s = max(0.0, now - t)
    return "now" if s < 1 else f"{s:.0f}s ago" if s < 120 else f"{s / 60:.0f}m ago"


def status_text(run: Run, state: RunState) -> str:
    """The run as this pass found it; each figure says how old it is (this pass's or an earlier session's)."""
    now = time.time()
    d = diagnose(state)
    meta = run.rd.meta()
    passed = run.watchers.passed

    def when(part: str) -> str:
        return f" ({'this pass, ' if part in passed else ''}{_ago(passed.get(part), now) or 'not checked now'})"

    lines = [f"run {run.id}  recipe {meta.get('recipe')}  cluster {meta.get('cluster')} ({meta.get('launcher')})"
             + (f"  job {meta['job_id']}" if meta.get("job_id") else ""),
             f"status {state.status}: {state.readiness()}",
             f"  {state.diagnosis if state.status in ('failed', *LIVE) else d.headline}",
             f"processes{when('processes')}:"]
    for p in state.procs.values():
        alive = {True: "alive", False: "dead", None: "?"}[p.alive]
        since = f"{now - p.since:.0f}s" if p.since else ""
        extra = f" exit {p.exit_code}" if p.exit_code is not None else ""
        extra += f", restarted {p.restarts}x" if p.restarts else ""
        extra += " (removed)" if p.removed else ""
        lines.append(f"  {p.name:12} {p.node:16} {p.stage:14} {since:>6} {alive}{extra}")
        if p.action:
            lines.append(f"    action: {p.action}")
        if p.health_detail:
            lines.append(f"    {p.health_detail}")
        if p.supervisor_gone and p.alive is not False:
            lines.append(f"    {p.supervisor_gone}")
        if p.parked and p.alive is not False:
            lines.append(f"    {p.parked}")
    lines.append(f"barrier{when('barrier')}:")
    for c in state.cells.values():
        mark = {"open": "OK", "closed": "CLOSED"}.get(c.state, "--")
        lines.append(f"  {mark:6} {c.node}:{c.port:<6} {c.kind:9} {c.owner or ''}")
    if state.pairs:
        lines.append("handshake (from the logs; each stage since when it was reached):")
        for pr in state.pairs.values():
            lines.append(f"  {pr.key:24} {pr.stage}" + (f" {_ago(pr.since, now)}" if pr.since else "")
                         + (f": {pr.failed}" if pr.failed else ""))
    if state.metrics:
        lines.append("metrics (each as scraped):")
        for name, m in state.metrics.items():
            lines.append(f"  {name:12} {metrics_words(m)} ({_ago(m.get('t'), now) or 'time unknown'})")
    if state.checks:
        lines.append("router checks:")
        for check in state.checks.values():
            ok = "ok" if check.ok else "FAIL" if check.ok is False else ".."
            at = check.data.get("at") or check.since
            live = " (this pass)" if check.name == "smoke:live" and "smoke" in passed else ""
            lines.append(f"  {check.name:18} {ok}  {check.detail[:100]} ({_ago(at, now)}{live})")
    lines += action_lines(state)
    lines += storage_lines(run, state)
    return "\n".join(lines)


def action_lines(state: RunState, last: int = 10) -> list[str]:
    """The run's actions (restart, remove, add), newest last: when, on what, by whom, how it ended."""
    if not state.actions:
        return []
    out = ["actions:"]
    for a in sorted(state.actions.values(), key=lambda a: a.started)[-last:]:
        when = time.strftime("%H:%M:%S", time.localtime(a.started))
        took = f" in {a.since - a.started:.1f}s" if a.outcome and a.since >= a.started else ""
        end = f"{a.outcome}{took}" if a.outcome else f"running: {a.step}"
        lines = f"  {when} {a.kind:8} {a.target:12} {end}: {a.detail[:110]}".rstrip(": ")
        out.append(lines)
        out.append(f"           by {a.source}")
    return out


def storage_lines(run: Run, state: RunState) -> list[str]:
    """Where nothing can be written (the run directory, a node's log directory), in full: said plainly, at the
    end of the report, with what waits and where this session left it."""
    if not state.storage and not run.unsaved_words:
        return []
    out = ["storage:"]
    out += [f"  {words}" for words in state.storage.values()]
    waiting = run.rd.waiting_words()
    if run.unsaved_words:  # this session has ended its writes: where they are now
        out.append(f"  {run.unsaved_words}")
    elif waiting:
        out.append(f"  waiting to be written: {waiting}")
    return out


def metrics_words(m: dict) -> str:
    """One endpoint's latest metrics in a line."""
    parts = []
    if m.get("source") == "atom":
        parts.append(f"{m.get('requests_running', 0):.0f} running, {m.get('requests_waiting', 0):.0f} waiting")
        if parked := parked_words(m):
            parts.append(parked)
        if "gen_tok_s" in m:
            parts.append(f"{m['gen_tok_s']:.1f} gen tok/s, {m.get('prompt_tok_s', 0):.1f} prompt tok/s")
        if "kv_cache_usage_ratio" in m:
            parts.append(f"KV cache {100 * m['kv_cache_usage_ratio']:.0f}%")
    elif m.get("source") == "mesh":
        parts.append(f"{m.get('router_requests', 0):.0f} requests, {m.get('router_errors', 0):.0f} errors")
        if "req_s" in m:
            parts.append(f"{m['req_s']:.2f} req/s, {m.get('errors_s', 0):.2f} errors/s")
        if m.get("errors_by_type"):
            parts.append(", ".join(f"{k} {v:.0f}" for k, v in sorted(m["errors_by_type"].items())))
    else:
        parts.append(f"no /metrics (older ATOM); router: {m.get('active', 0):.0f} active")
    return "; ".join(parts)
