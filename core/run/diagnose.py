"""Why a run is not serving, in one line and in detail: the missing barrier cells, whether their
processes are alive, what stage they are in, and their last log lines."""

from __future__ import annotations

import re
import signal
import time
from dataclasses import dataclass, field

from ..design.lint import MOONCAKE_RPC_PORTS
from .events import HEALTH_STAGES, LIVE, TERMINAL, CellState, ProcState, RunState

STALL_AFTER_S = 60.0  # no new log line for this long while not up: call it stalled
# owners of not-open ports described one by one; the rest are named in one line (the barrier has every cell).
# 128 nodes coming up gave 129 long lines that changed every second: unreadable, and re-laid out by the
# console at each change
LISTED = 24


@dataclass
class Diagnosis:
    headline: str
    blocking: list[CellState] = field(default_factory=list)  # barrier cells still missing
    details: list[str] = field(default_factory=list)
    culprit: str | None = None  # the process to look at first


def _ago(t: float, now: float) -> str:
    s = max(0.0, now - t)
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m"


# access-log lines of atomdeck's own checks say nothing about the process
_OWN_CHECKS = re.compile(r'"GET /(?:health|metrics|readiness|workers|kv_transfer_info|v1/models) HTTP')


def own_check(line: str) -> bool:
    """An access-log line of atomdeck's own checks (it says nothing about the process)."""
    return bool(_OWN_CHECKS.search(line))


def last_words(p: ProcState) -> str:
    """The line that says most about how a process is or ended: its last error line, else its last line."""
    for line in reversed(p.errors or []):
        return line.strip()[:160]
    for line in reversed(p.last_lines):
        if line.strip() and not _OWN_CHECKS.search(line):
            return line.strip()[:160]
    return "(no output yet)"


# What a known last line means, said after it: the line names the symptom, not where to look.
_MEANS = ((re.compile(r"address already in use", re.IGNORECASE),
           "a port it binds was taken on its node: by another process, or by a Mooncake engine's random port "
           f"in {MOONCAKE_RPC_PORTS[0]}-{MOONCAKE_RPC_PORTS[1]} / MC_MIN_RPC_PORT-MC_MAX_RPC_PORT; "
           "lint: mooncake-port-range"),
          (re.compile(r"out of memory|hipErrorOutOfMemory", re.IGNORECASE),
           "GPU memory ran out: a leftover process may hold it, see rocm-smi --showpids on the node; else more "
           "GPUs or a lower --gpu-memory-utilization"),
          (re.compile(r"Can't load tokenizer for "),
           "the model path is not a model directory on the node, or not mounted in its container"))


def meaning(last: str) -> str:
    for rx, means in _MEANS:
        if rx.search(last):
            return f" ({means})"
    return ""


# atom/model_engine/async_proc.py monitor_procs (pin :428, head :464): the EngineCore names the rank that died by its
# multiprocessing name, ModelRunner{tp rank}/{tp size}, and multiprocessing's exit code (minus a signal's number)
_RANK_DIED = re.compile(r"\[ModelRunner(\d+)/(\d+)\] proc died unexpectedly \(exitcode=(-?\d+)\)")


def rank_death(p: ProcState) -> str:
    """', its TP rank 3 of 8 (ModelRunner3/8) died: killed by SIGKILL' when the worker's EngineCore logged a rank's
    death: the worker's own exit (1, a traceback) only follows from it."""
    for line in p.errors or []:
        m = _RANK_DIED.search(line)
        if m:
            rank, size, code = int(m[1]), int(m[2]), int(m[3])
            how = f"killed by {_signame(-code)}" if code < 0 else f"exit code {code}"
            if size == 1:  # DP attention: an EngineCore per DP rank, one rank each; the line does not say which
                return f", a rank of one of its EngineCores (ModelRunner0/1) died: {how}"
            return f", its TP rank {rank} of {size} (ModelRunner{rank}/{size}) died: {how}"
    return ""


