"""What a run directory could not take (a full disk, a quota, a read-only mount): kept, never lost.

Events and files that could not be written wait in memory (bounded: past MAX_HELD events the oldest are
dropped and counted), are retried at the next write and at a tick, and when this atomdeck ends with some still
waiting they go to a spill directory on another filesystem ($TMPDIR/atomdeck-UID/unsaved/RUN), which every
later session reads as an overlay (so `atomdeck runs` says `stopped` after a `down` on a full disk) and writes
into the run directory once it can. One `Unsaved` per directory per process: every RunDir of a path shares it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import deque
from pathlib import Path

from ..config.storage import Unwritable, private_dir, spill_root, unwritable

MAX_HELD = 20000  # events held in memory per run directory (~200 bytes each)
RETRY_S = 1.0  # at most one write attempt a second while the directory is unwritable (every emit would try)
SPILL_EVENTS = "events.jsonl"

_lock = threading.Lock()  # handle files are written from a thread (Run._save_started)
_by_path: dict[str, Unsaved] = {}


def unsaved_for(path: Path) -> Unsaved:
    key = os.path.abspath(path)
    with _lock:
        u = _by_path.get(key)
        if u is None:
            u = _by_path[key] = Unsaved(Path(key))
        return u


class Unsaved:
    def __init__(self, directory: Path):
        self.directory = directory
        self.trouble: Unwritable | None = None
        self.events: deque[str] = deque()
        self.dropped = 0
        self.files: dict[str, str] = {}  # name in the run directory -> its whole text
        self.last_try = 0.0
        self.last_ok = -1e9  # when the directory last took a write (time.monotonic)
        self.written_again: Unwritable | None = None  # the last episode, once everything was written
        self.spill = spill_root() / directory.name
        self.spill_seen = self.spill.is_dir()  # looked at once, and again by `spilled` at a tick (forced flush)

    # --- what waits -------------------------------------------------------------------------------------------
    def note(self, e: OSError, what: str) -> None:
        if self.trouble is None:
            self.trouble = Unwritable.of(self.directory, e)
            self.written_again = None
        self.trouble.not_saved[what] = what

    def hold_events(self, lines: list[str]) -> None:
        self.events.extend(lines)
        over = len(self.events) - MAX_HELD
        for _ in range(max(0, over)):
            self.events.popleft()
        self.dropped += max(0, over)

    def waiting(self) -> bool:
        return bool(self.events or self.files or self.dropped or self.spilled())

    def due(self, force: bool) -> bool:
        """Time to try writing what waits (at most once per RETRY_S unless forced)."""
        if not self.waiting():
            return False
        now = time.monotonic()
        if force or now - self.last_try >= RETRY_S:
            self.last_try = now
            return True
        return False

    # --- the spill directory (another filesystem) ---------------------------------------------------------
    def spilled(self) -> bool:
        return self.spill_seen

    def spilled_lines(self) -> list[str]:
        if not self.spill_seen:
            return []
        try:
            return (self.spill / SPILL_EVENTS).read_text().splitlines()
        except OSError:
            return []

    def spilled_file(self, name: str) -> str | None:
        if not self.spill_seen:
            return None
        try:
            return (self.spill / "files" / name).read_text()
        except OSError:
            return None

    def spilled_files(self) -> dict[str, str]:
        root = self.spill / "files"
        out: dict[str, str] = {}
        if self.spill_seen and root.is_dir():
            for p in sorted(root.rglob("*")):
                if p.is_file():
                    try:
                        out[str(p.relative_to(root))] = p.read_text()
                    except OSError:
                        continue
        return out

    def to_spill(self) -> str:
        """Move what waits in memory to the spill directory (this atomdeck is ending). Returns words for the
        operator: where it went, or that it is lost and how much."""
        if not (self.events or self.files or self.dropped):
            return ""
        n, names = len(self.events), sorted(self.files)
        lines = list(self.events)
        if self.dropped:
            lines.append(_dropped_note(self.dropped))
        try:
            if not private_dir(self.spill):
                raise PermissionError(f"{self.spill} is not a private directory of this user")
            if lines:
                append_whole_lines(self.spill / SPILL_EVENTS, "".join(line + "\n" for line in lines).encode())
            for name, text in self.files.items():
                target = self.spill / "files" / name
                for d in reversed(target.relative_to(self.spill).parents[:-1]):  # files/, files/procs/
                    (self.spill / d).mkdir(mode=0o700, exist_ok=True)
                _write_whole(target, text)
        except OSError as e:
            self.events.clear()
            self.files.clear()
            return (f"{n} event(s) and {len(names)} file(s) ({', '.join(names) or 'none'}) of this session could not "
                    f"be written to {self.directory} nor kept in {self.spill} ({e}); they are lost")
        self.events.clear()
        self.files.clear()
        self.dropped = 0
        self.spill_seen = True
        what = ([f"{n} event(s)"] if n else []) + names
        return (f"{', '.join(what)} of this session kept in {self.spill}: the next atomdeck that finds room in "
                f"{self.directory} writes them there")

    def drop_spilled_file(self, name: str) -> None:
        if self.spill_seen:
            try:
                (self.spill / "files" / name).unlink()
            except OSError:
                pass

    def clear_spill(self) -> None:
        self.spill_seen = False
        shutil.rmtree(self.spill, ignore_errors=True)


def _write_whole(path: Path, text: str) -> None:
    """Write a file so that it is whole or absent: a temporary beside it, then a rename. A failed write leaves
    no temporary behind (on a full disk it would hold the last free blocks)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _dropped_note(n: int) -> str:
    return json.dumps({"kind": "note", "name": "", "value": "", "data": {"dropped": n}, "t": time.time(),
                       "detail": f"{n} event(s) were dropped while the run directory could not be written (more than "
                                 f"{MAX_HELD} waited in memory)"}, separators=(",", ":"))


def append_whole_lines(path: Path, data: bytes) -> None:
    """Append complete lines to a file shared with other atomdeck sessions (under an exclusive lock): a torn last
    line (a crash, an older build that hit a full disk) is cut back to the last newline first, and a write that
    fails part-way is cut back to where it began, so the file only ever ends with a whole line."""
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            size = _last_newline_end(fd, size)
            os.ftruncate(fd, size)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except OSError:
            try:
                os.ftruncate(fd, size)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)  # closing drops the lock


def _last_newline_end(fd: int, size: int) -> int:
    """The size the file has when cut just after its last newline (0 when it has none)."""
    end = size
    while end > 0:
        start = max(0, end - 65536)
        chunk = os.pread(fd, end - start, start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        end = start
    return 0


__all__ = ["MAX_HELD", "Unsaved", "append_whole_lines", "unsaved_for", "unwritable"]
