"""The simulated engine cores: queues, continuous batching and the counters /metrics reports.

One ``Engine`` per DP rank (see perfmodel.engines). All engines of a worker share one timer on
the event loop: each engine's current step ends at a simulated time, the timer fires at the
earliest end, finishes every step that is due (catching up when the loop ran late) and starts
the next. Token timing is therefore right on average even when one wake-up covers many steps,
and a worker costs one timer wake-up per step end, not a task per engine.

With ``ATOMSIM_SPEED=0`` (or inf) no time passes: a submitted sequence is done at once, so the
streaming path is the only cost.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from dataclasses import dataclass, field

from . import perfmodel, simenv

MAX_LAG = 0.05   # real seconds an engine may fall behind its simulated clock before it drops time


@dataclass(eq=False)
class Seq:
    """One request in an engine."""

    prompt_tokens: int
    max_tokens: int
    blocks: int
    need_prefill: bool = True
    generated: int = 0
    finished: bool = False
    cancelled: bool = False
    event: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Stats:
    """Counters of completed work (ATOM counts tokens of finished requests)."""

    requests_finished: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    preemptions: int = 0
    prefix_cache_requests: int = 0


class Engine:
    """One EngineCore: a waiting queue, a running batch, KV blocks."""

    def __init__(self, sched: Scheduler, rank: int, tp: int):
        self.sched = sched
        self.rank = rank
        self.tp = tp
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.prefilling: list[Seq] = []
        self.blocks_used = 0
        self.step: str | None = None          # "prefill" | "decode" | None (idle)
        self.ends_at = math.inf               # loop time the current step ends

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.prefilling)

    def begin(self, start: float) -> None:
        """Admit what fits and start the next step at loop time ``start`` (or go idle)."""
        s = self.sched
        tokens = squares = 0
        while self.waiting and len(self.running) + len(self.prefilling) < s.max_num_seqs:
            seq = self.waiting[0]
            if seq.cancelled:
                self.waiting.popleft()
                continue
            if self.blocks_used + seq.blocks > s.total_blocks and (self.running or self.prefilling):
                break
            if seq.need_prefill:
                if self.prefilling and tokens + seq.prompt_tokens > s.max_batched_tokens:
                    break
                self.prefilling.append(seq)
                tokens += seq.prompt_tokens
                squares += seq.prompt_tokens ** 2
            else:
                self.running.append(seq)
            self.waiting.popleft()
            self.blocks_used += seq.blocks
        if self.prefilling:
            self.step = "prefill"
            duration = perfmodel.prefill_time(tokens, self.tp, squares)
        elif self.running:
            self.step = "decode"
            context = sum(q.prompt_tokens + q.generated for q in self.running)  # the KV every step reads
            duration = perfmodel.decode_step_time(len(self.running), self.tp, context)
        else:
            self.step, self.ends_at = None, math.inf
            return
        self.ends_at = start + simenv.scaled(duration)

    def finish(self) -> None:
        """Apply the results of the step that just ended."""
        if self.step == "prefill":
            batch, self.prefilling = self.prefilling, []
            for seq in batch:
                if seq.cancelled:
                    self._release(seq)
                    continue
                seq.generated = 1
                if seq.generated >= seq.max_tokens:
                    self._done(seq)
                else:
                    self.running.append(seq)
                seq.event.set()
        elif self.step == "decode":
            keep = []
            for seq in self.running:
                if seq.cancelled:
                    self._release(seq)
                    continue
                seq.generated += 1
                if seq.generated >= seq.max_tokens:
                    self._done(seq)
                else:
                    keep.append(seq)
                seq.event.set()
            self.running = keep
        self.step = None

    def _release(self, seq: Seq) -> None:
        self.blocks_used -= seq.blocks

    def _done(self, seq: Seq) -> None:
        self._release(seq)
        self.sched.count_finished(seq)

    def cancel(self, seq: Seq) -> None:
        seq.cancelled = True
        if seq in self.waiting:
            self.waiting.remove(seq)


class Scheduler:
    """All engine cores of one worker process."""

    def __init__(self, *, tp: int, dp: int, max_num_seqs: int, max_batched_tokens: int, block_size: int,
                 prefix_caching: bool = False):
        self.max_num_seqs = max(1, max_num_seqs)
        self.max_batched_tokens = max(1, max_batched_tokens)
        self.block_size = max(1, block_size)
        self.total_blocks = perfmodel.KV_BLOCKS_PER_ENGINE
        self.prefix_caching = prefix_caching
        self.engines = [Engine(self, rank, tp) for rank in range(max(1, dp))]
        self.stats = Stats()
        self.parked = 0                       # decode requests waiting for their remote KV
        self.stalled = False
        self._stall_forever = asyncio.Event()  # never set: what a stalled engine waits on
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    # ---- for the HTTP side ---------------------------------------------------------------

    def pick_rank(self) -> int:
        """ATOM's default ``--dp-load-balance least_requests``: the engine with the fewest requests."""
        return min(self.engines, key=lambda e: (e.load, e.rank)).rank

    def submit(self, rank: int, prompt_tokens: int, max_tokens: int, need_prefill: bool = True) -> Seq:
        """Queue a sequence on engine ``rank``; await ``progress`` for its tokens."""
        total = prompt_tokens + max(0, max_tokens)
        seq = Seq(prompt_tokens, max(1, max_tokens), -(-total // self.block_size), need_prefill)
        if need_prefill and self.prefix_caching:
            self.stats.prefix_cache_requests += 1
        if math.isinf(simenv.speed()) and not self.stalled:
            seq.generated = seq.max_tokens
            self.count_finished(seq)
            seq.event.set()
            return seq
        engine = self.engines[rank % len(self.engines)]
        engine.waiting.append(seq)
        if engine.step is None and not self.stalled:
            engine.begin(asyncio.get_running_loop().time())
            self._arm()
        return seq

    async def progress(self, seq: Seq):
        """Yield the number of tokens generated so far, each time it grows, until the sequence is done."""
        sent = 0
        while True:
            if seq.generated > sent:
                sent = seq.generated
                yield sent
            if seq.finished:
                return
            seq.event.clear()
            if seq.generated > sent or seq.finished:
                continue
            await seq.event.wait()

    async def wait(self, seq: Seq) -> None:
        async for _ in self.progress(seq):
            pass

    def cancel(self, seq: Seq) -> None:
        if not seq.finished:
            for engine in self.engines:
                engine.cancel(seq)

    def count_finished(self, seq: Seq) -> None:
        seq.finished = True
        self.stats.requests_finished += 1
        self.stats.prompt_tokens += seq.prompt_tokens
        self.stats.generation_tokens += seq.generated

    def stall(self) -> None:
        """Stop producing tokens: steps in progress never end, new requests only queue."""
        self.stalled = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, math.inf

    # ---- gauges for /metrics -------------------------------------------------------------

    def snapshot(self) -> dict:
        running = sum(len(e.running) + len(e.prefilling) for e in self.engines)
        waiting = sum(len(e.waiting) for e in self.engines)
        partial = sum(len(e.prefilling) for e in self.engines)
        total = self.total_blocks * len(self.engines)
        used = sum(e.blocks_used for e in self.engines)
        s = self.stats
        return {
            "requests_running": running, "requests_waiting": waiting, "requests_partial_prefill": partial,
            "requests_parked_kv_load": self.parked, "requests_finished": s.requests_finished,
            "prompt_tokens": s.prompt_tokens, "generation_tokens": s.generation_tokens,
            "preemptions": s.preemptions, "kv_blocks_total": total, "kv_blocks_used": used,
            "kv_blocks_free": total - used, "kv_cache_usage_ratio": used / total if total else 0.0,
            "prefix_cache_requests": s.prefix_cache_requests, "prefix_cache_hit_ratio": 0.0,
        }

    # ---- the shared timer ----------------------------------------------------------------

    def _arm(self) -> None:
        due = min(e.ends_at for e in self.engines)
        if due >= self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        self._timer = asyncio.get_running_loop().call_at(due, self._tick) if due < math.inf else None

    def _tick(self) -> None:
        self._timer, self._timer_at = None, math.inf
        if self.stalled:
            return
        now = asyncio.get_running_loop().time()
        for engine in self.engines:
            while engine.ends_at <= now:
                ended = engine.ends_at
                engine.finish()
                engine.begin(max(ended, now - MAX_LAG))
        self._arm()