def _signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def describe_proc(p: ProcState, now: float) -> str:
    if p.stage in HEALTH_STAGES and p.alive is not False:
        return (f"{p.name} on {p.node} {p.stage} for {_ago(p.since or now, now)}: {p.health_detail}; "
                f"last: {last_words(p)}")
    if p.alive is False or p.stage in TERMINAL:
        how = (p.exit_detail or (f"exit {p.exit_code}" if p.exit_code is not None else "gone")) + rank_death(p)
        last = last_words(p)
        return f"{p.name} on {p.node} {how}; last: {last}{meaning(last)}"
    if p.stage == "pending":
        return f"{p.name} on {p.node} not started yet"
    quiet = now - p.last_line_at if p.last_line_at else None
    stall = f", silent for {_ago(p.last_line_at, now)}" if quiet and quiet > STALL_AFTER_S else ""
    return (f"{p.name} on {p.node} alive, {p.stage.replace('_', ' ')} for {_ago(p.since or now, now)}{stall}; "
            f"last: {last_words(p)}")


def parked_words(m: dict, short: bool = False) -> str:
    """A decode's requests parked for their KV, from its latest metrics (watchers/pairs.py): "8 parked for KV,
    oldest 12s, on prefill-0" (short: "8 parked 12s ← prefill-0", for a panel's row); "" when none is. The age
    is as of the scrape (m["t"]), a lower bound: from when atomdeck first saw the request wait."""
    n = m.get("parked") or 0
    if not n:
        return ""
    age, on = m.get("parked_oldest_s"), m.get("parked_on")
    if short:
        return f"{n:.0f} parked" + (f" {age:.0f}s" if age is not None else "") + (f" ← {on}" if on else "")
    return f"{n:.0f} parked for KV" + (f", oldest {age:.0f}s" if age is not None else "") + (f", on {on}" if on else "")


