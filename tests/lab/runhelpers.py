"""Helpers for end-to-end runs on the lab (Slurm launcher and ssh launcher)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from atomdeck.core.config.errors import PreflightError
from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.core.run.run import Run

SPEED = "20"


def workspace(recipe: str, cluster: str, **edits):
    os.environ["ATOMDECK_SIM_SPEED"] = SPEED
    ws = load_workspace(recipe, cluster)
    ws.inventory, _ = asyncio.run(fetch_inventory(ws.cluster))
    for path, value in edits.items():
        ws.recipe = set_field(ws.recipe, path.replace("__", "."), value)
    return ws


async def launch(ws, nodes=None, a=None, said: list[str] | None = None) -> Run:
    """Launch the assessment `a` (default: a fresh one on `nodes`), which must be fine; what the launch
    says it does goes to `said`."""
    a = a or ws.assess(nodes)
    assert a.ok, a.findings
    return await Run.launch(ws, a, progress=None if said is None else said.append)


async def up(ws, nodes=None, a=None, timeout=60, said: list[str] | None = None):
    """Launch (see launch) and watch until it serves or failed: (run, state)."""
    run = await launch(ws, nodes, a, said)
    state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=timeout)
    return run, state


def serve(ws, nodes=None, timeout=60, a=None, said: list[str] | None = None):
    """up(), then the run closed (it stays up): (run, state)."""
    async def go():
        run, state = await up(ws, nodes, a, timeout, said)
        await run.close()
        return run, state
    return asyncio.run(go())


def refused(ws, a=None, why: str = "launched where pre-flight should have refused") -> PreflightError:
    """Launch what pre-flight must refuse (the assessment `a`, default a fresh one; lint must find it
    fine); its PreflightError. A launch that went ahead is closed and torn down (never left running
    on the lab) and fails the test with `why`."""
    a = a or ws.assess()
    assert a.ok, a.findings  # offline lint cannot know what only the nodes can tell
    try:
        run = asyncio.run(Run.launch(ws, a))
    except PreflightError as e:
        return e
    asyncio.run(run.close())
    teardown(run.id)
    pytest.fail(why)


def node_pids(lab, node: str, test: str) -> list[int]:
    """PIDs of the processes inside `node` for which the shell `test` (on $f, the environ file, and $p)
    holds. The lab's nodes share one PID namespace: only processes in the node's network namespace count."""
    script = ('me=$(readlink /proc/self/ns/net); for f in /proc/[0-9]*/environ; do '
              'p=${f#/proc/}; p=${p%/environ}; '
              '[ "$(readlink /proc/$p/ns/net 2>/dev/null)" = "$me" ] || continue; '
              f'{test} && echo "$p"; done; true')
    return [int(x) for x in lab.node_exec(node, ["sh", "-c", script]).stdout.split()]


def run_pids(lab, run_id: str) -> dict[str, list[int]]:
    """node -> pids of processes carrying this run's marker (checked inside every node)."""
    marked = f'tr "\\0" "\\n" < "$f" 2>/dev/null | grep -q "^ATOMDECK_RUN={run_id}:"'
    return {node: pids for node in lab.node_names if (pids := node_pids(lab, node, marked))}


def engine_pids(lab, node: str, run_id: str, name: str, cmdline: str = "openai_server") -> list[int]:
    """PIDs inside `node` of this run's process `name` whose command line has `cmdline` (the engine or
    the router itself, not the `env` wrapper or supervisor around it); none is an assertion error."""
    pids = node_pids(lab, node, f'tr "\\0" "\\n" < "$f" 2>/dev/null | grep -qx "ATOMDECK_RUN={run_id}:{name}" && '
                                f'grep -q "{cmdline}" /proc/$p/cmdline 2>/dev/null')
    # the supervisor's command line holds the engine's too: keep the innermost ones, those no other of them
    # has as its parent (not the highest PID: with pid_max 32768 the PIDs of a long test run wrap around)
    pids = [p for p in pids if not any(_ppid(q) == p for q in pids)]
    assert pids, f"no {name} process of {run_id} on {node}"
    return pids


def engine_pid(lab, node: str, run_id: str, name: str, cmdline: str = "openai_server") -> int:
    """The one engine (or router) process of `name`: the python its `env` wrapper exec'd, never its supervisor."""
    pids = engine_pids(lab, node, run_id, name, cmdline)
    assert len(pids) == 1, f"{name} of {run_id} on {node}: {len(pids)} innermost processes {pids}, not one"
    return pids[0]


def _ppid(pid: int) -> int | None:
    """The parent of `pid` (the lab's nodes share this machine's PID namespace); None once it has gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def jobs() -> str:
    """Every Slurm job in the queue (squeue -h): "" when none."""
    return subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip()


def squeue_job(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def squeue_steps(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-s", "-j", job_id], capture_output=True, text=True).stdout.strip()


def cli(*args, timeout=180):
    env = {**os.environ, "ATOMDECK_SIM_SPEED": SPEED}
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def teardown(run_id: str):
    """A new session's teardown of the run (as `atomdeck down`), its connections closed: its report."""
    async def go():
        run = Run.open(run_id)
        try:
            return await run.teardown(grace=3)
        finally:
            await run.close()
    return asyncio.run(go())


def wait_for(pred, timeout: float, interval: float = 0.1):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    return None


def kill_worker_python(lab, node: str, run_id: str, name: str) -> int:
    """Kill the worker itself (not its supervisor) inside the node; returns its pid."""
    target = engine_pid(lab, node, run_id, name, "openai_server\\|atomesh")
    lab.node_exec(node, ["kill", "-9", str(target)])
    return target


__all__ = ["Path"]


def assert_said(said: list[str], run: Run, *steps: str) -> None:
    """What a launch said: each of `steps` (a beginning of a line) in that order, then a count of the run's
    processes started that only goes up, and ends with all of them."""
    at = 0
    for step in steps:
        found = [i for i, line in enumerate(said) if i >= at and line.startswith(step)]
        assert found, f"the launch never said {step!r} (after {said[at - 1] if at else 'its start'!r}): {said}"
        at = found[0] + 1
    total = len(run.processes)
    counts = [int(line.split()[0]) for line in said[at:] if line.endswith(f"of {total} processes started")]
    assert counts and counts[0] == 0 and counts[-1] == total and counts == sorted(counts), said
    assert said[-1] == f"{total} of {total} processes started", said
