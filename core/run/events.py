# Long file: the one fold of every event kind into the run's state; its handlers share the state's parts
"""Events core emits and the run state they fold into; the console and the CLI render the state.

The fold is pure: replaying a run's events.jsonl rebuilds the same state in any later session.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .gpustate import NodeGpuState

if TYPE_CHECKING:
    from ..design.commands import ProcessSpec
    from ..design.plan import Plan

# Endpoint (worker) stages, in order. A stage is only ever left for a later one, or for a terminal one.
WORKER_STAGES = ("pending", "launching", "loading", "kv_registered", "http_up", "registered", "serving")
ROUTER_STAGES = ("pending", "launching", "starting", "waiting_workers", "workers_registered", "ready", "http_up",
                 "serving")
TERMINAL = ("failed", "stopped")
# Health after the start: a process that was up stops answering (unresponsive) or answers but makes no
# tokens while requests wait (stalled). Entered from any up stage, left back to it on recovery.
HEALTH_STAGES = ("unresponsive", "stalled")
PAIR_STAGES = ("waiting", "both_registered", "ports_reachable", "transferred")
CELL_STATES = ("waiting", "open", "refused", "timeout", "closed")  # closed = was open, now refused
RUN_STATES = ("launching", "starting", "serving", "degraded", "failed", "stopping", "stopped", "dirty")
MAX_ERRORS = 50  # per process, in the state (the full log stays on disk)
LIVE = ("serving", "degraded")  # the run was up; degraded = an endpoint is unresponsive or stalled, or a pair failed


@dataclass(frozen=True)
class Event:
    """One thing that happened. `kind` picks the part of the state it changes."""

    kind: str  # proc.started | proc.stage | proc.health | proc.exit | proc.line | proc.supervisor | cell | pair |
    # proc.parked | check | run | teardown | conn | note | metrics | storage | action | proc.reset | proc.removed |
    # proc.added | gpus
    name: str = ""  # the subject: a process, "node:port", "prefill-0>decode-0", a check, a node
    value: str = ""  # the new stage/state/result
    detail: str = ""  # human words: why, the log line, the error
    data: dict = field(default_factory=dict)
    t: float = field(default_factory=time.time)

    def to_json(self) -> str:
        """One line of JSON, the same text `asdict` gave, made once per event: the events file and the console's
        stream both need it. `asdict` deep-copied `data` (a metrics event's 40-value histories) for every
        event: 11 % of the console's watcher's samples at 128 nodes (issue 19)."""
        cached = self.__dict__.get("_json")
        if cached is None:
            cached = json.dumps(self.as_dict(), separators=(",", ":"), default=str)
            object.__setattr__(self, "_json", cached)  # frozen: not a field, so eq/repr/asdict ignore it
        return cached

    def as_dict(self) -> dict:
        """The event's fields, shallow (`data` is this event's own dict)."""
        return {"kind": self.kind, "name": self.name, "value": self.value, "detail": self.detail, "data": self.data,
                "t": self.t}

    @staticmethod
    def from_dict(d: dict) -> Event:
        return Event(d["kind"], d.get("name", ""), d.get("value", ""), d.get("detail", ""), d.get("data") or {},
                     d.get("t", 0.0))

    @staticmethod
    def from_json(line: str) -> Event:
        return Event.from_dict(json.loads(line))


@dataclass
class ProcState:
    name: str
    role: str
    node: str
    stage: str = "pending"
    since: float = 0.0
    stages: dict[str, float] = field(default_factory=dict)  # stage -> when it was reached
    pid: int | None = None
    alive: bool | None = None
    exit_code: int | None = None
    exit_detail: str = ""
    last_lines: deque = field(default_factory=lambda: deque(maxlen=20))
    last_line_at: float = 0.0
    # known fatal or telling lines seen, the newest MAX_ERRORS: a run watched for a day may log them all day
    errors: deque = field(default_factory=lambda: deque(maxlen=MAX_ERRORS))
    health_from: str = ""  # the stage left for a health stage (unresponsive, stalled), restored on recovery
    health_detail: str = ""  # why it is unresponsive/stalled: what was asked, alive or not, its state on the node
    recovered: str = ""  # the last recovery, in words
    restarts: int = 0  # times an action restarted it (issue 38)
    action: str = ""  # the step of an action on it now, in words ("draining, 3 in flight"), "" when none
    removed: bool = False  # taken out of the run by an action: no cell, pair or check of it counts
    # its supervisor is gone while the engine lives on (the engine's own PID decides liveness): in words, and
    # the engine's PID; "" while the supervisor is there
    supervisor_gone: str = ""
    engine_pid: int | None = None
    # a decode's requests parked for their KV too long (watchers/pairs.py): in words, and its figures; "" when not
    parked: str = ""
    parked_data: dict = field(default_factory=dict)

    @property
    def order(self) -> tuple[str, ...]:
        return ROUTER_STAGES if self.role == "router" else WORKER_STAGES

    @property
    def up_stage(self) -> str:
        """The start stage reached, whatever the health: the stage a health stage was entered from."""
        return self.health_from if self.stage in HEALTH_STAGES else self.stage

    def advance(self, stage: str, t: float) -> bool:
        if self.stage in TERMINAL:
            return False
        if self.stage in HEALTH_STAGES and stage not in TERMINAL:
            # still unresponsive/stalled: remember the progress, show it on recovery
            if stage in self.order and self.order.index(stage) > self.order.index(self.health_from or "pending"):
                self.health_from = stage
                self.stages.setdefault(stage, t)
                return True
            return False
        if stage not in TERMINAL:
            if stage not in self.order or self.order.index(stage) <= self.order.index(self.stage):
                return False
        self.stage, self.since = stage, t
        self.stages.setdefault(stage, t)
        return True


@dataclass
class CellState:
    node: str
    host: str
    port: int
    role: str
    kind: str
    owner: str | None
    state: str = "waiting"
    since: float = 0.0
    was_open: bool = False

    @property
    def key(self) -> str:
        return f"{self.node}:{self.port}"


@dataclass
class PairState:
    prefill: str
    decode: str
    stage: str = "waiting"
    since: float = 0.0
    failed: str = ""  # why the handshake failed, if it did

    @property
    def key(self) -> str:
        return f"{self.prefill}>{self.decode}"


@dataclass
class CheckState:
    name: str  # readiness | workers | models | smoke
    ok: bool | None = None
    detail: str = ""
    since: float = 0.0
    data: dict = field(default_factory=dict)


@dataclass
class ActionState:
    """One action on a live run (restart, remove, add), as its events tell it."""

    id: str
    kind: str
    target: str
    source: str = ""
    started: float = 0.0
    step: str = ""
    detail: str = ""
    since: float = 0.0
    outcome: str = ""  # "" while it runs; done | failed | interrupted | rolled back
    steps: list[tuple[float, str, str]] = field(default_factory=list)  # (when, step, words)

    @property
    def running(self) -> bool:
        return not self.outcome


ACTION_ENDS = ("done", "failed", "interrupted", "rolled back")


def action_words(step: str, detail: str) -> str:
    """A process's step as its row shows it: short ("draining, 3 in flight", "loading", "registered")."""
    if step == "draining" and detail[:1].isdigit():
        return f"draining, {detail.split(';')[0]}"
    return {"smoke": "smoke request", "requested": "asked", "handshake": "KV pairs"}.get(step, step)


