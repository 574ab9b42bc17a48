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
