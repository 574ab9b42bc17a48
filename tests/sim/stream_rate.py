"""How fast the simulator streams with token time 0 (not a test: a measurement for the record).

    .venv/bin/python -m tests.sim.stream_rate

Starts a 1P1D (DPA TP8) deployment and an aggregated worker with ATOMSIM_SPEED=0, then streams
256 requests x 1024 tokens at concurrency 64 through the router and straight to the worker, and
512 short requests (8 tokens) the same two ways. The client counts SSE events; it runs in this
process, so its own cost is part of the figure.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from atomdeck.sim import httpd

from .simhelpers import MODEL, Spawner, wait_http

DPA = ("--enable-dp-attention", "--max-num-seqs", "64", "--disable-uvicorn-access-log")


async def stream(url: str, concurrency: int, count: int, osl: int) -> tuple[int, float]:
    left, events = [count], [0]

    async def client() -> None:
        while left[0] > 0:
            left[0] -= 1
            answer = await httpd.request("POST", f"{url}/v1/completions",
                                         {"model": MODEL, "prompt": "a short prompt", "max_tokens": osl,
                                          "stream": True}, stream=True, timeout=60)
            assert answer.status == 200
            assert answer.chunks is not None
            async for chunk in answer.chunks:
                events[0] += chunk.count(b"data: ")
            answer.close()

    started = time.monotonic()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return events[0] - 3 * count, time.monotonic() - started   # minus the final, usage and [DONE] events


def main() -> None:
    spawn = Spawner(Path(tempfile.mkdtemp()))
    try:
        env = {"ATOMSIM_SPEED": "0", "MC_LOG_LEVEL": "ERROR"}
        spawn.worker("prefill", "127.0.46.2", 8010, "kv_producer", *DPA, **env)
        spawn.worker("decode", "127.0.46.3", 8020, "kv_consumer", *DPA, **env)
        spawn.worker("agg", "127.0.46.4", 8000, None, *DPA, **env)
        router = spawn.router("router", "127.0.46.2", 30000, ["http://127.0.46.2:8010"], ["http://127.0.46.3:8020"],
                              "--policy", "round_robin", ATOMSIM_SPEED="0")
        wait_http("http://127.0.46.2:30000/readiness", timeout=60, proc=router)
        wait_http("http://127.0.46.4:8000/health", timeout=60)
        for name, url in (("router 1P1D", "http://127.0.46.2:30000"), ("worker", "http://127.0.46.4:8000")):
            tokens, took = asyncio.run(stream(url, 64, 256, 1024))
            print(f"{name}: {tokens / took:,.0f} streamed tokens/s ({tokens} in {took:.2f} s, concurrency 64)")
            tokens, took = asyncio.run(stream(url, 64, 512, 8))
            print(f"{name}: {512 / took:,.0f} requests/s of 8 tokens (concurrency 64)")
    finally:
        spawn.cleanup()


if __name__ == "__main__":
    main()
