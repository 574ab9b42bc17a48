"""Issue 14 on the local demo with the simulator's faults: real processes, real ports, real /proc.

A worker frozen while serving (SIGSTOP) is `unresponsive` with its /proc state, the run `degraded`,
and recovers on SIGCONT; a stalled one (requests in flight, no tokens) is `stalled`; a worker that
says it is ready but binds another port is named with what it really listens on; a blocked KV path
fails its pair from the missing write-done with the path in words; `atomdeck status` does one live
pass and `atomdeck watch --json` streams events."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from atomdeck.core.remote.probes import http_post
from atomdeck.core.run.run import Run

from .conftest import workspace


def _serving(run: Run, timeout: float = 40):
    return run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=timeout)


def test_a_frozen_decode_is_unresponsive_with_its_proc_state_then_recovers(runs):
    ws = workspace(decode__env={"ATOMSIM_FREEZE_AFTER": "3"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await _serving(run)
        assert s.status == "serving", s.diagnosis
        s = await run.watch(until=lambda s: s.procs["decode-0"].stage == "unresponsive", timeout=40)
        frozen = (s.status, s.procs["decode-0"].health_detail, s.diagnosis)
        pid = s.procs["decode-0"].health_detail.split("(pid ")[1].split()[0]
        os.kill(int(pid), signal.SIGCONT)
        s = await run.watch(until=lambda s: s.procs["decode-0"].stage == "serving", timeout=30)
        return frozen, s

    (status, detail, diagnosis), after = asyncio.run(go())
    assert status == "degraded"
    assert "GET /health on" in detail and "process alive" in detail
    assert "state T (stopped)" in detail
    assert diagnosis.startswith("degraded: decode-0 on ") and "unresponsive for" in diagnosis
    assert after.procs["decode-0"].stage == "serving"
    assert after.status == "serving" and after.diagnosis.startswith("serving again")
    assert "answers GET /health again" in after.procs["decode-0"].recovered


def test_status_does_one_live_pass_and_never_says_serving_for_a_frozen_endpoint(runs):
    ws = workspace(decode__env={"ATOMSIM_FREEZE_AFTER": "2"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await _serving(run)
        assert s.status == "serving", s.diagnosis
        await run.close()
        return run

    run = asyncio.run(go())
    # wait (by condition) until the decode froze: its python is in state T (a single failed /health
    # right after serving is not proof: one was seen failing for a moment before the freeze)
    deadline = time.monotonic() + 30
    while _proc_state(run, "decode-0") != "T":
        assert time.monotonic() < deadline, "the decode never froze"
        time.sleep(0.1)
    st = subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", "status", run.id, "--json"],
                        capture_output=True, text=True, timeout=60)
    data = json.loads(st.stdout)
    assert data["status"] == "degraded", data["diagnosis"]
    assert data["processes"]["decode-0"]["stage"] == "unresponsive"
    assert "T (stopped)" in data["processes"]["decode-0"]["health_detail"]
    assert "metrics" in data and "prefill-0" in data["metrics"]  # the prefill still answers /metrics
    assert data["metrics"]["prefill-0"]["source"] == "atom"


def _proc_state(run: Run, name: str) -> str:
    """The /proc state letter of the process's python (in the process group its supervisor leads)."""
    leader = run.handles[name].pid
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            # the python itself, not the supervisor shell whose script names the same command
            if int(fields[2]) == leader and b"python" in argv[0] and b"atom.entrypoints.openai_server" in argv:
                return fields[0]
        except (OSError, ValueError, IndexError):
            continue
    return ""


async def _health(run: Run) -> bool:
    from atomdeck.core.remote.probes import http_get

    ep = run.plan.endpoint("decode-0")
    return (await http_get(ep.host, ep.http_port, "/health", 1.0)).ok


