"""Acting on a live run (issue 38) under load: 2P2D serving, a steady load at concurrency 8 through the router, then
one after another: restart decode-0, restart prefill-1, remove decode-1, add a decode (back on the slot decode-1
left). For each: failed requests (goal 0), and from the request (the key press) to the worker serving again, the
part that is the engine's own start (its process started -> its port answered /health) and the part that is
atomdeck's (drain, stop, checks, registration: goal <= 2 s). Then the restart policy: a decode that dies (its rank
SIGKILLed) with `restart: {backoff_seconds: 0}`: from its death to detected, relaunched and serving again, beside
srt-slurm's PR #451 (a dead worker detected in 5 s, relaunched after 10 s, serving again after 74-81 s).

    python bench/actions.py [local] [lab] [lab-ssh]      (the lab ones need tests/cluster/up.sh)
    python bench/actions.py policy [local] [lab] [lab-ssh]   (the restart policy alone)

The simulator at ATOMSIM_SPEED 1: a TP8 worker's start takes about 4 s, as the demo's."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run import actions
from atomdeck.core.run.adding import add
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.core.run.run import Run
from common import load, save

from tests.acting import acting
from tests.load import Load

SPEED = "1"


def split(result, state, name: str, kind: str) -> dict:
    """The action's time from its request to the worker serving again, split into the drain (its requests in
    flight finishing, as the worker's own /metrics tell it: ATOM refreshes them every 5 s), the engine's own
    start (its process started -> its port answered /health) and atomdeck's own part (everything else)."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for t, step, _ in result.steps:
        first.setdefault(step, t)
        last[step] = t
    t0 = result.steps[0][0]
    drain = last["drained"] - first["draining"] if "drained" in last else 0.0
    engine = last["ready"] - first["starting"] if "starting" in first and "ready" in last else 0.0
    serving = state.procs[name].stages.get("serving") if kind != "remove" else None
    total = serving - t0 if serving and serving > t0 else None
    return {"outcome": result.outcome, "took_s": round(result.took_s, 2),
            "to_serving_s": round(total, 2) if total is not None else None,
            "drain_s": round(drain, 2), "engine_start_s": round(engine, 2),
            "atomdeck_s": round((total if total is not None else result.took_s) - engine - drain, 2),
            "smoke_confirm_s": round(last["done"] - first["smoke"], 2) if "smoke" in first and "done" in last
            else None,
            "steps": [(round(t - t0, 2), step, detail) for t, step, detail in result.steps]}


async def one(cluster: str) -> dict:
    os.environ["ATOMDECK_SIM_SPEED"] = SPEED
    ws = load_workspace("demo-2p1d", cluster)
    ws.recipe = set_field(ws.recipe, "decode.workers", 2)
    ws.inventory, _ = await fetch_inventory(ws.cluster)
    nodes = [n.name for n in ws.inventory if n.healthy][:4]
    run = await Run.launch(ws, ws.assess(nodes))
    state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=120)
    assert state.status == "serving", state.diagnosis
    await run.close()
    out: dict = {"cluster": cluster, "layout": "2P2D", "load": "concurrency 8, 16 tokens"}
    job = run.rd.meta().get("job_id")
    try:
        with Load(run.plan.router.url, run.recipe.model.client_name, concurrency=8) as load:
            load.wait_for(30)
            for key, name, fn in (
                    ("restart decode", "decode-0", lambda r: actions.restart(r, "decode-0", drain_timeout=60)),
                    ("restart prefill", "prefill-1", lambda r: actions.restart(r, "prefill-1", drain_timeout=60)),
                    ("remove worker", "decode-1", lambda r: actions.remove(r, "decode-1", drain_timeout=60)),
                    ("add worker", "decode-1", lambda r: add(r, "decode"))):
                kind = key.split()[0]
                before_ok, before_failed = load.ok, len(load.failed)
                result, st = await acting(run.id, fn)
                await asyncio.to_thread(load.wait_for, load.ok + 20, 60)
                row = split(result, st, name, kind)
                row["requests_ok"] = load.ok - before_ok
                row["requests_failed"] = len(load.failed) - before_failed
                row["failed_examples"] = load.failed[before_failed:before_failed + 3]
                out[key] = row
                print(f"{cluster:8} {key:16} {row['outcome']:6} failed {row['requests_failed']:3}  "
                      f"{'to serving' if row['to_serving_s'] is not None else 'took'} "
                      f"{row['to_serving_s'] or row['took_s']}s = drain {row['drain_s']}s + engine "
                      f"{row['engine_start_s']}s + atomdeck {row['atomdeck_s']}s", flush=True)
        if job:
            out["sacct"] = subprocess.run(["sacct", "-n", "-P", "-j", str(job), "--format=JobID,JobName,State"],
                                          capture_output=True, text=True).stdout.splitlines()
    finally:
        report = await Run.open(run.id).teardown(grace=5)
        out["teardown_clean"] = report.clean
    out["policy"] = await policy(cluster)
    return out


