"""Helpers for end-to-end runs on the lab (Slurm launcher and ssh launcher)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from atomdeck.core.edit import set_field
from atomdeck.core.run import Run
from atomdeck.core.session import fetch_inventory, load_workspace

SPEED = "20"


def workspace(recipe: str, cluster: str, **edits):
    os.environ["ATOMDECK_SIM_SPEED"] = SPEED
    ws = load_workspace(recipe, cluster)
    ws.inventory, _ = asyncio.run(fetch_inventory(ws.cluster))
    for path, value in edits.items():
        ws.recipe = set_field(ws.recipe, path.replace("__", "."), value)
    return ws


async def launch(ws, nodes=None) -> Run:
    a = ws.assess(nodes)
    assert a.ok, a.findings
    return await Run.launch(ws, a)


def serve(ws, nodes=None, timeout=60):
    async def go():
        run = await launch(ws, nodes)
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=timeout)
        await run.close()
        return run, state
    return asyncio.run(go())


def run_pids(lab, run_id: str) -> dict[str, list[int]]:
    """node -> pids of processes carrying this run's marker (checked inside every node)."""
    out = {}
    for node in lab.node_names:
        # the lab's nodes share one PID namespace: count only processes in this node's network namespace
        res = lab.node_exec(node, ["sh", "-c", f'me=$(readlink /proc/self/ns/net); for f in /proc/[0-9]*/environ; '
                                   f'do p=${{f#/proc/}}; p=${{p%/environ}}; '
                                   f'[ "$(readlink /proc/$p/ns/net 2>/dev/null)" = "$me" ] || continue; '
                                   f'tr "\\0" "\\n" < "$f" 2>/dev/null | '
                                   f'grep -q "^ATOMDECK_RUN={run_id}:" && echo "$p"; done; true'])
        pids = [int(x) for x in res.stdout.split()]
        if pids:
            out[node] = pids
    return out


def open_ports(run: Run) -> list[str]:
    left = []
    for p in run.processes.values():
        for port in p.ports:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex((p.host, port)) == 0:
                    left.append(f"{p.node}:{port}")
    return left


def squeue_job(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True).stdout.strip()


def squeue_steps(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-s", "-j", job_id], capture_output=True, text=True).stdout.strip()


def cli(*args, timeout=180):
    env = {**os.environ, "ATOMDECK_SIM_SPEED": SPEED}
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def teardown(run_id: str):
    return asyncio.run(Run.open(run_id).teardown(grace=3))


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
    res = lab.node_exec(node, ["sh", "-c", f'me=$(readlink /proc/self/ns/net); for f in /proc/[0-9]*/environ; do '
                               f'p=${{f#/proc/}}; p=${{p%/environ}}; '
                               f'[ "$(readlink /proc/$p/ns/net 2>/dev/null)" = "$me" ] || continue; '
                               f'tr "\\0" "\\n" < "$f" 2>/dev/null | grep -qx "ATOMDECK_RUN={run_id}:{name}" && '
                               f'grep -q "openai_server\\|atomesh" /proc/$p/cmdline 2>/dev/null && echo $p; done; true'])
    pids = [int(x) for x in res.stdout.split()]
    assert pids, f"no {name} process of {run_id} on {node}"
    target = max(pids)  # the python process (started after its `env` wrapper exec'd)
    lab.node_exec(node, ["kill", "-9", str(target)])
    return target


__all__ = ["Path"]
