"""Before a launch: refuse nodes that another run launched from this machine still uses.

The ports check sees only ports already bound, and a real ATOM worker binds its server port only once its
weights are loaded, minutes after it started: a second launch onto the same nodes meanwhile passed the check and
its workers fought the first run's for the GPUs and ports. The run directories say which runs may be live and on
which nodes; whether they are is asked, not trusted (a run nobody watched keeps the last status it was given):
on this machine by the run's marker in each process's environment, over SSH by polling the run's processes on
the nodes wanted. Slurm runs are left to Slurm: a second holding job waits until the nodes are free."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from ..config.errors import AtomdeckError
from ..design.plan import Plan
from ..launch.base import Launcher, ProcHandle
from ..launch.procfs import alive, runs_marked
from .diagnose import name_ranges
from .rundir import RunDir


class RunLike(Protocol):
    """What is asked of another run: its processes' handles, and its launcher to poll them."""

    handles: dict[str, ProcHandle]
    launcher: Launcher

# every status but `stopped` (verified clean): a failed run leaves its processes for inspection, a launch cut short
# its started ones, a teardown that was not clean (`dirty`) what it could not stop
MAYBE_LIVE = ("launching", "starting", "serving", "degraded", "failed", "stopping", "dirty")
POLL_TIMEOUT_S = 10.0


async def check_nodes_free(plan: Plan, open_run: Callable[[str], RunLike]) -> None:
    """Raise naming the run, the nodes and how to stop it when a live run uses any node of `plan`. `open_run`
    opens another run by its id (`Run.open`)."""
    if plan.cluster.launcher == "slurm":
        return
    wanted = set(plan.selection.all())
    candidates = await asyncio.to_thread(_candidates, wanted)
    if not candidates:
        return
    here = await asyncio.to_thread(runs_marked) if any(m.get("launcher") == "local" for _, m, _ in candidates) \
        else {}
    alive_on = await asyncio.gather(*(_alive_on(rd, meta, nodes, open_run, here) for rd, meta, nodes in candidates))
    busy: list[str] = []
    for (rd, meta, nodes), names in zip(candidates, alive_on):
        if names:
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            busy.append(f"{name_ranges(sorted(nodes))} by run {rd.id} ({meta.get('status')}: {shown}); stop it "
                        f"first with `atomdeck down {rd.id}`")
    if busy:
        raise AtomdeckError(f"node(s) in use, nothing was launched: {'; '.join(busy)}. Or pick other nodes")


def _candidates(wanted: set[str]) -> list[tuple[RunDir, dict, set[str]]]:
    """(run directory, its run.json, the wanted nodes it holds) of every run that may be live on them."""
    out = []
    for rd in RunDir.all():
        try:
            meta = rd.meta()
            if meta.get("status") not in MAYBE_LIVE or meta.get("launcher") == "slurm":
                continue
            sel = rd.read_json("selection.json")
        except (AtomdeckError, OSError, ValueError):
            continue
        nodes = wanted & {*sel.get("prefill", ()), *sel.get("decode", ()), *sel.get("workers", ())}
        if nodes:
            out.append((rd, meta, nodes))
    return out


async def _alive_on(rd: RunDir, meta: dict, nodes: set[str], open_run: Callable[[str], RunLike],
                   here: dict[str, set[str]]) -> list[str]:
    """The run's processes alive on `nodes` (names), or who is launching it; [] when none is, or when that
    cannot be told (a node that does not answer is pre-flight's to report). `here`: the runs' processes alive
    on this machine, by their marker."""
    if meta.get("launcher") == "local":
        return sorted(here.get(rd.id, ())) or _launching(meta)
    try:
        run = open_run(rd.id)
    except AtomdeckError:
        return []
    try:
        handles = [h for h in run.handles.values() if h.node in nodes]
        if not handles:
            return _launching(meta)
        async with asyncio.timeout(POLL_TIMEOUT_S):
            got = await asyncio.gather(*(run.launcher.poll(h) for h in handles), return_exceptions=True)
    except TimeoutError:
        return []
    finally:
        with contextlib.suppress(Exception):
            await run.launcher.close()
    return sorted(h.name for h, st in zip(handles, got) if not isinstance(st, BaseException) and st.alive)


def _launching(meta: dict) -> list[str]:
    """A run still launching from this machine: the atomdeck process that launches it is alive."""
    pid = meta.get("console_pid")
    if meta.get("status") != "launching" or meta.get("console_host") != socket.gethostname() or not pid:
        return []
    if pid == os.getpid() or not alive(pid):
        return []
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [f"being launched by atomdeck (pid {pid})"] if b"atomdeck" in cmdline else []