def name_ranges(names: list[str]) -> str:
    """Names folded into runs of their numbers, each prefix in the order it first comes: prefill-24–63,
    decode-0–63, s005–009, router."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        prefix, num = (m[1], m[2]) if m else (name, "")
        groups.setdefault(prefix, []).append((int(num) if num else -1, num))
    out = []
    for prefix, nums in groups.items():
        nums.sort()
        i = 0
        while i < len(nums):
            j = i
            while j + 1 < len(nums) and nums[j + 1][0] == nums[j][0] + 1 and nums[i][0] >= 0:
                j += 1
            first, last = nums[i][1], nums[j][1]
            out.append(f"{prefix}{first}" if i == j else f"{prefix}{first}–{last}")
            i = j + 1
    return ", ".join(out)


def diagnose(s: RunState, now: float | None = None) -> Diagnosis:
    """The most useful explanation of the run's current state; a directory that cannot be written (the run
    directory, a node's log directory) is added to it, in full in the details (the console's Why panel)."""
    d = _diagnose(s, now)
    if s.storage:
        d.headline += "; cannot write " + ", ".join(f"the {k}" if k == "run directory" else k for k in s.storage)
        d.details = [*d.details, *s.storage.values()]
    return d


def _diagnose(s: RunState, now: float | None = None) -> Diagnosis:
    now = now or time.time()
    if s.status in ("stopped", "stopping"):
        return Diagnosis(f"run {s.status}")
    dead = [p for p in s.procs.values() if p.stage == "failed" or (p.alive is False and p.stage != "stopped")]
    missing = [c for c in s.cells.values() if c.state != "open"]
    # the router binds only after every worker registered: while a worker port is missing, the router's
    # cell is a consequence, not a cause
    workers_missing = [c for c in missing if c.kind != "router"]
    blocking = workers_missing or missing
    if dead:
        first = min(dead, key=lambda p: p.since or now)
        return Diagnosis(f"{describe_proc(first, now)}", blocking,
                         [describe_proc(p, now) for p in dead], first.name)
    for pr in s.pairs.values():
        if pr.stage == "failed":
            return Diagnosis(f"KV handshake {pr.prefill} -> {pr.decode} failed: {pr.failed}", blocking,
                             [describe_proc(s.procs[n], now) for n in (pr.prefill, pr.decode) if n in s.procs],
                             pr.decode)
    failed_checks = [c for c in s.checks.values() if c.ok is False]
    sick = [f"node {n} is {detail or state}" for n, (state, detail, _) in s.conns.items() if state != "ok"]
    sick += [f"{p.supervisor_gone} (on {p.node})" for p in s.procs.values()
             if p.supervisor_gone and p.alive is not False and p.stage not in TERMINAL]
    acting = [a for a in s.actions.values() if a.running and a.target in s.procs]
    if acting and s.status in LIVE:
        words = [f"{a.target} on {s.procs[a.target].node}: {a.kind} by {a.source}, {s.procs[a.target].action} "
                 f"({_ago(a.started, now)})" for a in sorted(acting, key=lambda a: a.started)]
        return Diagnosis(f"degraded: {words[0]}", [], words + [describe_proc(s.procs[a.target], now) for a in acting],
                         acting[0].target)
    unwell = sorted((p for p in s.procs.values() if p.stage in HEALTH_STAGES), key=lambda p: p.since or now)
    if unwell:
        first = unwell[0]
        word = "degraded" if s.status in LIVE else s.status
        return Diagnosis(f"{word}: {describe_proc(first, now)}", [], [describe_proc(p, now) for p in unwell] +
                         sick, first.name)
    parked = sorted((p for p in s.procs.values() if p.parked and p.alive is not False),
                    key=lambda p: p.parked_data.get("since") or now)
    if parked and s.status in LIVE:
        return Diagnosis(f"degraded: {parked[0].parked}", [], [p.parked for p in parked] + sick, parked[0].name)
    if s.status in LIVE:
        if sick:
            return Diagnosis(f"serving: {s.readiness()}, but {sick[0]}", [], sick)
        return Diagnosis(f"serving: {s.readiness()}")
    unbound = [c for c in failed_checks if c.name.startswith("bind:") and
               s.cells.get(f"{c.data.get('node')}:{c.data.get('port')}") is not None and
               s.cells[f"{c.data.get('node')}:{c.data.get('port')}"].state != "open"]
    if unbound:
        return Diagnosis(unbound[0].detail, blocking, [c.detail for c in unbound], unbound[0].name[5:])
    if blocking:
        owners: dict[str, list[CellState]] = {}
        for c in blocking:
            owners.setdefault(c.owner or c.node, []).append(c)
        details = []
        for owner, cells in list(owners.items())[:LISTED]:
            ports = ", ".join(f":{c.port}" for c in sorted(cells, key=lambda c: c.port))
            p = s.procs.get(owner)
            who = describe_proc(p, now) if p else f"{owner}: no process owns these ports"
            details.append(f"{cells[0].node} {ports} not open — {who}")
        if len(owners) > LISTED:
            rest = list(owners)[LISTED:]
            details.append(f"… and {len(rest)} more with ports not open: {name_ranges(rest)}")
        culprit = next(iter(owners))
        n = len(blocking)
        waited = _ago(s.started or now, now)
        if workers_missing and len(missing) > len(workers_missing):
            details.append("the router's port opens only after every worker is up")
        details += sick
        headline = _launching(s) or f"barrier: {n} cell(s) not open after {waited}; {details[0]}"
        return Diagnosis(headline, blocking, details, culprit if culprit in s.procs else None)
    if failed_checks:
        check = failed_checks[0]
        return Diagnosis(f"router check '{check.name}' failed: {check.detail}", [], [f"{x.name}: {x.detail}"
                                                                          for x in failed_checks], "router")
    return Diagnosis(_launching(s) or f"barrier complete; waiting for the router: {s.readiness()}")


def _launching(s: RunState) -> str:
    """While core's launch starts the processes (each is told as it is heard): what the headline says instead of
    the barrier's wait, which has not begun, with the nodes whose starts have not answered. The details stay the
    barrier's, each owner "not started yet", so that they keep their shape when the wait begins (a console's
    layout)."""
    if s.status != "launching":
        return ""
    pending = [p for p in s.procs.values() if p.stage == "pending"]
    if len(pending) == len(s.procs):
        return f"launching: starting {len(s.procs)} processes"
    nodes = name_ranges(list(dict.fromkeys(p.node for p in pending)))
    return f"launching: {len(s.procs) - len(pending)} of {len(s.procs)} processes started" + \
        (f"; not yet on {nodes}" if pending else "")
