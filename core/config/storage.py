"""When a directory atomdeck writes cannot be written (a full disk, a login node's home quota, a read-only
mount, a directory of another user): which errors those are, the filesystem the directory is on, and what to
do about each, in words an operator can act on. Used for the run directory here and for logs on the nodes."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# The errors that mean "this directory cannot take writes now", as opposed to a bug: atomdeck keeps going
# (and keeps what it could not write in memory) on these, and says so.
UNWRITABLE = {errno.ENOSPC: "no space left", errno.EDQUOT: "disk quota exceeded", errno.EROFS: "read-only",
              errno.EACCES: "permission denied", errno.EPERM: "not permitted", errno.EIO: "I/O error",
              errno.EFBIG: "file too large"}


def unwritable(e: BaseException) -> bool:
    """An error that says the directory cannot be written (full, over quota, read-only, not ours)."""
    return isinstance(e, OSError) and e.errno in UNWRITABLE


def spill_root() -> Path:
    """Where what a run directory could not take is kept: $TMPDIR/atomdeck-UID/unsaved (another filesystem than a
    home's or a state directory's, in most places), one directory per run."""
    return Path(tempfile.gettempdir()) / f"atomdeck-{os.getuid()}" / "unsaved"


def private_dir(path: Path) -> bool:
    """Make `path` (and its parents under the spill root) as 0700 directories of this user; False if it is not
    ours (a /tmp another user made first, a symlink): then nothing is spilled there."""
    try:
        for p in (path.parent.parent, path.parent, path):  # atomdeck-UID/, unsaved/, the run's
            try:
                os.mkdir(p, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(p)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                return False
            if stat.S_IMODE(st.st_mode) != 0o700:
                os.chmod(p, 0o700)
        return True
    except OSError:
        return False


def mount_point(path: str | Path) -> str:
    """The mount point of the filesystem `path` is on (its nearest existing ancestor's, when it is gone)."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        dev = p.stat().st_dev
        while p != p.parent and p.parent.stat().st_dev == dev:
            p = p.parent
    except OSError:
        pass
    return str(p)


def fs_type(mount: str) -> str:
    """tmpfs, ext4, nfs4, ... from /proc/self/mounts ('' where it cannot be told)."""
    try:
        with open("/proc/self/mounts") as f:
            found = ""
            for line in f:
                parts = line.split()
                if len(parts) > 2 and parts[1].replace("\\040", " ") == mount:
                    found = parts[2]  # the last mount on a point is the one seen
            return found
    except OSError:
        return ""


def free_bytes(path: str | Path) -> int | None:
    """Bytes this user may still write on the filesystem of `path` (quotas are not counted: statvfs cannot
    see them)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def size_words(n: int | None) -> str:
    if n is None:
        return "free space unknown"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit} free"
    return f"{n} bytes free"


def fix_words(code: int | None, directory: str, mount: str) -> str:
    """What the operator can do about this error on this directory."""
    if code == errno.EDQUOT:
        return f"the disk quota on {mount} is used up (`quota -s`): free space within it"
    if code == errno.EROFS:
        return f"{mount} is mounted read-only: remount it read-write"
    if code in (errno.EACCES, errno.EPERM):
        return f"this user cannot write {directory}: check its owner and mode (`ls -ld {directory}`)"
    if code == errno.EIO:
        return f"the disk under {mount} reports I/O errors: check it (`dmesg`)"
    return f"free space on {mount} (`df -h {mount}`)"


@dataclass
class Unwritable:
    """A directory found unwritable: where, since when, why. `not_saved` names what waits (what -> words)."""

    directory: str
    mount: str
    fstype: str
    code: int | None
    reason: str  # the OS's words: "No space left on device"
    since: float = field(default_factory=time.time)
    not_saved: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def of(directory: str | Path, e: OSError) -> Unwritable:
        mount = mount_point(directory)
        return Unwritable(str(directory), mount, fs_type(mount), e.errno, e.strerror or str(e))

    @property
    def code_name(self) -> str:
        return errno.errorcode.get(self.code or 0, "error")

    def where(self) -> str:
        fs = f"{self.mount} ({self.fstype}, {size_words(free_bytes(self.mount))})" if self.fstype else \
            f"{self.mount} ({size_words(free_bytes(self.mount))})"
        return f"{self.directory} on the filesystem {fs}"

    def since_words(self) -> str:
        return time.strftime("%H:%M:%S", time.localtime(self.since))
