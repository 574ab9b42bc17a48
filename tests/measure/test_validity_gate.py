"""The validity gate (issue 40.1) through the real CLI against the simulator on runs the local launcher brought up:
a healthy 2P1D is valid with its KV transfers counted from the engines' own log lines and every worker served; each
simulator fault that a naive bench reports as a result is marked INVALID with its reason, on stdout's JSON, in the
text table and in `compare`'s CSV, and kept off the Pareto front unless --include-invalid."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from atomdeck.core.run.run import Run

from .test_bench_local import _sim_speed, cli, runs, up  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def bench(run, *extra: str) -> tuple[int, dict, str]:
    p = cli("bench", run.id, "--isl", "32", "--osl", "8", "--concurrency", "4", "--num-prompts", "16", "--warmup", "0",
            "--json", *extra)
    assert "Traceback" not in p.stderr, p.stderr
    return p.returncode, json.loads(p.stdout), p.stderr


def test_a_healthy_2p1d_is_valid_with_its_transfers_and_workers_counted(runs):  # noqa: F811
    run = up(runs, "demo-2p1d")
    rc, out, err = bench(run)
    assert rc == 0, err
    (step,) = out["results"]
    assert step["valid"] is True and step["invalid_reasons"] == [], step["invalid_reasons"]
    checks = step["checks"]
    assert {k: c["ok"] for k, c in checks.items()} == {"lengths": True, "failures": True, "health": True,
                                                        "kv": True, "routing": True}, checks
    assert checks["kv"]["transfers"] == 16 and checks["kv"]["remote_recv"] == 16 and checks["kv"]["failed_transfers"] == 0
    # round robin over the two prefills; the one decode takes all
    assert checks["routing"]["by_worker"] == {"prefill-0": 8, "prefill-1": 8, "decode-0": 16}, checks["routing"]


def test_short_outputs_are_invalid_and_named(runs):  # noqa: F811
    run = up(runs, decode__env={"ATOMSIM_OUTPUT_TOKENS": "3"})
    rc, out, err = bench(run)
    assert rc == 1
    (step,) = out["results"]
    assert step["valid"] is False and step["short"] == 16
    assert step["checks"]["lengths"]["ok"] is False
    assert step["invalid_reasons"][0].startswith("lengths: 16 short output(s) (#0 3/8, #1 3/8"), step["invalid_reasons"]
    assert "INVALID: lengths: 16 short output(s)" in err


def test_zero_tokens_are_invalid(runs):  # noqa: F811
    # from 4 s after the decode starts (the launch's own smoke request would refuse a run that answers nothing)
    run = up(runs, decode__env={"ATOMSIM_OUTPUT_TOKENS": "0", "ATOMSIM_OUTPUT_AFTER": "4"})
    time.sleep(4)
    rc, out, err = bench(run)
    assert rc == 1
    (step,) = out["results"]
    assert step["valid"] is False and step["completed"] == 0
    assert any(r.startswith("failures: 16 of 16 request(s) failed (16x the stream ended without a token")
               for r in step["invalid_reasons"]), step["invalid_reasons"]


def test_a_failed_transfer_answered_200_is_invalid(runs):  # noqa: F811
    # ATOM at the router pin sends write-done after a failed block transfer: the decode answers 200 from the wrong
    # bytes (ROCm/ATOM PR #1866). Every answer looks fine; the prefill's own lines say otherwise.
    pin = {"ATOMSIM_ATOM_REV": "pin"}
    # the launch's smoke request already breaks the pair: the run knows (degraded, never serving), and a bench
    # stops at once, invalid
    run = up(runs, expect="degraded", prefill__env={**pin, "ATOMSIM_HANDSHAKE": "break"}, decode__env=pin)
    rc, out, err = bench(run)
    assert rc == 1, err
    (step,) = out["results"]
    assert step["valid"] is False and step["completed"] == 0 and "prefill-0>decode-0 pair failed" in step["halted"]
    assert step["invalid_reasons"][0].startswith("health: prefill-0>decode-0 pair failed since before the step")
    # every request to its end: all answered 200 with the asked length, yet none had its KV
    rc, out, err = bench(run, "--concurrency", "8", "--keep-going")
    assert rc == 1, err
    (step,) = out["results"]
    assert (step["completed"], step["failed"], step["short"]) == (16, 0, 0)  # what a naive bench reports
    assert step["valid"] is False and step["checks"]["kv"]["ok"] is False
    assert step["checks"]["kv"]["failed_transfers"] >= 16
    reason = next(r for r in step["invalid_reasons"] if r.startswith("kv: "))
    assert "transfers failed on prefill-0" in reason and "[PRODUCER] block transfer failed for req" in reason, reason


def test_a_worker_frozen_mid_step_stops_the_step_invalid_and_names_it(runs):  # noqa: F811
    run = up(runs, prefill__env={"ATOMSIM_FREEZE_AFTER": "12"})
    # long enough that the freeze comes during it; without the gate each request would wait out its timeout
    p = cli("bench", run.id, "--isl", "32", "--osl", "256", "--concurrency", "2,2,2", "--num-prompts", "400",
            "--warmup", "0", "--request-timeout", "60", "--json", timeout=180)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 1
    out = json.loads(p.stdout)
    bad = [s for s in out["results"] if not s["valid"]]
    assert len(bad) == 1 and out["results"][-1] is bad[0]  # the bench stopped with the step that went wrong
    step = bad[0]
    assert step["checks"]["health"]["ok"] is False and step["checks"]["health"]["processes"] == ["prefill-0"]
    assert "health: prefill-0 unresponsive" in step["invalid_reasons"][0], step["invalid_reasons"]
    assert "stopped: prefill-0 unresponsive" in json.dumps(step["errors"]), step["errors"]
    assert step["halted"].startswith("stopped after ")
    assert "prefill-0 unresponsive" in p.stderr and "this step is INVALID" in p.stderr


def test_compare_keeps_invalid_steps_off_the_front_unless_asked(runs, tmp_path):  # noqa: F811
    good = up(runs)
    rc, _, err = bench(good)
    assert rc == 0, err
    asyncio.run(Run.open(good.id).teardown(grace=2))
    bad = up(runs, decode__env={"ATOMSIM_OUTPUT_TOKENS": "3"})
    bench(bad, "--concurrency", "64")  # short outputs: a point that may beat the valid one
    res = cli("compare", good.id, bad.id, "--json", "--csv", str(tmp_path / "c.csv"))
    rows = json.loads(res.stdout)["rows"]
    by_run = {r["run"]: r for r in rows}
    assert by_run[bad.id]["valid"] is False and by_run[bad.id]["pareto"] is False
    assert by_run[good.id]["pareto"] is True
    csv_text = (tmp_path / "c.csv").read_text()
    assert ",valid,invalid_reasons,pareto" in csv_text.splitlines()[0] and 'False,"lengths: 16 short output(s)' in csv_text
    res = cli("compare", good.id, bad.id, "--json", "--include-invalid")
    inc = {r["run"]: r for r in json.loads(res.stdout)["rows"]}
    g, b = inc[good.id], inc[bad.id]
    dominated = g["interactivity"] >= b["interactivity"] and g["output_throughput_per_gpu"] >= b["output_throughput_per_gpu"]
    assert b["pareto"] is not dominated  # judged with the others now


def test_the_gate_ends_a_step_when_its_lines_are_in_and_waits_only_for_a_step_with_failures(runs):  # noqa: F811
    # issue 40.6: the gate slept SETTLE_S after every step for the engines' last lines; they come before each
    # answer's last token, so a step whose every request is accounted for is judged on the first read
    from atomdeck.core.measure.gate import Gate
    from atomdeck.core.measure.stats import RequestRecord
    from atomdeck.core.measure.sweep import sweep
    from atomdeck.core.measure.workload import Workload

    run = up(runs)

    async def go():
        r = Run.open(run.id)
        gate = Gate(r, sentinel=False)
        try:
            steps = await sweep(r.plan.router.url, r.recipe.model.client_name,
                                Workload(isl=32, osl=8, concurrencies=[4, 1], num_prompts=8, warmup=0), gate=gate)
            reads = gate.settle_reads
            await gate.begin()  # a step whose one request failed: its failure's lines may come after it
            failed = await gate.end([RequestRecord(0, 0.0, error="HTTP 500: boom")])
            return steps, reads, gate.settle_reads, failed
        finally:
            await gate.close()
            await r.close()

    steps, reads, reads_failed, failed = asyncio.run(go())
    for step in steps:  # every line counted all the same
        kv = step.summary["checks"]["kv"]
        assert step.summary["valid"] is True and kv["transfers"] == 8 and kv["remote_recv"] == 8, kv
    assert reads == 1
    assert reads_failed > 1 and failed.valid is False