@dataclass
class RunState:
    run_id: str
    status: str = "launching"
    since: float = 0.0
    diagnosis: str = ""
    procs: dict[str, ProcState] = field(default_factory=dict)
    cells: dict[str, CellState] = field(default_factory=dict)
    pairs: dict[str, PairState] = field(default_factory=dict)
    checks: dict[str, CheckState] = field(default_factory=dict)
    conns: dict[str, tuple[str, str, float]] = field(default_factory=dict)  # node -> (state, detail, since)
    teardown: dict[str, str] = field(default_factory=dict)  # process or node -> what happened
    notes: deque = field(default_factory=lambda: deque(maxlen=50))
    started: float = 0.0
    metrics: dict[str, dict] = field(default_factory=dict)  # endpoint -> latest values and rates
    # where atomdeck or a process cannot write ("run directory", "NODE:PATH" of a log) -> why, since when, the fix
    storage: dict[str, str] = field(default_factory=dict)
    actions: dict[str, ActionState] = field(default_factory=dict)  # action id -> its story (issue 38)
    gpus: dict[str, NodeGpuState] = field(default_factory=dict)  # node -> its GPUs' latest reading (gpustate.py)

    def apply(self, e: Event) -> bool:
        """Fold one event in. Returns True when the visible state changed."""
        handler = getattr(self, "_on_" + e.kind.replace(".", "_"), None)
        return bool(handler(e)) if handler else False

    # --- handlers -----------------------------------------------------------------------------------
    def _on_proc_started(self, e: Event) -> bool:
        p = self.procs.get(e.name)
        if p is None:
            return False
        p.pid = e.data.get("pid")
        p.alive = True
        p.advance("launching", e.t)
        return True

    def _on_proc_stage(self, e: Event) -> bool:
        p = self.procs.get(e.name)
        if p is None:
            return False
        if e.detail and e.value == "failed":
            p.errors.append(e.detail)
        return p.advance(e.value, e.t)

    def _on_proc_health(self, e: Event) -> bool:
        """value: unresponsive | stalled | ok (recovered)."""
        p = self.procs.get(e.name)
        if p is None or p.stage in TERMINAL:
            return False
        if e.value in HEALTH_STAGES:
            if p.stage == e.value and p.health_detail == e.detail:
                return False
            if p.stage not in HEALTH_STAGES:
                p.health_from = p.stage
            if p.stage != e.value:
                p.since = e.t
            p.stage, p.health_detail = e.value, e.detail
            p.stages.setdefault(e.value, e.t)
            return True
        if p.stage not in HEALTH_STAGES:
            return False
        p.stage, p.since = p.health_from or "serving", e.t
        p.health_from, p.health_detail, p.recovered = "", "", e.detail
        return True

    def _on_proc_supervisor(self, e: Event) -> bool:
        """value: gone (the engine lives on without it; data: engine_pid)."""
        p = self.procs.get(e.name)
        if p is None or p.stage in TERMINAL or p.supervisor_gone == e.detail:
            return False
        p.supervisor_gone, p.engine_pid = e.detail, e.data.get("engine_pid")
        return True

    def _on_proc_parked(self, e: Event) -> bool:
        """value: parked (a request waits too long for its KV; data: count, since, prefill, req) | ok."""
        p = self.procs.get(e.name)
        if p is None:
            return False
        if e.value != "parked":
            if not p.parked:
                return False
            p.parked, p.parked_data = "", {}
            return True
        if p.stage in TERMINAL or (p.parked == e.detail and p.parked_data == e.data):
            return False
        p.parked, p.parked_data = e.detail, dict(e.data)
        return True

    def _on_metrics(self, e: Event) -> bool:
        """Latest metrics of one endpoint (values and derived rates); not persisted."""
        self.metrics[e.name] = dict(e.data)
        return True

    def _on_gpus(self, e: Event) -> bool:
        """A node's GPUs (value: the tool, detail: why they could not be read); not persisted."""
        new = NodeGpuState.from_event(e.name, e.value, e.detail, e.data, e.t)
        old = self.gpus.get(e.name)
        self.gpus[e.name] = new
        return old is None or (old.tool, old.error, old.gpus, old.foreign, old.holders) != \
            (new.tool, new.error, new.gpus, new.foreign, new.holders)

    def _on_proc_error(self, e: Event) -> bool:
        p = self.procs.get(e.name)
        if p is None:
            return False
        p.errors.append(e.detail)
        return True

    def _on_proc_exit(self, e: Event) -> bool:
        p = self.procs.get(e.name)
        if p is None:
            return False
        p.alive = False
        p.exit_code = e.data.get("code")
        p.exit_detail = e.detail
        if not p.last_lines:  # a session that did not see the lines live (replay, reattach) gets them here
            p.last_lines.extend(e.data.get("last_lines", []))
        p.advance("stopped" if e.value == "stopped" else "failed", e.t)
        return True

    def _on_proc_line(self, e: Event) -> bool:
        p = self.procs.get(e.name)
        if p is None:
            return False
        p.last_lines.append(e.detail)
        p.last_line_at = e.t
        return True

    def _on_cell(self, e: Event) -> bool:
        c = self.cells.get(e.name)
        if c is None or c.state == e.value:
            return False
        if e.value == "open":
            c.was_open = True
        c.state = "closed" if (e.value in ("refused", "timeout") and c.was_open) else e.value
        c.since = e.t
        return True

    def _on_pair(self, e: Event) -> bool:
        pr = self.pairs.get(e.name)
        if pr is None:
            return False
        if e.value == "failed":
            pr.failed = e.detail
            pr.stage, pr.since = "failed", e.t
            return True
        if pr.stage == "failed" or PAIR_STAGES.index(e.value) <= PAIR_STAGES.index(pr.stage):
            return False
        pr.stage, pr.since = e.value, e.t
        return True

    def _on_check(self, e: Event) -> bool:
        c = self.checks.setdefault(e.name, CheckState(e.name))
        ok = True if e.value == "ok" else False if e.value == "fail" else None
        if c.ok == ok and c.detail == e.detail:
            return False
        c.ok, c.detail, c.since, c.data = ok, e.detail, e.t, dict(e.data)
        return True

    def _on_run(self, e: Event) -> bool:
        if self.status == e.value and self.diagnosis == e.detail:
            return False
        if self.status != e.value:
            self.since = e.t
        self.status, self.diagnosis = e.value, e.detail
        if not self.started:
            self.started = e.t
        return True

    def _on_teardown(self, e: Event) -> bool:
        self.teardown[e.name] = f"{e.value}: {e.detail}" if e.detail else e.value
        return True

    def _on_conn(self, e: Event) -> bool:
        old = self.conns.get(e.name)
        if old and old[0] == e.value and old[1] == e.detail:
            return False
        self.conns[e.name] = (e.value, e.detail, e.t)
        return True

    def _on_storage(self, e: Event) -> bool:
        """value: unwritable (detail: the whole message) | ok (written again)."""
        if e.value == "ok":
            return self.storage.pop(e.name, None) is not None
        if self.storage.get(e.name) == e.detail:
            return False
        self.storage[e.name] = e.detail
        return True

    def _on_action(self, e: Event) -> bool:
        """A step of an action on a live run. value: its step (requested, draining, stopping, starting,
        loading, registering, smoke, ... or an end: done, failed, interrupted, rolled back); data: id, kind,
        source. The process shows the step while the action runs."""
        aid = e.data.get("id") or f"{e.name}@{e.t}"
        a = self.actions.get(aid)
        if a is None:
            a = self.actions[aid] = ActionState(aid, e.data.get("kind", "action"), e.name,
                                                e.data.get("source", ""), e.t)
        if a.step == e.value and a.detail == e.detail:
            return False
        a.step, a.detail, a.since = e.value, e.detail, e.t
        a.steps.append((e.t, e.value, e.detail))
        p = self.procs.get(e.name)
        if e.value in ACTION_ENDS:
            a.outcome = e.value
            if p is not None:
                p.action = ""
                if e.value == "done" and a.kind == "restart":
                    p.restarts += 1
        elif p is not None:
            p.action = action_words(e.value, e.detail)
        return True

    def _on_proc_reset(self, e: Event) -> bool:
        """The process starts again (a restart): its stages, its cells and the pairs it is in start over."""
        p = self.procs.get(e.name)
        if p is None or (e.data.get("pid") and p.pid == e.data.get("pid") and p.stage not in TERMINAL):
            return False
        p.stage, p.since, p.stages = "pending", e.t, {}
        p.alive, p.exit_code, p.exit_detail = None, None, ""
        p.health_from, p.health_detail = "", ""
        p.parked, p.parked_data = "", {}  # the old process's requests are gone with it
        p.errors.clear()
        for c in self.cells.values():
            if c.owner == e.name:
                c.state, c.since, c.was_open = "waiting", e.t, False
        for pr in self.pairs.values():
            if e.name in (pr.prefill, pr.decode):
                pr.stage, pr.since, pr.failed = "waiting", e.t, ""
        return True

    def _on_proc_removed(self, e: Event) -> bool:
        """Taken out of the run by an action: stopped, and no cell or pair of it counts any more."""
        p = self.procs.get(e.name)
        if p is None or p.removed:
            return False
        p.removed, p.action, p.alive = True, "", False
        p.advance("stopped", e.t)
        for key in [k for k, c in self.cells.items() if c.owner == e.name]:
            del self.cells[key]
        for key in [k for k, pr in self.pairs.items() if e.name in (pr.prefill, pr.decode)]:
            del self.pairs[key]
        return True

    def _on_proc_added(self, e: Event) -> bool:
        """A worker added to the live run: its process, its barrier cells and its pairs (data as fresh_state
        gives them)."""
        if e.name in self.procs and not self.procs[e.name].removed:
            return False
        d = e.data
        self.procs[e.name] = ProcState(e.name, d.get("role", "decode"), d.get("node", ""))
        for c in d.get("cells", []):
            cell = CellState(c["node"], c["host"], c["port"], c["role"], c["kind"], c.get("owner"))
            self.cells[cell.key] = cell
        for pf, dc in d.get("pairs", []):
            self.pairs[f"{pf}>{dc}"] = PairState(pf, dc)
        return True

    def _on_note(self, e: Event) -> bool:
        self.notes.append((e.t, e.detail))
        return True

    # --- summaries ------------------------------------------------------------------------------------
    def role_counts(self) -> dict[str, tuple[int, int]]:
        """role -> (workers at http_up or later, workers)."""
        out: dict[str, tuple[int, int]] = {}
        for p in self.procs.values():
            if p.role == "router" or p.removed:
                continue
            up, total = out.get(p.role, (0, 0))
            st = p.stage  # an unresponsive or stalled endpoint is not counted as up
            reached = st in WORKER_STAGES and WORKER_STAGES.index(st) >= WORKER_STAGES.index("http_up")
            out[p.role] = (up + int(reached), total + 1)
        return out

    def readiness(self) -> str:
        """srtctl-style summary, e.g. '2/2P 1/1D router ready'."""
        counts = self.role_counts()
        letters = {"prefill": "P", "decode": "D", "worker": "W"}
        parts = [f"{up}/{n}{letters.get(role, role)}" for role, (up, n) in counts.items()]
        router = self.procs.get("router")
        if router is not None:
            word = {"serving": "router serving", "http_up": "router ready", "failed": "router failed",
                    "unresponsive": "router unresponsive", "stalled": "router stalled",
                    "stopped": "router stopped"}.get(router.stage, f"router {router.stage.replace('_', ' ')}")
            parts.append(word)
        return " ".join(parts)


