"""One action on a live run (issue 38) as every session sees it: its record (core/run/intents.py: the step, who,
the lock), its events in the run's log, how it ended; and what any action needs of the run."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..config.errors import AtomdeckError
from .events import Event
from .intents import ActionLock, Intent
from .watchers.base import RunHost

if TYPE_CHECKING:
    from ..config.cluster import Cluster
    from .rundir import RunDir


class Run(RunHost, Protocol):
    """What an action uses of its run (run.py's Run): a protocol, so that the watchers (the restart policy)
    can act without importing run.py, which imports them."""

    rd: RunDir
    cluster: Cluster
    watchers: Any

    async def log_lines(self, name: str, last: int | None = None) -> list[str]: ...


class ActionFailed(AtomdeckError):
    """The action could not be done; the message says at which step and why, and what was left how."""


@dataclass
class ActionResult:
    id: str
    kind: str
    target: str
    outcome: str              # done | failed | rolled back
    detail: str
    took_s: float
    steps: list[tuple[float, str, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "process": self.target, "outcome": self.outcome,
                "detail": self.detail, "took_s": round(self.took_s, 3),
                "steps": [{"t": t, "step": s, "detail": d} for t, s, d in self.steps]}


class Actor:
    """One action: its record (intent file, every session reads it), its events, and its ending."""

    def __init__(self, run: Run, kind: str, target: str, who: str, spec: dict | None = None,
                 resume: Intent | None = None):
        self.run = run
        self.t0 = time.monotonic()
        if resume is not None and resume.cut_short:  # the same action, finished by this session
            self.intent = resume
            self.intent.source = f"{resume.source}, finished by {who}"
        else:  # a new one (a retry of a failed one says so)
            retry = f" (retry of {resume.id})" if resume is not None else ""
            self.intent = Intent(uuid.uuid4().hex[:12], kind, target, who + retry, time.time(), spec=spec or {})
        self.resuming = resume is not None
        self.lock = ActionLock(run.rd.path, self.intent)
        self.steps: list[tuple[float, str, str]] = []

    def __enter__(self) -> Actor:
        self.lock.acquire(take_over=self.resuming)
        self.step("requested", f"by {self.intent.source}")
        return self

    def step(self, step: str, detail: str = "") -> None:
        self.lock.step(step, detail)
        self.steps.append((time.time(), step, detail))
        self.run.emit(Event("action", self.intent.target, step, detail,
                            {"id": self.intent.id, "kind": self.intent.kind, "source": self.intent.source}))
        if self.run.watchers.tasks:  # (a session that watches: a console's watcher process settles its own)
            self.run.watchers.settle()  # degraded while a worker is out, serving again once the action ended

    def end(self, outcome: str, detail: str) -> ActionResult:
        self.step(outcome, detail)
        self.lock.release(None)
        return ActionResult(self.intent.id, self.intent.kind, self.intent.target, outcome, detail,
                            time.monotonic() - self.t0, self.steps)

    def __exit__(self, *exc) -> None:
        self.lock.release(None)  # (already released when it ended; a crash leaves the record cut short)


def check_live(run: Run) -> None:
    """An action needs a live run."""
    if run.state.status in ("stopping", "stopped") or run.stopping:
        raise AtomdeckError(f"run {run.id} is {run.state.status}: there is nothing to act on (`atomdeck runs` "
                            f"lists the live ones)")


def check_target(run: Run, name: str) -> None:
    """An action needs a live run and a process it has."""
    check_live(run)
    if name not in run.processes or name not in run.state.procs:
        raise AtomdeckError(f"run {run.id} has no process {name}; its processes: {', '.join(run.processes)}")
    if run.state.procs[name].removed:
        raise AtomdeckError(f"{name} was removed from run {run.id}; `atomdeck add` starts a new worker")
