"""A real small filesystem for the tests of a full disk (issue 44): a tmpfs this test mounts and unmounts (root,
as CI runs), filled with a file until the kernel says ENOSPC. No mock: every write atomdeck makes meets the
same error a full home directory gives."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(where: Path, size: str = "16m") -> Iterator[Path]:
    """Mount a tmpfs of `size` at `where` (made here) for the block; unmounted (lazily, if a process still holds
    a file there) whatever happens. Skips when not root: mounting needs it."""
    if os.geteuid() != 0:
        pytest.skip("a real full filesystem needs a tmpfs mount: run as root (CI does)")
    where.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], check=False)


def fill(fs: Path, leave: int = 0) -> Path:
    """Write a file on `fs` until the filesystem is full (then give back `leave` bytes). Returns the file."""
    path = fs / "filler"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        chunk = b"\0" * 65536
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 4096:
                    break
                chunk = b"\0" * 4096
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return path
