"""The run directory: the truth about a run, readable by any later atomdeck session.

$XDG_STATE_HOME/atomdeck/runs/<run-id>/ (0700): run.json, recipe.yaml, cluster.yaml, plan.json,
commands.sh (secrets redacted), selection.json, events.jsonl (append-only), procs/<name>.json
(how to find each process again), logs/ (local and Slurm logs; mirrors of SSH logs), and a lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import socket
import time
from pathlib import Path

from ..config.errors import AtomdeckError
from ..config.paths import runs_dir
from ..launch.base import ProcHandle
from .events import Event


def new_run_id(recipe: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", recipe).strip("-")[:32] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class RunDir:
    """One run's directory. Writes are private (0600 files in a 0700 directory)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.id = self.path.name

    # --- creation and lookup ------------------------------------------------------------------------
    @staticmethod
    def create(run_id: str) -> RunDir:
        root = runs_dir()
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = root / run_id
        path.mkdir(mode=0o700)
        for sub in ("procs", "logs"):
            (path / sub).mkdir(mode=0o700)
        return RunDir(path)

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
    def write_json(self, name: str, data) -> None:
        target = self.path / name
        tmp = target.with_name(f".{target.name}.tmp")
        _write_private(tmp, json.dumps(data, indent=2, default=str))
        os.replace(tmp, self.path / name)

    def read_json(self, name: str):
        try:
            return json.loads((self.path / name).read_text())
        except FileNotFoundError:
            raise AtomdeckError(f"run {self.id} has no {name}; the run directory {self.path} is incomplete") \
                from None
        except ValueError as e:
            raise AtomdeckError(f"run {self.id}: {name} is damaged ({e})") from None

    def write_text(self, name: str, text: str) -> None:
        _write_private(self.path / name, text)

    def read_text(self, name: str) -> str:
        return (self.path / name).read_text()

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
        out = []
        for p in sorted((self.path / "procs").glob("*.json")):
            try:
                out.append(ProcHandle.from_json(json.loads(p.read_text())))
            except (ValueError, TypeError):
                continue
        return out

    def log_path(self, name: str) -> Path:
        return self.path / "logs" / f"{name}.log"

    # --- events ---------------------------------------------------------------------------------------
    def append_events(self, events: list[Event]) -> None:
        if not events:
            return
        data = "".join(e.to_json() + "\n" for e in events)
        fd = os.open(self.path / "events.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)

    def event_lines(self) -> list[str]:
        try:
            return (self.path / "events.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []

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
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
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
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
