"""CLI verbs that measure runs: bench (a concurrency sweep against a serving run's router) and compare
(every bench step of several runs in one table, per GPU, Pareto front marked)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from ..measure.errors import MeasureInputError
from ..measure.validity import short_reason
from .contexts import add_args

if TYPE_CHECKING:
    from ..measure.stats import RequestRecord
    from ..measure.sweep import Live, StepResult
    from ..measure.validity import HealthNote

FAILURES_SHOWN = 10  # failed requests of a step said one by one; the rest are counted, by reason
HEARTBEAT_S = 10.0  # a bench that said nothing for this long says where it is (requests that hang say nothing)

# The verbs import the run engine and aiohttp when they run, so `atomdeck --help` stays fast.


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The `bench` and `compare` sub-commands (registered by main.build_parser)."""
    p = sub.add_parser("bench", help="measure a serving run: a concurrency sweep through its router")
    p.add_argument("run", help="run id (or unique prefix)")
    add_args(p, "run")
    p.add_argument("--isl", type=int, default=None, help="input tokens per prompt (default: recipe benchmark.isl, "
                   "else 1024)")
    p.add_argument("--osl", type=int, default=None, help="output tokens per request (default: recipe benchmark.osl, "
                   "else 128)")
    p.add_argument("--concurrency", default=None, metavar="LIST",
                   help="comma-separated concurrency steps, e.g. 1,4,16,64 (default: recipe benchmark.concurrencies)")
    p.add_argument("--num-prompts", type=int, default=None, help="requests per step (default 64)")
    p.add_argument("--random-range-ratio", type=float, default=None,
                   help="prompt lengths uniform in [ISL x ratio, ISL] (InferenceX; default 1.0 = all ISL)")
    p.add_argument("--seed", type=int, default=None, help="random seed for prompts and arrivals (default 0)")
    p.add_argument("--dataset", default=None, metavar="FILE", help='JSONL prompts ({"prompt": ...} or {"text": ...} '
                   "per line) instead of random ones")
    p.add_argument("--request-rate", type=float, default=None, help="requests/s, Poisson arrivals (default: as fast "
                   "as the concurrency allows)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up requests before the first step, not counted "
                   "(default 2)")
    p.add_argument("--endpoint", choices=("completions", "chat"), default=None, help="/v1/completions (default) "
                   "or /v1/chat/completions")
    p.add_argument("--goodput", default=None, metavar="SLO",
                   help="report goodput (completed requests a second within every limit, as vLLM's request_goodput): "
                        "KEY:MS pairs, e.g. ttft_ms:500,tpot_ms:20 (vLLM's ttft:500 tpot:20 and aiperf's "
                        "time_to_first_token:500 inter_token_latency:20 are read too)")
    p.add_argument("--keep-going", action="store_true",
                   help="run every step to its end even when a process turns unhealthy during it (by default that "
                        "step stops at once, invalid, and the bench with it)")
    p.add_argument("--request-timeout", type=float, default=None, metavar="S",
                   help="seconds one request may take, start to last byte, before it counts as failed (default 600)")
    p.add_argument("--json", action="store_true")

    p = sub.add_parser("compare", help="every bench step of the given runs in one table, per GPU")
    p.add_argument("runs", nargs="+", metavar="RUN")
    add_args(p, "run")
    p.add_argument("--csv", default=None, metavar="FILE", help="also write the table as CSV")
    p.add_argument("--per-gpu", choices=("all", "decode"), default="all",
                   help="per GPU as srt-slurm (all: output / all GPUs, the default) or InferenceX (decode: output / "
                        "decode GPUs) for the table and the Pareto front")
    p.add_argument("--include-invalid", action="store_true",
                   help="let invalid steps (failed or short requests, a process unhealthy, KV not transferred, a "
                        "worker left out) onto the Pareto front; by default they are listed but never on it")
    p.add_argument("--json", action="store_true")


def _fail(msg: str) -> int:
    print(f"atomdeck: error: {msg}", file=sys.stderr)
    return 2


