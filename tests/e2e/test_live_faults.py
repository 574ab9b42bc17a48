"""Issue 44 on the local demo with the simulator: faults of the operator's own side while serving.

A supervisor killed while its engine serves (the engine's own PID decides, the run keeps serving, `down`
still removes the engine). Rows in docs/fault-matrix.md."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys

from atomdeck.core.launch.local import read_child
from atomdeck.core.launch.procfs import alive
from atomdeck.core.remote.probes import http_post
from atomdeck.core.run.run import Run

from .conftest import workspace


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_a_killed_supervisor_whose_engine_serves_keeps_the_run_serving_and_down_still_removes_it(runs):
    ws = workspace()

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=40)
        assert s.status == "serving", s.diagnosis
        h = run.handles["decode-0"]
        engine = read_child(h.exit_path)
        assert engine is not None and alive(engine)
        os.kill(h.pid, signal.SIGKILL)
        s = await run.watch(until=lambda s: bool(s.procs["decode-0"].supervisor_gone), timeout=30)
        r = run.plan.router
        body = {"model": run.recipe.model.client_name, "prompt": "hello", "max_tokens": 4}
        answer = await http_post(r.host, r.port, "/v1/completions", body, 30)
        await run.close()
        return run, engine, s, answer

    run, engine, s, answer = asyncio.run(go())
    said = f"decode-0's supervisor is gone; the engine (pid {engine}) is still serving; its exit code will not " \
           "be recorded"
    assert answer.ok  # the engine serves on
    assert s.status == "serving" and s.procs["decode-0"].alive is True
    assert s.procs["decode-0"].supervisor_gone == said and s.procs["decode-0"].engine_pid == engine
    assert said in s.diagnosis
    # another session: `atomdeck status` learns it from the engine's PID (and the event log), no traceback
    st = _cli("status", run.id, "--json")
    assert st.returncode == 0 and "Traceback" not in st.stderr, st.stderr
    data = json.loads(st.stdout)
    assert data["status"] == "serving" and said in data["diagnosis"]
    assert data["processes"]["decode-0"]["alive"] is True
    text = _cli("status", run.id)
    assert said in text.stdout and "Traceback" not in text.stderr
    assert "dead" not in next(ln for ln in text.stdout.splitlines() if ln.strip().startswith("decode-0"))
    down = _cli("down", run.id, "--grace", "5")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not alive(engine), f"`atomdeck down` left the engine {engine} running: {down.stdout}"


def _parked_on_decode(run: Run) -> float:
    """decode-0's own atom:requests_parked_kv_load now (its /metrics)."""
    from atomdeck.core.remote.probes import http_get
    from atomdeck.core.run.watchers.metrics import atom_values, parse_wanted

    ep = run.plan.endpoint("decode-0")
    r = asyncio.run(http_get(ep.host, ep.http_port, "/metrics", 2.0))
    return atom_values(parse_wanted(r.text(100000), frozenset({"atom:requests_parked_kv_load"}))).get(
        "requests_parked_kv_load", 0.0) if r.ok else 0.0


def test_a_kv_path_that_breaks_after_serving_is_named_by_status_on_its_own_and_by_the_watch(runs):
    """The producer's handshake listeners close after the run serves (ATOMSIM_HANDSHAKE_CLOSE_AFTER): requests
    park on the decode. `atomdeck status` (no console watching) does a fresh smoke request, sees the parked
    requests over its pass and says `degraded`, naming the decode and the prefill, each figure with its age; a
    watch then names it too."""
    import threading

    ws = workspace(prefill__env={"ATOMSIM_HANDSHAKE_CLOSE_AFTER": "8"})

    async def serve():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=40)
        assert s.status == "serving", s.diagnosis
        cell = f"{run.plan.endpoint('prefill-0').node}:{run.plan.endpoint('prefill-0').handshake_ports[0]}"
        s = await run.watch(until=lambda s: s.cells[cell].state == "closed", timeout=40)
        assert s.status == "serving", s.diagnosis  # a closed port alone says nothing of the requests
        await run.close()
        return run

    run = asyncio.run(serve())
    r = run.plan.router
    body = {"model": run.recipe.model.client_name, "prompt": "hello", "max_tokens": 4}
    clients = [threading.Thread(target=lambda: asyncio.run(http_post(r.host, r.port, "/v1/completions", body, 60)),
                                daemon=True) for _ in range(3)]
    for c in clients:
        c.start()
    for _ in range(500):
        if _parked_on_decode(run) >= 3:
            break
        subprocess.run(["sleep", "0.05"], check=False)
    assert _parked_on_decode(run) >= 3
    st = _cli("status", run.id, "--json")
    assert st.returncode == 0 and "Traceback" not in st.stderr, st.stderr
    data = json.loads(st.stdout)
    d = data["processes"]["decode-0"]
    assert data["status"] == "degraded", data["diagnosis"]
    assert "requests parked for KV, the oldest for" in d["parked"] and "waiting on prefill-0 (127.0.0.11:6301" \
        in d["parked"], d["parked"]
    assert data["diagnosis"].startswith("degraded: decode-0 on ") or data["diagnosis"].startswith("KV transfer")
    m = data["metrics"]["decode-0"]
    assert m["parked"] >= 3 and m["parked_on"] == "prefill-0" and m["parked_oldest_s"] >= 3, m
    smoke = data["checks"]["smoke:live"]
    assert smoke["ok"] is False and smoke["detail"] == "no answer within 3s", smoke
    assert {"processes", "barrier", "metrics", "smoke", "health"} <= set(data["as_of"])
    text = _cli("status", run.id)
    assert "parked for KV, oldest" in text.stdout and "(this pass" in text.stdout, text.stdout
    assert "Traceback" not in text.stderr

    async def watch():
        again = Run.open(run.id)
        s = await again.watch(until=lambda s: s.metrics.get("decode-0", {}).get("parked", 0) >= 3, timeout=30)
        await again.close()
        return s

    s = asyncio.run(watch())
    assert s.status == "degraded" and "waiting on prefill-0" in s.procs["decode-0"].parked
    m = s.metrics["decode-0"]
    assert m["parked_on"] == "prefill-0" and m["parked_by"] in ("log", "metrics") and m["parked_oldest_s"] >= 0
