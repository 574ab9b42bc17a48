"""The server's side of ATOM's process tree (proctree.py has the sources): the API server starts its EngineCores,
learns their ranks, notices an EngineCore that ends under it, and closes them all when it stops
(engine_core_mgr.py ``CoreManager``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable

from .proctree import CORES_GRACE_S, Rank, _current, exitcode, fork_process, run_engine


class EngineTree:
    """The server's view of its EngineCores: starts them, learns their ranks, notices a death, closes them."""

    def __init__(self, tp: int, dp: int, rev: str, setsid_rank: str | None = None):
        self.tp, self.dp, self.rev, self.setsid_rank = tp, dp, rev, setsid_rank
        self.cores: dict[int, int] = {}          # pid -> dp rank
        self.ranks: dict[int, str] = {}          # pid -> title (TP3, DP1TP0)
        self.closing = False
        self._ready: list[int] = []
        self._inputs: dict[int, int] = {}        # dp rank -> the write end of its EngineCore's input
        _current.append(self)

    def start_core(self, dp_rank: int) -> int:
        """CoreManager: one EngineCore process for this DP rank (it starts its ranks itself)."""
        r, w = os.pipe()
        ir, iw = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # nothing buffered may be written twice
            with contextlib.suppress(ValueError, OSError):
                stream.flush()
        pid = fork_process(run_engine, dp_rank, self.tp, self.dp, self.rev, os.getpid(), (r, w, ir),
                           self.setsid_rank)
        os.close(w)
        os.close(ir)
        self._inputs[dp_rank] = iw
        self.cores[pid] = dp_rank
        self._ready.append(r)
        return pid

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Read each EngineCore's ranks (the real ones send READY once their model runners are up)."""
        deadline = time.monotonic() + timeout
        for fd in self._ready:
            data = b""
            while not data.endswith(b"\n") and time.monotonic() < deadline:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
            os.close(fd)
            with contextlib.suppress(ValueError):
                info = json.loads(data or b"{}")
                self.ranks.update({int(p): t for p, t in info.get("ranks", {}).items()})
        self._ready = []

    def rank_pid(self, spec: str) -> int | None:
        for pid, title in self.ranks.items():
            dp_rank = int(title[2:title.index("TP")]) if title.startswith("DP") else 0
            tp_rank = int(title[title.index("TP") + 2:])
            if Rank(dp_rank, tp_rank, self.tp, self.dp).matches(spec):
                return pid
        return None

    def hang(self, spec: str) -> str | None:
        """``ATOMSIM_RANK_HANG``: the next step of the named rank's EngineCore never finishes (that rank blocks in a
        receive, the others in the collective). Returns the rank's title, or None if no rank has that name."""
        for title in self.ranks.values():
            dp_rank = int(title[2:title.index("TP")]) if title.startswith("DP") else 0
            if Rank(dp_rank, int(title[title.index("TP") + 2:]), self.tp, self.dp).matches(spec):
                os.write(self._inputs[dp_rank], f"hang {title}\n".encode())
                return title
        return None

    def watch(self, on_died: Callable[[int, int], None]) -> None:
        """Call on_died(dp_rank, exitcode) when an EngineCore ends while the server is not closing it (a pidfd
        per EngineCore, read by the running event loop)."""
        import asyncio

        loop = asyncio.get_running_loop()
        for pid, dp_rank in self.cores.items():
            fd = os.pidfd_open(pid)

            def gone(fd=fd, pid=pid, dp_rank=dp_rank) -> None:
                loop.remove_reader(fd)
                os.close(fd)
                try:
                    _, status = os.waitpid(pid, 0)
                except ChildProcessError:
                    status = 0
                self.cores.pop(pid, None)
                if not self.closing:
                    on_died(dp_rank, exitcode(status))

            loop.add_reader(fd, gone)

    def close(self) -> None:
        """CoreManager.close: SIGTERM every EngineCore, one deadline for all, then SIGKILL what is left."""
        if self.closing and not self.cores:
            return
        self.closing = True
        for pid in list(self.cores):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + CORES_GRACE_S
        while self.cores and time.monotonic() < deadline:
            for pid in list(self.cores):
                with contextlib.suppress(ChildProcessError):
                    if os.waitpid(pid, os.WNOHANG)[0] == 0:
                        continue
                self.cores.pop(pid, None)
            time.sleep(0.02)
        for pid in list(self.cores):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            self.cores.pop(pid, None)


def close_all() -> None:
    """Before the server leaves on an error: its EngineCores are closed, as CoreManager's finalizer does."""
    for tree in _current:
        with contextlib.suppress(Exception):
            tree.close()
