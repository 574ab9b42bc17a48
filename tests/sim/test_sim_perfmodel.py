"""The simulator's performance model: its formulas, the engine cores, and layouts measured with real processes.

No timed asserts: the process test compares throughput *ratios* of two layouts measured the same way.
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from atomdeck.sim import engine as sim_engine
from atomdeck.sim import httpd, perfmodel
from atomdeck.sim.scheduler import Scheduler

from .simhelpers import MODEL, wait_http


def test_prefill_grows_with_prompt_and_shrinks_with_tp():
    assert perfmodel.prefill_time(2000, 1) > perfmodel.prefill_time(1000, 1) > perfmodel.prefill_time(10, 1)
    assert perfmodel.prefill_time(1000, 8) < perfmodel.prefill_time(1000, 4) < perfmodel.prefill_time(1000, 1)
    # sub-linear: TP8 is faster than TP1 but less than 8 times
    assert 1 < perfmodel.prefill_time(4096, 1) / perfmodel.prefill_time(4096, 8) < 8


def test_decode_step_grows_with_batch_and_batching_pays():
    one, many = perfmodel.decode_step_time(1, 8), perfmodel.decode_step_time(64, 8)
    assert many > one
    assert 64 / many > 1 / one, "total tokens/s grows with the batch"
    assert 1 / many < 1 / one, "tokens/s per user shrinks with it"


def test_dp_attention_trades_one_prompts_latency_for_batch_throughput():
    assert perfmodel.engines(8, 1, True) == (8, 1) and perfmodel.engines(8, 1, False) == (1, 8)
    # one prompt alone: a TP8 engine is faster than one TP1 engine of a DPA8 worker
    assert perfmodel.prefill_time(2048, 8) < perfmodel.prefill_time(2048, 1)
    # many prompts: eight TP1 engines prefill more tokens/s than one TP8 engine
    assert perfmodel.prefill_capacity(8, 1, True) > perfmodel.prefill_capacity(8, 1, False)
    # two prefill workers double the prefill capacity
    assert perfmodel.prefill_capacity(8, 1, True) * 2 == pytest.approx(2 * perfmodel.prefill_capacity(8, 1, True))


async def test_engine_queues_beyond_max_num_seqs_and_decodes_in_lockstep(monkeypatch):
    monkeypatch.setenv("ATOMSIM_SPEED", "20")
    sched = Scheduler(tp=1, dp=1, max_num_seqs=2, max_batched_tokens=16384, block_size=16)
    seqs = [sched.submit(0, 100, 30) for _ in range(4)]
    seen_waiting = 0
    lockstep = True
    while not all(s.finished for s in seqs):
        snap = sched.snapshot()
        seen_waiting = max(seen_waiting, snap["requests_waiting"])
        assert snap["requests_running"] <= 2
        a, b = seqs[0], seqs[1]
        if not a.finished and not b.finished and abs(a.generated - b.generated) > 1:
            lockstep = False
        await asyncio.sleep(0.002)
    assert seen_waiting >= 2, "sequences waited for a free slot"
    assert lockstep, "the running batch advances one token per step for every sequence"
    snap = sched.snapshot()
    assert snap["requests_finished"] == 4 and snap["generation_tokens"] == 120 and snap["kv_blocks_used"] == 0


async def test_zero_token_time_finishes_at_once(monkeypatch):
    monkeypatch.setenv("ATOMSIM_SPEED", "0")
    sched = Scheduler(tp=8, dp=1, max_num_seqs=1, max_batched_tokens=16, block_size=16)
    seqs = [sched.submit(0, 5000, 1000) for _ in range(100)]
    assert all(s.finished and s.generated == 1000 for s in seqs)
    assert sched.snapshot()["generation_tokens"] == 100_000


# ---- layouts measured with real processes -------------------------------------------------------

SPEED = "1"
ISL_WORDS = 2000
OSL = 8
DPA = ("--enable-dp-attention", "--max-num-seqs", "64")


def prompts(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"request {seed}-{i}: " + " ".join(rng.choice(sim_engine.VOCAB) for _ in range(ISL_WORDS))
            for i in range(count)]


async def measure(url: str, concurrency: int, count: int, seed: int) -> float:
    """Output tokens per second of ``count`` requests with ``concurrency`` in flight (closed loop)."""
    queue = list(prompts(count, seed))
    tokens = 0

    async def client() -> None:
        nonlocal tokens
        while queue:
            prompt = queue.pop()
            answer = await httpd.request("POST", f"{url}/v1/completions",
                                         {"model": MODEL, "prompt": prompt, "max_tokens": OSL}, timeout=60)
            assert answer.status == 200, answer.text()
            tokens += answer.json()["usage"]["completion_tokens"]

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return tokens / (time.monotonic() - started)


def deploy(spawn, block: str, prefills: int) -> tuple[str, int]:
    """A demo-shaped deployment (DPA TP8 workers); returns (router URL, GPUs)."""
    ips = [f"{block}.{2 + i}" for i in range(prefills)]
    d_ip = f"{block}.9"
    env = {"ATOMSIM_SPEED": SPEED, "MC_LOG_LEVEL": "ERROR"}
    for i, ip in enumerate(ips):
        spawn.worker(f"{block}-prefill{i}", ip, 8010, "kv_producer", *DPA, **env)
    spawn.worker(f"{block}-decode", d_ip, 8020, "kv_consumer", *DPA, **env)
    router = spawn.router(f"{block}-router", ips[0], 30000, [f"http://{ip}:8010" for ip in ips],
                          [f"http://{d_ip}:8020"], "--policy", "round_robin", ATOMSIM_SPEED=SPEED)
    wait_http(f"http://{ips[0]}:30000/readiness", timeout=60, proc=router)
    return f"http://{ips[0]}:30000", 8 * (prefills + 1)


@pytest.mark.slow
def test_2p1d_beats_1p1d_at_long_prompts_and_high_concurrency_but_loses_per_gpu_alone(spawn):
    """Long prompts make prefill the bottleneck: a second prefill worker doubles its capacity. One request
    at a time never waits for a prefill engine, so the second worker only adds GPUs."""
    one_url, one_gpus = deploy(spawn, "127.0.43", 1)
    two_url, two_gpus = deploy(spawn, "127.0.44", 2)
    results = {}
    for name, url in (("1p1d", one_url), ("2p1d", two_url)):
        asyncio.run(measure(url, 4, 4, seed=99))       # warm-up (connections, first allocations)
        results[name] = {"high": asyncio.run(measure(url, 16, 32, seed=1)),
                         "low": asyncio.run(measure(url, 1, 3, seed=2))}
    print(f"\nthroughput tok/s: {results}")
    high = results["2p1d"]["high"] / results["1p1d"]["high"]
    low_per_gpu = (results["2p1d"]["low"] / two_gpus) / (results["1p1d"]["low"] / one_gpus)
    # The model predicts 2; the simulator's own CPU per request (HTTP, KV bytes, logs) pulls it towards 1 on a
    # busy machine (1.4-1.5 measured with 2 cores under load), so the bar only says "clearly more than 1".
    assert high > 1.25, f"2P1D/1P1D at concurrency 16: {high:.2f} (the model predicts about 2)"
    assert low_per_gpu < 0.85, f"2P1D/1P1D per GPU at concurrency 1: {low_per_gpu:.2f} (the model predicts 0.67)"


def test_consecutive_blocks_move_as_one_transfer_entry():
    from atomdeck.sim.kv import BYTES_PER_BLOCK, coalesce
    srcs, dsts, sizes = coalesce(1000, 5000, [(3, 7), (4, 8), (5, 9), (9, 10), (10, 11), (2, 20)])
    b = BYTES_PER_BLOCK
    assert srcs == [1000 + 3 * b, 1000 + 9 * b, 1000 + 2 * b]
    assert dsts == [5000 + 7 * b, 5000 + 10 * b, 5000 + 20 * b]
    assert sizes == [3 * b, 2 * b, b] and sum(sizes) == 6 * b


def steady_out_per_gpu(prefills: int, decodes: int, isl: int, osl: int, users: int, tp: int = 8) -> float:
    """Output tok/s per GPU of xPyD (TP``tp`` workers, no DP attention) with ``users`` in a closed loop, from the
    model's own step times (mean-value iteration: prefill capped by its capacity, decode batch = users decoding)."""
    t_prefill = perfmodel.prefill_time(isl, tp)
    cap = prefills / t_prefill
    rate, step = 0.1, perfmodel.decode_step_time(1, tp)
    for _ in range(400):
        decoding = min(users, rate * osl * step)
        batch = decoding / decodes
        step = perfmodel.decode_step_time(max(1, round(batch)), tp, int(batch * (isl + osl / 2)))
        rate = 0.7 * rate + 0.3 * min(cap, users / (t_prefill + osl * step))
    return rate * osl / (tp * (prefills + decodes))


def test_prefill_heavy_favours_more_prefill_and_decode_heavy_more_decode():
    """Issue 40.5: the model's own consequence, which the layout search finds on the demo (bench/layout_search.py)."""
    for isl, osl, winner in ((8192, 1024, (2, 1)), (1024, 8192, (1, 2))):
        per_gpu = {lay: steady_out_per_gpu(*lay, isl, osl, 32) for lay in ((1, 1), (1, 2), (2, 1))}
        assert max(per_gpu, key=per_gpu.get) == winner, (isl, osl, per_gpu)


def test_decode_steps_read_the_context_and_prefill_attention_grows_with_the_square():
    assert perfmodel.decode_step_time(32, 8, 32 * 9000) > 1.5 * perfmodel.decode_step_time(32, 8, 32 * 100)
    one_long = perfmodel.prefill_time(8192, 8)  # one prompt of 8k: its attention is 8k^2 / 2 pairs
    eight_short = perfmodel.prefill_time(8192, 8, 8 * 1024 ** 2)  # the same tokens as eight 1k prompts
    assert one_long > eight_short
