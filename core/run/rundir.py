"""The run directory: the truth about a run, readable by any later atomdeck session.

$XDG_STATE_HOME/atomdeck/runs/<run-id>/ (0700): run.json, recipe.yaml, cluster.yaml, plan.json,
commands.sh (secrets redacted), selection.json, events.jsonl (append-only), procs/<name>.json
(how to find each process again), logs/ (local and Slurm logs; mirrors of SSH logs), and a lock.

A directory that cannot be written (full, over quota, read-only) stops nothing: what could not be written is
kept (unsaved.py) and read back as if written, the run is told once (a `storage` event), and it is written
when the directory can take it. Only a new run refuses to start in it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import time
from pathlib import Path

from ..config.errors import AtomdeckError
from ..config.paths import runs_dir
from ..config.storage import Unwritable, fix_words, unwritable
from ..launch.base import ProcHandle
from .events import Event, RunState
from .unsaved import Unsaved, _dropped_note, _write_whole, append_whole_lines, unsaved_for

RUNDIR = "run directory"  # its key in RunState.storage (a node's log directory is keyed "NODE:PATH")
PROBE_EVERY_S = 4.0  # a directory that took a write this recently is not probed
PROBE_BYTES = 4096  # a probe write: a page on tmpfs, a block on ext4 (delayed allocation still reserves it)


class StorageError(AtomdeckError):
    """A new run cannot be given a directory it can write: nothing was launched."""


def new_run_id(recipe: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", recipe).strip("-")[:32] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def _fix(t: Unwritable) -> str:
    return f"{fix_words(t.code, t.directory, t.mount)}, or point XDG_STATE_HOME at a filesystem with room"


def _probe(directory: Path) -> None:
    """Write PROBE_BYTES into `directory` and remove them: raises what a real write would."""
    probe = directory / f".probe-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, b"\0" * PROBE_BYTES)
        finally:
            os.close(fd)
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass


class RunDir:
    """One run's directory. Writes are private (0600 files in a 0700 directory)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.id = self.path.name
        self.unsaved: Unsaved = unsaved_for(self.path)

    @property
    def trouble(self) -> Unwritable | None:
        """Why the directory cannot be written, since when (None: it can)."""
        return self.unsaved.trouble

    # --- creation and lookup ------------------------------------------------------------------------
    @staticmethod
    def create(run_id: str) -> RunDir:
        root = runs_dir()
        path = root / run_id
        try:
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
            path.mkdir(mode=0o700)
            for sub in ("procs", "logs", "specs"):
                (path / sub).mkdir(mode=0o700)
            _probe(path)
        except OSError as e:
            if not unwritable(e):
                raise
            shutil.rmtree(path, ignore_errors=True)
            t = Unwritable.of(root, e)
            raise StorageError(f"cannot make a run directory in {t.where()}: {t.reason}; nothing was launched. "
                               f"Fix: {_fix(t)}") from None
        return RunDir(path)

    def require_saved(self) -> None:
        """Before the first process starts: what a later session needs to find the run (run.json, the recipe,
        the cluster, the selection, the inventory) is on disk, or the launch stops here, its directory removed."""
        t = self.trouble
        if t is None:
            return
        waiting = sorted(self.unsaved.files)
        shutil.rmtree(self.path, ignore_errors=True)
        self.unsaved.files.clear()
        self.unsaved.events.clear()
        self.unsaved.trouble = None
        raise StorageError(f"the run directory {t.where()} could not be written ({t.reason}: "
                           f"{', '.join(waiting) or 'its files'}); nothing was launched. Fix: {_fix(t)}")

    @staticmethod
    def find(run_id: str | None) -> RunDir:
        """A run by id (or unique prefix); None means the newest."""
        root = runs_dir()
        runs = sorted(p for p in root.glob("*") if (p / "run.json").is_file()) if root.is_dir() else []
        if not runs:
            raise AtomdeckError(f"no runs in {root}; start one with `atomdeck up RECIPE`")
        if run_id is None:
            return RunDir(max(runs, key=lambda p: p.stat().st_mtime))
        exact = [p for p in runs if p.name == run_id]
        matches = exact or [p for p in runs if p.name.startswith(run_id) or p.name.endswith(run_id)]
        if len(matches) == 1:
            return RunDir(matches[0])
        if not matches:
            raise AtomdeckError(f"no run '{run_id}' in {root}; `atomdeck runs` lists them")
        raise AtomdeckError(f"'{run_id}' matches {len(matches)} runs: {', '.join(p.name for p in matches[:5])}")

    @staticmethod
    def all() -> list[RunDir]:
        root = runs_dir()
        if not root.is_dir():
            return []
        return [RunDir(p) for p in sorted(root.iterdir()) if (p / "run.json").is_file()]

    # --- files ----------------------------------------------------------------------------------------
    def write_json(self, name: str, data) -> bool:
        return self._write(name, json.dumps(data, indent=2, default=str))

    def _write(self, name: str, text: str) -> bool:
        """Write a whole file (whole or not at all). False: the directory cannot take it now; the text is
        kept and read back as the file's (read_json, read_text) until it is written."""
        u = self.unsaved
        try:
            _write_whole(self.path / name, text)
        except OSError as e:
            if not unwritable(e):
                raise
            u.files[name] = text
            u.note(e, name)
            return False
        u.files.pop(name, None)
        u.last_ok = time.monotonic()
        u.drop_spilled_file(name)  # an older copy kept elsewhere must never come back over this one
        return True

    def _text(self, name: str) -> str:
        kept = self.unsaved.files.get(name)
        if kept is None:
            kept = self.unsaved.spilled_file(name)
        return kept if kept is not None else (self.path / name).read_text()

    def read_json(self, name: str):
        try:
            return json.loads(self._text(name))
        except FileNotFoundError:
            raise AtomdeckError(f"run {self.id} has no {name}; the run directory {self.path} is incomplete") \
                from None
        except ValueError as e:
            raise AtomdeckError(f"run {self.id}: {name} is damaged ({e})") from None

    def write_text(self, name: str, text: str) -> bool:
        return self._write(name, text)

    def read_text(self, name: str) -> str:
        return self._text(name)

    def meta(self) -> dict:
        return self.read_json("run.json")

    def update_meta(self, **changes) -> None:
        m = self.meta()
        m.update(changes)
        self.write_json("run.json", m)

    @staticmethod
    def initial_meta(run_id: str, recipe: str, cluster: str, launcher: str) -> dict:
        return {"id": run_id, "recipe": recipe, "cluster": cluster, "launcher": launcher,
                "created": time.time(), "console_host": socket.gethostname(), "console_pid": os.getpid(),
                "status": "launching"}

    # --- processes ------------------------------------------------------------------------------------
    def save_handle(self, h: ProcHandle) -> None:
        self.write_json(f"procs/{h.name}.json", h.to_json())

    def save_handles(self, handles: list[ProcHandle]) -> None:
        """A file per process (Run.launch writes them in a thread): what any later session finds them by."""
        for h in handles:
            self.save_handle(h)

    def handles(self) -> list[ProcHandle]:
        """Every process's handle file, with those still waiting to be written (in memory or spilled)."""
        texts: dict[str, str] = {}
        for p in sorted((self.path / "procs").glob("*.json")):
            try:
                texts[f"procs/{p.name}"] = p.read_text()
            except OSError:
                continue
        kept = {**self.unsaved.spilled_files(), **self.unsaved.files}
        texts.update({k: v for k, v in kept.items() if k.startswith("procs/")})
        out = []
        for _, text in sorted(texts.items()):
            try:
                out.append(ProcHandle.from_json(json.loads(text)))
            except (ValueError, TypeError):
                continue
        return out

    def handle(self, name: str) -> ProcHandle | None:
        """One process's handle as saved now (a restart writes a new one)."""
        return next((h for h in self.handles() if h.name == name), None)

    def log_path(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    # --- events ---------------------------------------------------------------------------------------
    def append_events(self, events: list[Event]) -> None:
        """Append whole lines. When the directory cannot take them they wait, in order, behind any that
        already wait, and go with them at the next attempt (at most one a second, or at a tick: `flush`)."""
        if not events:
            return
        lines = [e.to_json() for e in events]
        u = self.unsaved
        if u.waiting():
            u.hold_events(lines)
            self.flush()
            return
        try:
            append_whole_lines(self.path / "events.jsonl", "".join(line + "\n" for line in lines).encode())
        except OSError as e:
            if not unwritable(e):
                raise
            u.hold_events(lines)
            u.note(e, "events.jsonl")
            return
        u.last_ok = time.monotonic()

    def event_lines(self) -> list[str]:
        """The events file, then what waits to be written into it (spilled by an earlier session, then here)."""
        try:
            lines = (self.path / "events.jsonl").read_text().splitlines()
        except FileNotFoundError:
            lines = []
        u = self.unsaved
        return lines + u.spilled_lines() + list(u.events)

    # --- when the directory cannot be written ----------------------------------------------------------------
    def flush(self, force: bool = False) -> bool:
        """Write what waits (files, then events; an earlier session's spill first). True once nothing waits
        and the directory took it; False while it still cannot. Without `force`, at most once per second."""
        u = self.unsaved
        if force:  # another session (a `down` meanwhile) may have left what it could not write
            u.spill_seen = u.spill.is_dir()
        if not u.waiting():
            if u.trouble is not None and force:
                return self.probe() is None
            return u.trouble is None
        if not u.due(force):
            return False
        spilled = u.spilled_lines()
        lines = spilled + list(u.events) + ([_dropped_note(u.dropped)] if u.dropped else [])
        try:
            for name, text in {**u.spilled_files(), **u.files}.items():
                (self.path / name).parent.mkdir(mode=0o700, exist_ok=True)  # bench/ of a bench kept elsewhere
                _write_whole(self.path / name, text)
            if lines:
                append_whole_lines(self.path / "events.jsonl", "".join(line + "\n" for line in lines).encode())
        except OSError as e:
            if not unwritable(e):
                raise
            u.note(e, "events.jsonl" if lines else next(iter(u.files), "files"))
            return False
        u.written_again = u.trouble
        if u.written_again is not None:
            u.written_again.not_saved = {"written": f"{len(lines)} event(s)"}
        u.trouble = None
        u.events.clear()
        u.files.clear()
        u.dropped = 0
        u.clear_spill()
        return True

    def probe(self) -> Unwritable | None:
        """Can the directory be written now? A small real write tells (a full disk, a quota, a read-only mount
        may each say nothing until a write), so a session with nothing to write yet still knows."""
        u = self.unsaved
        if u.waiting():
            self.flush(force=True)
            return u.trouble
        now = time.monotonic()
        if u.trouble is None and now - u.last_ok < PROBE_EVERY_S:
            return None  # it took a write (or a probe) a moment ago
        u.last_ok = now
        try:
            _probe(self.path)
        except OSError as e:
            if not unwritable(e):
                raise
            if u.trouble is None:
                u.note(e, "")
            return u.trouble
        if u.trouble is not None:
            u.written_again, u.trouble = u.trouble, None
            u.written_again.not_saved = {"written": "nothing waited"}
        return None

    def close(self) -> str:
        """This atomdeck is ending: a last attempt, then what still waits goes to the spill directory (another
        filesystem). Returns words for the operator ('' when everything was written)."""
        if self.flush(force=True):
            return ""
        return self.unsaved.to_spill()

    def news(self, state: RunState) -> Event | None:
        """A `storage` event when the directory's state differs from what the run state says: it could not be
        written (where, since when, what waits, the fix), or it is written again (what was written)."""
        u = self.unsaved
        said = state.storage.get(RUNDIR)
        t = u.trouble
        if t is not None and not said:
            return Event("storage", RUNDIR, "unwritable", self.trouble_words(), data={"directory": str(self.path),
                         "mount": t.mount, "since": t.since, "errno": t.code_name})
        if t is None and said:
            done = u.written_again
            what = done.not_saved.get("written", "everything that waited") if done else "everything that waited"
            since = f" (unwritable since {done.since_words()})" if done else ""
            return Event("storage", RUNDIR, "ok", f"the run directory {self.path} is written again{since}: "
                         f"{what} written", data={"directory": str(self.path)})
        return None

    def trouble_words(self) -> str:
        """Once, plainly: which directory, which filesystem, since when, what is not saved, how to fix it."""
        t = self.trouble
        if t is None:
            return ""
        return (f"the run directory {t.where()} cannot be written since {t.since_words()} ({t.reason}): the run's "
                f"events, status (run.json) and handle files are kept in memory by this atomdeck and written when "
                f"the directory takes them (left in {self.unsaved.spill} if it ends first); the run's processes "
                f"go on, but log lines they write into {self.path / 'logs'} are lost meanwhile. Fix: {_fix(t)}")

    def waiting_words(self) -> str:
        """What waits right now ('' when nothing): counts, names, what was dropped."""
        u = self.unsaved
        parts = []
        if u.events:
            parts.append(f"{len(u.events)} event(s)")
        parts += sorted(u.files)
        if u.dropped:
            parts.append(f"{u.dropped} event(s) dropped (more than the {len(u.events)} kept)")
        spilled = len(u.spilled_lines())
        if spilled:
            parts.append(f"{spilled} event(s) of earlier sessions in {u.spill}")
        return ", ".join(parts)

    # --- the teardown lock ------------------------------------------------------------------------------
    def lock(self, what: str = "teardown") -> RunLock:
        return RunLock(self.path / f"{what}.lock")

    def teardown_in_progress(self) -> bool:
        """Someone holds the teardown lock right now."""
        path = self.path / "teardown.lock"
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops the lock if we took it
        return False


class RunLock:
    """An exclusive, non-blocking lock: two consoles can never tear down the same run at once."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:  # a read-only or foreign directory: an existing lock file is locked read-only;
            if not unwritable(e):  # with none, nobody else can make one either
                raise
            try:
                self.fd = os.open(self.path, os.O_RDONLY)
            except OSError:
                return self
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            try:
                holder = os.read(self.fd, 200).decode(errors="replace").strip()
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None
            raise AtomdeckError(f"another atomdeck ({holder or 'unknown'}) is already tearing this run down; "
                                "wait for it to finish") from None
        try:  # who holds it, for the refusal of a second teardown; a full disk keeps the lock without the words
            os.ftruncate(self.fd, 0)
            os.write(self.fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
        except OSError as e:
            if not unwritable(e):
                raise
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