async def policy(cluster: str) -> dict:
    """A decode whose rank is SIGKILLed 6 s after it serves, `restart: {backoff_seconds: 0, max_restarts: 1}`: from
    the worker's end (its supervisor's exit-code file) to the run knowing (the exit event), the relaunch starting
    (the policy's restart action) and the worker serving again."""
    os.environ["ATOMDECK_SIM_SPEED"] = SPEED
    ws = load_workspace("demo-1p1d", cluster)
    ws.recipe = set_field(ws.recipe, "decode.restart", {"max_restarts": 1, "backoff_seconds": 0})
    ws.recipe = set_field(ws.recipe, "decode.env", {"ATOMSIM_CRASH_AFTER": "6"})
    ws.inventory, _ = await fetch_inventory(ws.cluster)
    nodes = [n.name for n in ws.inventory if n.healthy][:2]
    run = await Run.launch(ws, ws.assess(nodes))
    seen: dict[str, float] = {}

    def hear(e) -> None:
        if e.name == "decode-0" and e.kind == "proc.exit" and "exit_event" not in seen:
            seen["exit_event"] = time.time()
            # the supervisor's exit-code file, written at the death: the local launcher's, or the node's (the
            # lab's nodes are network namespaces of this machine: their files are this machine's)
            exit_file = Path(run.handles["decode-0"].exit_path or run.rd.path / "logs" / "decode-0.exit")
            if exit_file.exists():
                seen["died"] = exit_file.stat().st_mtime

    run.listeners.append(hear)
    try:
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=120)
        assert state.status == "serving", state.diagnosis
        first = state.procs["decode-0"].pid
        await run.watch(until=lambda s: s.procs["decode-0"].pid not in (None, first)
                        and s.procs["decode-0"].stage == "serving", timeout=180)
        relaunch = next(a for a in run.state.actions.values() if a.source.startswith("restart policy"))
        died = seen.get("died", seen["exit_event"])
        serving = run.state.procs["decode-0"].stages["serving"]
        return {"detected_after_s": round(seen["exit_event"] - died, 2),
                "relaunch_started_after_s": round(relaunch.started - died, 2),
                "serving_again_after_s": round(serving - died, 2),
                "death_time_from": "its supervisor's exit-code file" if "died" in seen else "the exit event",
                "srt_slurm_pr451": {"detected_s": 5, "relaunched_after_s": 10, "serving_again_after_s": "74-81"}}
    finally:
        await run.teardown(grace=5)
        await run.close()


async def main(clusters: list[str]) -> None:
    """`policy CLUSTER...` measures the restart policy alone, kept beside the clusters' other figures."""
    only_policy = clusters[:1] == ["policy"]
    results = load().get("actions", {}) if only_policy else {}
    results.pop("machine", None)
    for c in clusters[1:] if only_policy else clusters:
        if only_policy:
            results.setdefault(c, {})["policy"] = await policy(c)
        else:
            results[c] = await one(c)
    save("actions", results)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or ["local"]))
