"""A concurrency sweep: for each step, `num_prompts` requests with at most `max_concurrency` in flight
(closed loop), optionally released at a Poisson request rate; warm-up requests first, excluded.

The caller gets a callback per finished request and per finished step (the console draws progress
bars from them, the CLI prints a line per step). Cancelling the sweep cancels every request in flight
and closes the connections: nothing is left running.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

from .client import stream_request
from .stats import Gpus, RequestRecord, summarize
from .workload import Prompt, Workload, load_dataset, step_prompts

REQUEST_TIMEOUT = 600.0  # seconds for one request, start to last byte (`bench --request-timeout`)


@dataclass
class StepResult:
    concurrency: int
    summary: dict
    records: list[RequestRecord] = field(default_factory=list)


@dataclass
class Live:
    """Where a sweep is right now, for whoever shows it while nothing finishes (a request that hangs: a router
    waiting on a broken KV path, a server that stalled): the phase, the counts, the requests in flight and since
    when (time.monotonic)."""

    phase: str = "warm-up"  # "warm-up" | "step"
    step: int = -1
    concurrency: int = 0
    total: int = 0
    done: int = 0
    failed: int = 0
    in_flight: dict[int, float] = field(default_factory=dict)  # request index -> when it was sent
    last_finished: float = 0.0  # when a request last ended (either way)

    def begin(self, phase: str, step: int, concurrency: int, total: int) -> None:
        self.phase, self.step, self.concurrency, self.total = phase, step, concurrency, total
        self.done = self.failed = 0
        self.in_flight.clear()
        self.last_finished = time.monotonic()

    def oldest(self) -> float:
        """Seconds the oldest request in flight has waited (0 when none is)."""
        return time.monotonic() - min(self.in_flight.values()) if self.in_flight else 0.0


@dataclass
class Progress:
    """Where a sweep is: step index, requests done/failed of the step's total."""

    step: int
    concurrency: int
    done: int
    failed: int
    total: int


def _session(limit: int, request_timeout: float = REQUEST_TIMEOUT) -> aiohttp.ClientSession:
    # One connection per request in flight; no proxies from the environment (the target is the router).
    conn = aiohttp.TCPConnector(limit=max(1, limit), limit_per_host=0, force_close=False, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=10)
    return aiohttp.ClientSession(connector=conn, timeout=timeout, trust_env=False,
                                 auto_decompress=False)


async def run_step(session: aiohttp.ClientSession, base_url: str, model: str, prompts: list[Prompt], osl: int,
                   concurrency: int, endpoint: str, rate: float | None = None, rng: random.Random | None = None,
                   on_record: Callable[[RequestRecord], None] | None = None,
                   live: Live | None = None) -> tuple[list[RequestRecord], float]:
    """Send every prompt with at most `concurrency` in flight; (records in send order, duration s)."""
    t0 = time.perf_counter()
    records: list[RequestRecord | None] = [None] * len(prompts)
    live = live or Live()

    async def one(i: int) -> None:
        p = prompts[i]
        live.in_flight[i] = time.monotonic()
        try:
            rec = await stream_request(session, base_url, model, p, p.max_tokens or osl, endpoint, i, t0)
        finally:
            live.in_flight.pop(i, None)
            live.last_finished = time.monotonic()
        records[i] = rec
        if rec.success:
            live.done += 1
        else:
            live.failed += 1
        if on_record:
            on_record(rec)

    if rate is None:
        queue = iter(range(len(prompts)))

        async def worker() -> None:
            for i in queue:  # a shared iterator: each index is taken once
                await one(i)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(prompts)))))
    else:
        rng = rng or random.Random(0)
        sem = asyncio.Semaphore(concurrency)
        tasks: list[asyncio.Task] = []

        async def gated(i: int) -> None:
            try:
                await one(i)
            finally:
                sem.release()

        try:
            for i in range(len(prompts)):
                if i:
                    await asyncio.sleep(rng.expovariate(rate))
                await sem.acquire()
                tasks.append(asyncio.create_task(gated(i)))
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
    duration = time.perf_counter() - t0
    return [r for r in records if r is not None], duration


async def sweep(base_url: str, model: str, workload: Workload, gpus: Gpus | None = None,
                on_record: Callable[[Progress, RequestRecord], None] | None = None,
                on_step: Callable[[int, StepResult], None] | None = None,
                on_warmup: Callable[[list[RequestRecord]], None] | None = None,
                live: Live | None = None, request_timeout: float = REQUEST_TIMEOUT,
                on_warmup_record: Callable[[RequestRecord], None] | None = None) -> list[StepResult]:
    """Run the whole sweep; one StepResult per concurrency, in order. `live` is kept up to date (requests in
    flight, counts) for a caller that shows the sweep while nothing finishes; `on_warmup_record` hears each
    warm-up request as it ends (a failing warm-up is said as it happens, not after every one of them)."""
    live = live or Live()
    workload.validate()
    base = load_dataset(workload.dataset) if workload.dataset else None
    rng = random.Random(workload.seed)
    arrivals = random.Random(workload.seed + 1)
    results: list[StepResult] = []
    async with _session(max(workload.concurrencies), request_timeout) as session:
        if workload.warmup:
            warm = step_prompts(workload, random.Random(f"warmup-{workload.seed}"), base)[:workload.warmup]
            live.begin("warm-up", -1, workload.warmup, len(warm))
            recs, _ = await run_step(session, base_url, model, warm, workload.osl, workload.warmup,
                                     workload.endpoint, on_record=on_warmup_record, live=live)
            if on_warmup:
                on_warmup(recs)
        for idx, conc in enumerate(workload.concurrencies):
            prompts = step_prompts(workload, rng, base)
            live.begin("step", idx, conc, len(prompts))
            counts = {"done": 0, "failed": 0}

            def record(rec: RequestRecord, idx=idx, conc=conc, counts=counts, total=len(prompts)) -> None:
                counts["done" if rec.success else "failed"] += 1
                if on_record:
                    on_record(Progress(idx, conc, counts["done"], counts["failed"], total), rec)

            recs, duration = await run_step(session, base_url, model, prompts, workload.osl, conc,
                                            workload.endpoint, workload.request_rate, arrivals, record, live)
            step = StepResult(conc, summarize(conc, recs, duration, gpus, workload.request_rate), recs)
            results.append(step)
            if on_step:
                on_step(idx, step)
    return results