def _step_line(t0: float, i: int, n: int, step: StepResult) -> str:
    s = step.summary
    bad = f", {s['failed']} FAILED" if s["failed"] else ""
    bad += f", {s['short']} short" if s["short"] else ""
    verdict = "" if s.get("valid", True) else " INVALID (" + "; ".join(s.get("invalid_reasons", [])) + ")"
    return (f"[{time.time() - t0:6.1f}s] step {i + 1}/{n} concurrency {s['max_concurrency']:>4}: "
            f"{s['completed']}/{s['num_prompts']} ok{bad}; {s['output_throughput']:.1f} out tok/s "
            f"({s['output_throughput_per_gpu']:.2f}/GPU), TTFT p50 {s['median_ttft_ms']:.1f} ms, "
            f"TPOT p50 {s['median_tpot_ms']:.2f} ms, {s['duration']:.1f}s{verdict}")


class _Talk:
    """What `bench` says on stderr while it runs: each failed request as it ends (the first FAILURES_SHOWN of a
    step, then counted by reason), and, whenever nothing was said for HEARTBEAT_S, where the sweep is: the counts,
    the requests in flight and how long the oldest has waited."""

    def __init__(self, t0: float, steps: int, live: Live, request_timeout: float):
        self.t0, self.steps, self.live, self.request_timeout = t0, steps, live, request_timeout
        self.said = time.monotonic()
        self.phase: tuple[str, int] = ("", -2)
        self.shown = 0
        self.unshown: Counter[str] = Counter()

    def say(self, text: str) -> None:
        print(f"[{time.time() - self.t0:6.1f}s] {text}", file=sys.stderr, flush=True)
        self.said = time.monotonic()

    def where(self) -> str:
        lv = self.live
        return "warm-up" if lv.phase == "warm-up" else f"step {lv.step + 1}/{self.steps} concurrency {lv.concurrency}"

    def _same_phase(self) -> None:
        now = (self.live.phase, self.live.step)
        if now != self.phase:
            self.phase, self.shown = now, 0
            self.unshown.clear()

    def failed(self, rec: RequestRecord) -> None:
        self._same_phase()
        if rec.success:
            return
        if self.shown < FAILURES_SHOWN:
            self.shown += 1
            self.say(f"{self.where()}: request {rec.index} FAILED after {rec.e2el:.1f}s: {rec.error}")
        else:
            self.unshown[rec.error] += 1

    def trouble(self, note: HealthNote) -> None:
        """A process went wrong during the step: said at once, the step is invalid whatever comes next."""
        self.say(f"{self.where()}: {note.process} {note.what}" + (f" ({note.detail[:160]})" if note.detail else "")
                 + ": this step is INVALID")

    def more_failed(self) -> str:
        if not self.unshown:
            return ""
        top = ", ".join(f"{n}x {e[:80]}" for e, n in self.unshown.most_common(2))
        return f"; {sum(self.unshown.values())} more failed ({top})"

    def step_done(self, i: int, n: int, step: StepResult) -> None:
        self._same_phase()
        more = self.more_failed()
        self.unshown.clear()
        if more:
            self.say(f"{self.where()}{more}")
        self.say(_step_line(self.t0, i, n, step).split("] ", 1)[1])

    async def heartbeat(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if time.monotonic() - self.said < HEARTBEAT_S:
                continue
            self._same_phase()
            lv = self.live
            flight = (f"{len(lv.in_flight)} in flight, the oldest for {lv.oldest():.0f}s" if lv.in_flight
                      else "none in flight")
            self.say(f"{self.where()}: {lv.done}/{lv.total} ok, {lv.failed} failed, {flight}{self.more_failed()}; "
                     f"nothing finished for {time.monotonic() - lv.last_finished:.0f}s (a request gives up after "
                     f"{self.request_timeout:g}s: --request-timeout)")
            self.unshown.clear()


def _table(results: list[dict]) -> str:
    lines = [f"{'CONC':>5} {'OK':>5} {'FAIL':>5} {'SHORT':>5} {'OUT TOK/S':>10} {'TOK/S/GPU':>10} {'TOK/S/USER':>10} "
             f"{'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'ITL p50':>8} {'E2E p50':>9}  VALID"]
    for r in results:
        lines.append(f"{r['max_concurrency']:>5} {r['completed']:>5} {r['failed']:>5} {r['short']:>5} "
                     f"{r['output_throughput']:>10.1f} {r['output_throughput_per_gpu']:>10.2f} "
                     f"{r['interactivity']:>10.2f} {r['median_ttft_ms']:>9.1f} {r['p99_ttft_ms']:>9.1f} "
                     f"{r['median_tpot_ms']:>9.2f} {r['median_itl_ms']:>8.2f} {r['median_e2el_ms']:>9.1f}  "
                     + ("yes" if r.get("valid", True) else "NO: " + short_reason(r)))
    return "\n".join(lines)


def cmd_bench(args: argparse.Namespace) -> int:
    from ..measure.bench import bench, check_target, default_workload, target_of
    from ..measure.stats import parse_slo
    from ..measure.sweep import REQUEST_TIMEOUT, Live
    from ..measure.workload import parse_concurrencies
    from ..run.run import Run
    from .output import storage_notices, unsaved_notice

    try:
        slo = parse_slo(args.goodput) if args.goodput is not None else None
    except ValueError as e:
        return _fail(str(e))
    try:
        concurrencies = parse_concurrencies(args.concurrency) if args.concurrency is not None else None
        if args.dataset is not None and not Path(args.dataset).is_file():
            raise MeasureInputError(f"--dataset {args.dataset}: no such file")
    except MeasureInputError as e:
        return _fail(str(e))
    timeout = args.request_timeout if args.request_timeout is not None else REQUEST_TIMEOUT
    if timeout <= 0:
        return _fail(f"--request-timeout must be more than 0 seconds, got {args.request_timeout:g}")
    from .contexts import pick_run

    run = Run.open(pick_run(args, args.run))  # an unknown run is an AtomdeckError: main prints it, exit 2
    storage_notices(run, args.json)
    workload = default_workload(run.recipe, isl=args.isl, osl=args.osl, concurrencies=concurrencies,
                                num_prompts=args.num_prompts, random_range_ratio=args.random_range_ratio,
                                seed=args.seed, dataset=args.dataset, request_rate=args.request_rate,
                                warmup=args.warmup, endpoint=args.endpoint, goodput=slo)
    target = target_of(run)
    t0 = time.time()
    n = len(workload.concurrencies)

    async def go():
        try:
            await check_target(target, workload)  # bad input: one message, before anything is sent
            print(f"bench {run.id} ({target.layout}, {target.gpus.total} GPUs) at {target.router}: {workload.key}, "
                  f"steps {','.join(map(str, workload.concurrencies))} x {workload.num_prompts} requests",
                  file=sys.stderr, flush=True)
            live = Live()
            talk = _Talk(t0, n, live, timeout)
            beat = asyncio.create_task(talk.heartbeat())
            try:
                return await bench(target, workload, checked=True, live=live, request_timeout=timeout,
                                   on_record=lambda _p, rec: talk.failed(rec), on_warmup_record=talk.failed,
                                   on_step=lambda i, s: talk.step_done(i, n, s), on_trouble=talk.trouble,
                                   keep_going=args.keep_going)
            finally:
                beat.cancel()
        finally:
            await run.close()

    try:
        report = asyncio.run(go())
    except MeasureInputError as e:
        return _fail(str(e))
    finally:
        unsaved_notice(run, args.json)
    if report.save_problem:
        print(f"atomdeck: {report.save_problem}", file=sys.stderr)
    if args.json:
        print(json.dumps({**report.to_json(), "saved": report.path}, indent=2))
    else:
        print(_table(report.results))
    print(f"saved {report.path}", file=sys.stderr)
    if report.complete:
        return 0
    print("NOT complete: " + "; ".join(report.problems()), file=sys.stderr)
    return 1


def cmd_compare(args: argparse.Namespace) -> int:
    from ..measure import compare as cmp
    from ..measure.results import load_all
    from ..run.rundir import RunDir

    reports: list[dict] = []
    from .contexts import pick_run

    for rid in args.runs:
        rd = RunDir.find(pick_run(args, rid))  # unknown: AtomdeckError, exit 2
        found = load_all(rd.path)
        if not found:
            return _fail(f"run {rd.id} has no bench results; measure it with `atomdeck bench {rd.id}`")
        reports += found
    table = cmp.rows(reports, include_invalid=args.include_invalid, basis=args.per_gpu)
    if args.csv:
        Path(args.csv).write_text(cmp.to_csv(table))
    if args.json:
        print(json.dumps({"runs": [r["run"] for r in reports], "benches": [r["path"] for r in reports],
                          "per_gpu": cmp.BASES[args.per_gpu][2], "rows": table}, indent=2))
    else:
        print(cmp.to_text(table, args.per_gpu))
    return 0