def new_state(run_id: str, procs: list[tuple[str, str, str]], cells: list[dict],
              pairs: list[tuple[str, str]]) -> RunState:
    """A fresh state for a run's processes (name, role, node), barrier cells and P/D pairs."""
    s = RunState(run_id)
    for name, role, node in procs:
        s.procs[name] = ProcState(name, role, node)
    for c in cells:
        cell = CellState(c["node"], c["host"], c["port"], c["role"], c["kind"], c.get("owner"))
        s.cells[cell.key] = cell
    for p, d in pairs:
        s.pairs[f"{p}>{d}"] = PairState(p, d)
    return s


def fresh_state(run_id: str, plan: Plan, processes: list[ProcessSpec]) -> RunState:
    """The state of a run of `plan` before anything happened: every process pending, every barrier cell, every
    prefill->decode pair."""
    cells = [{"node": c.node, "host": c.host, "port": c.port, "role": c.role, "kind": c.kind, "owner": c.owner}
             for c in plan.barrier]
    pairs = [(p.name, d.name) for p in plan.role_endpoints("prefill") for d in plan.role_endpoints("decode")]
    return new_state(run_id, [(p.name, p.role, p.node) for p in processes], cells, pairs)


def replay(state: RunState, lines: list[str]) -> RunState:
    for line in lines:
        line = line.strip()
        if line:
            try:
                state.apply(Event.from_json(line))
            except (ValueError, KeyError):
                continue  # a torn last line after a crash: skip it, keep the rest
    return state


def jsonable(obj: Any) -> Any:
    """The state as plain JSON (for `atomdeck status --json`)."""
    if isinstance(obj, deque):
        return list(obj)
    if hasattr(obj, "__dataclass_fields__"):
        return {k: jsonable(v) for k, v in asdict(obj).items()}
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj
