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
from typing import TYPE_CHECKING

import aiohttp

from .client import stream_request
from .stats import Gpus, RequestRecord, summarize
from .validity import judge
from .workload import Prompt, Workload, load_dataset, step_prompts

if TYPE_CHECKING:
    from .gate import Gate

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
    # what already makes this step invalid, as it happens (a process unhealthy during it), in words
    trouble: list[str] = field(default_factory=list)

    def begin(self, phase: str, step: int, concurrency: int, total: int) -> None:
        self.phase, self.step, self.concurrency, self.total = phase, step, concurrency, total
        self.done = self.failed = 0
        self.in_flight.clear()
        self.trouble.clear()
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
                   live: Live | None = None, halt: asyncio.Event | None = None) -> tuple[list[RequestRecord], float]:
    """Send every prompt with at most `concurrency` in flight; (records in send order, duration s). When `halt` is
    set (the run turned unhealthy: the step is invalid whatever comes), nothing more is sent and the requests in
    flight are cancelled, each a failed record saying why (a frozen worker would hold each until its timeout)."""
    t0 = time.perf_counter()
    records: list[RequestRecord | None] = [None] * len(prompts)
    live = live or Live()

    async def one(i: int) -> None:
        p = prompts[i]
        live.in_flight[i] = time.monotonic()
        sent = time.perf_counter()
        try:
            rec = await stream_request(session, base_url, model, p, p.max_tokens or osl, endpoint, i, t0)
        except asyncio.CancelledError:
            if halt is not None and halt.is_set():
                records[i] = RequestRecord(i, sent - t0, error="stopped: " + (", ".join(live.trouble) or "halted")
                                           + " during the step", prompt_words=p.words, max_tokens=p.max_tokens or osl,
                                           e2el=time.perf_counter() - sent)
                live.failed += 1
            raise
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

    if halt is None:
        await _send_all(prompts, concurrency, one, rate, rng)
    else:
        body = asyncio.ensure_future(_send_all(prompts, concurrency, one, rate, rng))
        stop = asyncio.ensure_future(halt.wait())
        try:
            await asyncio.wait({body, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not body.done():
                body.cancel()
            await asyncio.gather(body, stop, return_exceptions=True)
        if body.done() and not body.cancelled() and body.exception() is not None:
            raise body.exception()  # type: ignore[misc]
    duration = time.perf_counter() - t0
    return [r for r in records if r is not None], duration


async def _send_all(prompts: list[Prompt], concurrency: int, one: Callable, rate: float | None,
                    rng: random.Random | None) -> None:
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
            await asyncio.gather(*tasks, return_exceptions=True)


async def sweep(base_url: str, model: str, workload: Workload, gpus: Gpus | None = None,
                on_record: Callable[[Progress, RequestRecord], None] | None = None,
                on_step: Callable[[int, StepResult], None] | None = None,
                on_warmup: Callable[[list[RequestRecord]], None] | None = None,
                live: Live | None = None, request_timeout: float = REQUEST_TIMEOUT,
                on_warmup_record: Callable[[RequestRecord], None] | None = None,
                gate: Gate | None = None) -> list[StepResult]:
    """Run the whole sweep; one StepResult per concurrency, in order. `live` is kept up to date (requests in
    flight, counts) for a caller that shows the sweep while nothing finishes; `on_warmup_record` hears each
    warm-up request as it ends (a failing warm-up is said as it happens, not after every one of them). Each
    step's summary carries its verdict (validity.py): from `gate`'s evidence of the run, else from the answers."""
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
            if gate is not None:
                await gate.begin()  # (already unhealthy: said now, in live.trouble)
            counts = {"done": 0, "failed": 0}

            def record(rec: RequestRecord, idx=idx, conc=conc, counts=counts, total=len(prompts)) -> None:
                counts["done" if rec.success else "failed"] += 1
                if on_record:
                    on_record(Progress(idx, conc, counts["done"], counts["failed"], total), rec)

            halt = gate.halt if gate is not None and gate.halt_on_trouble else None
            recs, duration = await run_step(session, base_url, model, prompts, workload.osl, conc,
                                            workload.endpoint, workload.request_rate, arrivals, record, live, halt)
            verdict = await gate.end(recs) if gate is not None else judge(recs)
            summary = summarize(conc, recs, duration, gpus, workload.request_rate, workload.goodput)
            halted = halt is not None and halt.is_set()
            if halted:
                summary["halted"] = (f"stopped after {len(recs)} of {len(prompts)} requests: "
                                     + (", ".join(live.trouble) or "the run turned unhealthy"))
            step = StepResult(conc, summary | verdict.to_json(), recs)
            results.append(step)
            if on_step:
                on_step(idx, step)
            if halted:
                break  # the next steps would measure the same broken run
    return results
