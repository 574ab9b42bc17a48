"""An action on one process of a live run (restart, remove, add: issue 38), as the run directory records it while it
runs: `actions/NAME.json` says what is being done, by whom and at which step; `actions/NAME.lock` is held (flock)
by the session doing it for as long as it does.

Every session learns from these files, whoever acts: a second action on the same process is refused naming the
first; a watcher that sees the process end while an action stops it calls that a stop, not a crash, and waits for
the new process; a console shows the step; and a record whose lock nobody holds is an action cut short (its
session was killed), which a later session can finish or roll back.

The JSON is replaced whole (written beside it, then renamed); the lock file is never replaced, so the lock holds
across the updates. A directory that cannot be written (a full disk) costs the record, never the action.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config.errors import AtomdeckError

DIR = "actions"
ENDS = ("done", "failed", "interrupted", "rolled back")  # = events.ACTION_ENDS
# steps during which the process is stopped on purpose: a watcher that sees it end then says "stopped"
STOPPING_STEPS = frozenset({"stopping", "stopped", "starting", "loading"})


@dataclass
class Intent:
    id: str
    kind: str            # restart | remove | add
    target: str          # the process (add: the new process's name)
    source: str          # "console on HOST (pid N)" | "CLI on HOST (pid N)"
    started: float
    step: str = "requested"
    detail: str = ""
    since: float = 0.0
    pid: int = 0
    host: str = ""
    spec: dict = field(default_factory=dict)   # what is started: argv/env edited, an added process's design
    before: dict = field(default_factory=dict)  # what rollback puts back (e.g. the router id it was removed as)
    stopping_pid: int = 0  # the process it stops on purpose (a new one it started ending is not a stop)
    held: bool = True    # read back: a live session holds its lock

    @property
    def ended(self) -> bool:
        return self.step in ENDS

    @property
    def cut_short(self) -> bool:
        """Its session went away mid-way: nobody holds it and it did not end."""
        return not self.held and not self.ended

    def words(self) -> str:
        since = time.strftime("%H:%M:%S", time.localtime(self.started))
        return f"{self.kind} of {self.target} by {self.source}, since {since}"


def how_to_finish(run_id: str, it: Intent) -> str:
    """The commands that finish or undo an action cut short (an add is undone; finishing it is adding again)."""
    if it.kind == "add":
        return f"undo it with `atomdeck remove {run_id} {it.target} --rollback`"
    return (f"finish it with `atomdeck {it.kind} {run_id} {it.target} --resume` or undo it with "
            f"`atomdeck {it.kind} {run_id} {it.target} --rollback`")


class ActionBusy(AtomdeckError):
    """Another action on the same process is running (or was cut short and waits to be finished or rolled
    back): it is named."""

    def __init__(self, other: Intent, run_id: str = "RUN"):
        self.other = other
        if other.cut_short:
            super().__init__(f"{other.target}: {other.words()} was cut short at step {other.step} (its session "
                             f"is gone); {how_to_finish(run_id, other)}")
        else:
            super().__init__(f"{other.target} is busy: {other.words()} (step: {other.step}); wait for it to end, "
                             f"or see it with `atomdeck status`")


def source(kind: str) -> str:
    """Who acts, in words: the console or the CLI, on which host, which process."""
    return f"{kind} on {socket.gethostname()} (pid {os.getpid()})"


class ActionLock:
    """This session's hold on one process of the run while it acts on it."""

    def __init__(self, run_dir: Path, intent: Intent):
        self.dir = run_dir / DIR
        self.intent = intent
        self._fd: int | None = None

    def acquire(self, take_over: bool = False) -> ActionLock:
        """Take the process's lock, or raise ActionBusy naming the action that holds it, or that was cut short
        and waits to be finished or rolled back (`take_over`: this session does that, and may)."""
        with contextlib.suppress(OSError):
            self.dir.mkdir(mode=0o700, exist_ok=True)
        earlier = read(self.dir.parent, self.intent.target)  # (before our lock: `held` then says another's)
        try:
            fd = os.open(self.dir / f"{self.intent.target}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            raise AtomdeckError(f"cannot record the {self.intent.kind} of {self.intent.target} in {self.dir}: {e}; "
                                f"nothing was done") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            other = read(self.dir.parent, self.intent.target)
            raise ActionBusy(other or Intent("?", "action", self.intent.target, "another session", 0.0),
                             self.dir.parent.name) from None
        if earlier is not None and earlier.cut_short and not take_over:
            os.close(fd)
            raise ActionBusy(earlier, self.dir.parent.name)
        self._fd = fd
        self.intent.pid, self.intent.host = os.getpid(), socket.gethostname()
        self.write()
        return self

    def step(self, step: str, detail: str = "") -> None:
        self.intent.step, self.intent.detail, self.intent.since = step, detail, time.time()
        self.write()

    def write(self) -> None:
        path = self.dir / f"{self.intent.target}.json"
        data = asdict(self.intent)
        data.pop("held", None)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except OSError:  # a full disk: the action goes on, its record stays what it was
            with contextlib.suppress(OSError):
                tmp.unlink()

    def release(self, outcome: str | None = None, detail: str = "") -> None:
        """End the hold, the record saying how the action ended (done, failed, rolled back): every session
        reads the end from it. Without an outcome (the session is going away mid-way) the record stays as it
        was, unheld: an action cut short."""
        if outcome is not None:
            self.step(outcome, detail)
        if self._fd is not None:
            os.close(self._fd)  # (closing drops the flock)
            self._fd = None


def read(run_dir: Path, target: str) -> Intent | None:
    """The record of the action on `target`, if one runs or was cut short (`held` says which)."""
    path = run_dir / DIR / f"{target}.json"
    try:
        data = json.loads(path.read_text())
        intent = Intent(**{k: v for k, v in data.items() if k in Intent.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None
    intent.held = _held(run_dir / DIR / f"{target}.lock")
    return intent


def read_all(run_dir: Path) -> dict[str, Intent]:
    out: dict[str, Intent] = {}
    try:
        names = [p.stem for p in (run_dir / DIR).glob("*.json")]
    except OSError:
        return out
    for name in names:
        intent = read(run_dir, name)
        if intent is not None:
            out[name] = intent
    return out


def _held(lock: Path) -> bool:
    """Whether a live session holds this lock (taking it shared for a moment tells)."""
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def expected_exit(run_dir: Path, target: str, pid: int | None = None) -> Intent | None:
    """The action that is stopping `target` on purpose, if one is (its exit is then a stop, not a crash). With
    `pid`: only when that is the process the action stops (the one it started in its place may still fail)."""
    intent = read(run_dir, target)
    if intent is not None and intent.held and intent.step in STOPPING_STEPS:
        if pid is None or not intent.stopping_pid or intent.stopping_pid == pid:
            return intent
    return None