def test_a_stalled_decode_is_stalled_from_its_own_metrics(runs):
    ws = workspace(decode__env={"ATOMSIM_STALL_AFTER": "2", "ATOMSIM_METRICS_REFRESH": "0"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await _serving(run)
        assert s.status == "serving", s.diagnosis
        await asyncio.sleep(2.5)  # the simulator's stall starts 2 s after its server did
        r = run.plan.router
        body = {"model": run.recipe.model.client_name, "prompt": "hello", "max_tokens": 8}
        inflight = [asyncio.create_task(http_post(r.host, r.port, "/v1/completions", body, 60)) for _ in range(2)]
        s = await run.watch(until=lambda s: s.procs["decode-0"].stage == "stalled", timeout=40)
        for t in inflight:
            t.cancel()
        return s

    s = asyncio.run(go())
    assert s.procs["decode-0"].stage == "stalled"
    assert "atom:generation_tokens flat" in s.procs["decode-0"].health_detail
    assert s.status == "degraded"


def test_ready_but_bound_on_another_port_is_named_with_what_it_listens_on(runs):
    ws = workspace(decode__env={"ATOMSIM_BIND_PORT": "18999"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        return run, await run.watch(until=lambda s: s.checks.get("bind:decode-0") is not None, timeout=40)

    run, s = asyncio.run(go())
    c = s.checks["bind:decode-0"]
    ep = run.plan.endpoint("decode-0")
    assert c.ok is False
    assert c.detail.startswith("decode-0 logged 'EngineCore fully initialized' ")
    assert f"but {ep.node}:{ep.http_port} is not open" in c.detail
    assert ":18999" in c.detail.split("listens on", 1)[1]
    from atomdeck.core.run.diagnose import diagnose

    assert diagnose(s).headline == c.detail


def test_refused_handshake_fails_the_pair_from_the_missing_write_done_with_the_path(runs):
    ws = workspace(prefill__env={"ATOMSIM_HANDSHAKE": "refuse"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        return run, await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=60)

    run, s = asyncio.run(go())
    pr = s.pairs["prefill-0>decode-0"]
    p_ep = run.plan.endpoint("prefill-0")
    assert s.status == "failed"
    assert pr.stage == "failed"
    assert f"cannot reach prefill-0 {p_ep.host}:{p_ep.handshake_ports[0]}" in pr.failed
    assert "(refused)" in pr.failed and "got no write-done" in pr.failed
    assert s.diagnosis.startswith("KV transfer prefill-0 -> decode-0 failed: decode-0 on ")
    assert "smoke request" not in s.diagnosis  # named before three smoke timeouts


def test_watch_json_streams_one_event_per_line(runs):
    ws = workspace()

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await _serving(run)
        assert s.status == "serving"
        await run.close()
        return run

    run = asyncio.run(go())
    p = subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", "watch", run.id, "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = json.loads(p.stdout.readline())
        assert first["kind"] == "watching" and first["value"] == "serving"
        kinds = set()
        while "metrics" not in kinds:  # metrics come every 2 s; the test waits for them
            e = json.loads(p.stdout.readline())
            kinds.add(e["kind"])
            assert {"kind", "name", "value", "detail", "data", "t"} <= set(e)
    finally:
        p.send_signal(signal.SIGINT)
        p.wait(timeout=20)
    assert p.returncode == 0, p.stderr.read()


def test_metrics_per_endpoint_and_an_older_atom_without_metrics_degrades_to_the_router(runs):
    ws = workspace(decode__env={"ATOMSIM_METRICS": "0"})

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        s = await _serving(run)
        assert s.status == "serving", s.diagnosis
        s = await run.watch(until=lambda s: {"prefill-0", "decode-0", "router"} <= set(s.metrics) and
                            "req_s" in s.metrics["router"], timeout=30)
        return run, s

    run, s = asyncio.run(go())
    assert s.metrics["prefill-0"]["source"] == "atom"  # newer ATOM: its own /metrics
    assert s.metrics["decode-0"]["source"] == "router"  # 404: what the router knows of it, no error
    assert "active" in s.metrics["decode-0"]
    assert s.metrics["router"]["source"] == "mesh" and s.metrics["router"]["router_requests"] >= 1  # the smoke
    assert s.status == "serving"
    assert not [t for _, t in s.notes if "metrics" in t]  # the 404 was quiet
