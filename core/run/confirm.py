"""What an action on a live run will do, in words, before it is done (issue 38): the console's confirmation says
it and the CLI's `--dry-run` prints it. Built from the run's state as it is now (its requests in flight, the
workers of the role left serving) and the facts of the field (AToMesh restarts without a drain; a prefill can
only be added by restarting it)."""

from __future__ import annotations

from .events import RunState


def in_flight_words(state: RunState, name: str, url: str | None = None) -> str:
    """Requests in flight to a worker now, from the latest metrics the watch read (its own queues, the router's
    count), or "" when none are known."""
    m = state.metrics.get(name) or {}
    parts = []
    if m.get("source") == "atom":
        running, waiting = m.get("requests_running", 0), m.get("requests_waiting", 0)
        parts.append(f"{running:.0f} running, {waiting:.0f} waiting on it")
        if m.get("parked"):
            parts.append(f"{m['parked']:.0f} parked for KV")
    workers = (state.metrics.get("router") or {}).get("workers") or {}
    active = (workers.get(url.rstrip("/")) or {}).get("active") if url else None
    if active:
        parts.append(f"the router has {active:.0f} in flight to it")
    return "; ".join(parts)


def describe(state: RunState, kind: str, target: str, drain: bool = True, drain_timeout: float = 60.0,
             role: str = "", node: str | None = None, url: str | None = None) -> tuple[str, list[str]]:
    """(title, lines) of what the action will do."""
    if kind == "add":
        title = f"Add a {role} to run {state.run_id}?"
        where = f" on {node}" if node else " on a free per_node slot, or a free healthy node"
        lines = [f"Plan one more {role}{where}, linted as for a launch; its node checked (healthy, no other run, its "
                 f"ports free).",
                 "Start it, wait until it is up and its KV pairs are reachable, register it with the router."]
        if role == "prefill":
            lines.append("AToMesh learns a prefill's tp_size only when it starts: the router is restarted with it, "
                         "and clients see a gap of a few seconds.")
        lines.append("Nothing else is stopped.")
        return title, lines
    p = state.procs.get(target)
    role = p.role if p is not None else ""
    verb = {"restart": "Restart", "remove": "Drain and remove"}.get(kind, kind)
    title = f"{verb} {target} of run {state.run_id}?"
    lines = []
    if role == "router":
        lines += ["The router is stopped and started again with the same command: it has no router to drain from, "
                  "so the requests in flight through it fail and clients see a gap until it serves again.",
                  "The workers keep running; the router registers them again as it starts."]
        return title, lines
    busy = in_flight_words(state, target, url)
    if drain:
        lines.append(f"Drain: take {target} out of the router, then wait until its in-flight requests finish "
                     f"(at most {drain_timeout:g}s; then what is still in flight is ended with it)."
                     + (f" Now: {busy}." if busy else ""))
    else:
        lines.append(f"No drain: {target} is stopped at once" + (f"; now {busy}, and those fail." if busy else "."))
    lines.append(f"Stop: the verified stop of a teardown, for {target}'s whole tree (EngineCore and ranks).")
    if kind == "restart":
        lines.append("Start it again with the same command and environment, wait until it is up and its KV pairs "
                     "are reachable from the consumers' nodes, register it with the router, and check a request "
                     "reaches it.")
    else:
        lines.append(f"Then {target} is out of the run: status, teardown and a reattach know it.")
    left = [n for n, q in state.procs.items() if q.role == role and n != target and not q.removed]
    if not left:
        lines.append(f"{target} is the run's only {role}: while it is out the router has none, and every request "
                     f"fails.")
    else:
        lines.append(f"Meanwhile {len(left)} other {role}(s) serve; the run is degraded until it is back.")
    return title, lines
