"""`atomdeck bench` and `atomdeck compare` against the simulator through the real router, on runs the
local launcher brought up (real processes, real ports), driven through the real CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.run.run import Run

from tests.leftovers import alive, not_serving

pytestmark = pytest.mark.slow

KEYS = ["max_concurrency", "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
        "request_throughput", "output_throughput", "total_token_throughput", "total_gpus", "prefill_gpus",
        "decode_gpus", "output_throughput_per_gpu", "total_token_throughput_per_gpu", "interactivity"]
KEYS += [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p90", "p99")]


@pytest.fixture(autouse=True)
def _sim_speed(monkeypatch):
    monkeypatch.setenv("ATOMDECK_SIM_SPEED", "20")  # staged but quick: a token every 0.5 ms


@pytest.fixture
def runs():
    started: list[Run] = []
    yield started
    for run in started:
        asyncio.run(Run.open(run.id).teardown(grace=2))
    for run in started:
        assert not alive(run), f"{alive(run)} left processes behind"


# Ports of their own: other sessions on this machine bring the demo up on its default ports. None inside
# 15000-17000, where each Mooncake engine binds two ports at random (lint: mooncake-port-range).
PORTS = {"ports__prefill_http": 18110, "ports__decode_http": 18120, "ports__router": 31300,
         "ports__router_prometheus": 31400, "ports__handshake": 14401}


def up(runs, recipe="demo-1p1d", expect: str = "serving", **edits) -> Run:
    """The recipe launched and watched until it is `expect` (a run whose launch smoke already broke a pair is
    degraded from the start: it never says serving)."""
    ws = load_workspace(recipe, "local")
    ws.inventory = ws.cluster.static_inventory()
    for path, value in (PORTS | edits).items():
        ws.recipe = set_field(ws.recipe, path.replace("__", "."), value)

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        state = await run.watch(until=lambda s: s.status in (expect, "failed"), timeout=60)
        await run.close()
        return run, state

    run, state = asyncio.run(go())
    assert state.status == expect, not_serving(state)
    return run


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "atomdeck.core.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env=os.environ.copy())


def test_bench_two_layouts_then_compare_them_after_teardown(runs):
    done = []
    for recipe in ("demo-1p1d", "demo-2p1d"):  # one after the other: both use the demo's first node
        run = up(runs, recipe)
        done.append(run)
        res = cli("bench", run.id, "--isl", "64", "--osl", "16", "--concurrency", "1,4", "--num-prompts", "8",
                  "--json")
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert set(out) >= {"run", "layout", "workload", "results"}
        assert out["run"] == run.id and out["workload"]["isl"] == 64 and out["workload"]["concurrencies"] == [1, 4]
        steps = out["results"]
        assert [s["max_concurrency"] for s in steps] == [1, 4]
        for s in steps:
            assert not [k for k in KEYS if k not in s], s.keys()
            assert (s["completed"], s["failed"], s["short"]) == (8, 0, 0)
            # the server's usage: every random prompt is exactly ISL tokens for the simulator's tokenizer
            assert s["total_input_tokens"] == 8 * 64 and s["total_output_tokens"] == 8 * 16
            assert s["median_ttft_ms"] > 0 and s["median_tpot_ms"] > 0 and s["interactivity"] > 0
            assert s["output_throughput_per_gpu"] == pytest.approx(s["output_throughput"] / s["total_gpus"])
        # one progress line per step, on stderr
        assert sum("step " in line and "concurrency" in line for line in res.stderr.splitlines()) == 2
        saved = Path(out["saved"])
        assert saved.parent == run.rd.path / "bench" and saved.is_file()
        raw = (saved.parent / json.loads(saved.read_text())["requests_file"]).read_text().splitlines()
        assert len(raw) == 16 and all(len(json.loads(x)["itl"]) == 15 for x in raw)
        asyncio.run(Run.open(run.id).teardown(grace=2))
    one, two = done
    assert out["layout"] == "2P1D DPA TP8"
    assert (steps[0]["total_gpus"], steps[0]["prefill_gpus"], steps[0]["decode_gpus"]) == (24, 16, 8)

    res = cli("compare", one.id, two.id, "--json", "--csv", str(one.rd.path / "cmp.csv"))
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)["rows"]
    assert [(r["layout"], r["max_concurrency"], r["total_gpus"]) for r in rows] == [
        ("1P1D TP8", 1, 16), ("1P1D TP8", 4, 16), ("2P1D DPA TP8", 1, 24), ("2P1D DPA TP8", 4, 24)]
    assert any(r["pareto"] for r in rows)
    assert (one.rd.path / "cmp.csv").read_text().count("\n") == 5
    text = cli("compare", one.id, two.id)
    assert text.returncode == 0 and "2P1D DPA TP8" in text.stdout and "24=16+8" in text.stdout


def test_bad_input_is_one_message_and_exit_2(runs, tmp_path):
    run = up(runs, prefill__args={"max-model-len": 512}, decode__args={"max-model-len": 512})
    notjsonl = tmp_path / "prompts.txt"
    notjsonl.write_text("just some text\n")
    cases = {
        "no run 'nope-nope'": ["bench", "nope-nope"],
        "--concurrency must be a comma-separated list of positive integers": ["bench", run.id, "--concurrency", "4,0"],
        "--dataset /nonexistent.jsonl: no such file": ["bench", run.id, "--dataset", "/nonexistent.jsonl"],
        "line 1 is not JSON": ["bench", run.id, "--dataset", str(notjsonl)],
        "--isl 600 + --osl 16 = 616 tokens is beyond the model's max length 512": ["bench", run.id, "--isl", "600",
                                                                                   "--osl", "16"],
        "has no bench results": ["compare", run.id],
    }
    for message, args in cases.items():
        res = cli(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert message in res.stderr, (args, res.stderr)
        assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr, res.stderr
        assert not (run.rd.path / "bench").exists()  # nothing was sent, nothing saved

    # within the limit it measures
    ok = cli("bench", run.id, "--isl", "400", "--osl", "8", "--concurrency", "2", "--num-prompts", "2")
    assert ok.returncode == 0, ok.stderr

    # the router dies (the run directory still says serving): unreachable, exit 2
    router = Run.open(run.id).handles["router"]
    os.killpg(router.pid, signal.SIGKILL)
    res = cli("bench", run.id, "--num-prompts", "2", "--concurrency", "1")
    assert res.returncode == 2 and "router of run" in res.stderr and "unreachable" in res.stderr, res.stderr

    # torn down: not serving, exit 2
    asyncio.run(Run.open(run.id).teardown(grace=2))
    res = cli("bench", run.id)
    assert res.returncode == 2 and "is not serving (status: stopped)" in res.stderr, res.stderr


def test_a_run_nobody_watched_is_measured_once_its_router_answers(runs):
    """`atomdeck up` without --wait leaves "starting" on disk; the router answering is what counts."""
    import socket
    import time

    ws = load_workspace("demo-1p1d", "local")
    ws.inventory = ws.cluster.static_inventory()
    for path, value in PORTS.items():
        ws.recipe = set_field(ws.recipe, path.replace("__", "."), value)

    async def launch():
        run = await Run.launch(ws, ws.assess())
        await run.close()
        return run

    run = asyncio.run(launch())
    runs.append(run)
    assert Run.open(run.id).state.status == "starting"
    deadline = time.monotonic() + 60
    def router_open() -> bool:
        with socket.socket() as s:
            return s.connect_ex((run.plan.router.host, run.plan.router.port)) == 0

    while not router_open():
        assert time.monotonic() < deadline, "the router never opened its port"
        time.sleep(0.05)
    res = None
    while res is None or (res.returncode == 2 and "does not answer" in res.stderr):  # port open, app not yet
        assert time.monotonic() < deadline, res.stderr
        res = cli("bench", run.id, "--isl", "16", "--osl", "4", "--concurrency", "2", "--num-prompts", "4", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["results"][0]["completed"] == 4
