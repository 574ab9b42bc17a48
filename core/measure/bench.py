"""Bench a serving run: check the target (serving, router answering, lengths within the model's
limit), run the sweep, and save the report in the run directory. The CLI's `bench` verb and the
console's Bench view both go through `bench()`.

A Target is read from a run (run/'s Run, duck-typed: .id, .rd.path, .plan, .recipe, .state) so this
package never imports the run engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from .errors import MeasureInputError
from .gate import Gate
from .results import BenchReport, save
from .stats import Gpus, RequestRecord
from .sweep import REQUEST_TIMEOUT, Live, Progress, StepResult, sweep
from .validity import HealthNote
from .workload import DEFAULT_ISL, DEFAULT_NUM_PROMPTS, DEFAULT_OSL, Workload

PROBE_TIMEOUT = 5.0
OVER = ("failed", "stopping", "stopped", "dirty")  # a run in these states is not measured


@dataclass
class Target:
    """What a bench measures: a run's router, its model and its layout."""

    run: str
    run_dir: Path
    router: str
    model: str
    layout: str
    gpus: Gpus
    recipe: str = ""
    status: str = "serving"
    source: Any = None  # the run itself (run/'s Run), for the validity gate's evidence; None: the answers only


def gpus_of(plan: Any) -> Gpus:
    """The layout's GPUs from the plan: each worker holds its TP's GPUs (DP attention ranks share them)."""
    by_role: dict[str, int] = {}
    for e in plan.endpoints:
        by_role[e.role] = by_role.get(e.role, 0) + e.tp
    return Gpus(sum(by_role.values()), by_role.get("prefill", 0), by_role.get("decode", 0))


def target_of(run: Any) -> Target:
    return Target(run.id, Path(run.rd.path), run.plan.router.url, run.recipe.model.client_name, run.plan.shape,
                  gpus_of(run.plan), run.recipe.name, run.state.status, run)


def default_workload(recipe: Any = None, **given: Any) -> Workload:
    """The workload from the options given, else the recipe's `benchmark:` section, else the defaults."""
    spec = getattr(recipe, "benchmark", None)
    w = Workload(isl=(spec.isl if spec and spec.isl else DEFAULT_ISL),
                 osl=(spec.osl if spec and spec.osl else DEFAULT_OSL), num_prompts=DEFAULT_NUM_PROMPTS)
    if spec and spec.concurrencies:
        w.concurrencies = list(spec.concurrencies)
    for k, v in given.items():
        if v is not None:
            setattr(w, k, v)
    return w


async def check_target(target: Target, workload: Workload) -> dict:
    """Refuse what cannot be measured, with one clear message (MeasureInputError); returns the model card."""
    workload.validate()
    if target.status in OVER:
        raise MeasureInputError(f"run {target.run} is not serving (status: {target.status}); bench a run once "
                                f"`atomdeck status {target.run}` says serving")
    # "starting" on disk can be a run nobody watched to the end (`atomdeck up` without --wait): the router
    # answering is what counts
    if workload.dataset:
        from .workload import load_dataset

        load_dataset(workload.dataset)  # missing or not JSONL: said now, before any request
    url = f"{target.router}/v1/models"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT),
                                         trust_env=False) as s, s.get(url) as resp:
            body = await resp.json(content_type=None) if resp.status == 200 else None
            if resp.status != 200:
                raise MeasureInputError(f"the router of run {target.run} at {target.router} answers {url} with "
                                        f"HTTP {resp.status}; it is not ready to be measured")
    except (aiohttp.ClientError, TimeoutError, ValueError) as e:
        if target.status != "serving":
            raise MeasureInputError(f"run {target.run} is not serving yet (status: {target.status}) and its router "
                                    f"at {target.router} does not answer; wait for `atomdeck up --wait` or "
                                    f"`atomdeck status {target.run}`") from None
        raise MeasureInputError(f"the router of run {target.run} is unreachable at {target.router} "
                                f"({type(e).__name__}: {e or 'timed out'}); check `atomdeck status {target.run}`") \
            from None
    cards = body.get("data") if isinstance(body, dict) else None
    card = cards[0] if isinstance(cards, list) and cards and isinstance(cards[0], dict) else {}
    limit = card.get("max_model_len")
    if isinstance(limit, int) and limit > 0:
        need = workload.osl + (0 if workload.dataset else workload.isl)
        if need > limit:
            what = f"--osl {workload.osl}" if workload.dataset else f"--isl {workload.isl} + --osl {workload.osl}"
            raise MeasureInputError(f"{what} = {need} tokens is beyond the model's max length {limit} "
                                    f"(max_model_len from {url}); lower them")
    return card


async def bench(target: Target, workload: Workload,
                on_record: Callable[[Progress, RequestRecord], None] | None = None,
                on_step: Callable[[int, StepResult], None] | None = None, checked: bool = False,
                live: Live | None = None, request_timeout: float = REQUEST_TIMEOUT,
                on_warmup_record: Callable[[RequestRecord], None] | None = None, sentinel: bool = True,
                on_trouble: Callable[[HealthNote], None] | None = None, keep_going: bool = False,
                stalls: bool = True) -> BenchReport:
    """Check (unless the caller just did), sweep, save. The report's `path` says where it was written
    (also when a step failed; `save_problem` when not in the run directory). `live`, `on_warmup_record`:
    see `sweep`. Each step is judged by the validity gate (gate.py) from the run's evidence when the target
    has its run (`sentinel`: ask the endpoints' health twice a second meanwhile); `on_trouble` hears each
    process going wrong during a step, as it happens (also in `live.trouble`). A step during which the run turns
    unhealthy stops at once, invalid, and the bench with it (`keep_going`: every step runs to its end anyway)."""
    if not checked:
        await check_target(target, workload)
    live = live or Live()
    report = BenchReport(run=target.run, layout=target.layout, model=target.model, gpus=target.gpus,
                         workload=workload, router=target.router, recipe=target.recipe)

    def warmed(recs: list[RequestRecord]) -> None:
        report.warmup = {"requests": len(recs), "failed": sum(not r.success for r in recs)}

    steps: list[StepResult] = []

    def step_done(i: int, step: StepResult) -> None:
        steps.append(step)
        report.results.append(step.summary)
        if on_step:
            on_step(i, step)

    def trouble(note: HealthNote) -> None:
        live.trouble.append(f"{note.process} {note.what}")
        if on_trouble is not None:
            on_trouble(note)

    gate = (Gate(target.source, sentinel=sentinel, on_trouble=trouble, halt_on_trouble=not keep_going, stalls=stalls)
            if target.source is not None else None)
    try:
        await sweep(target.router, target.model, workload, target.gpus, on_record=on_record, on_step=step_done,
                    on_warmup=warmed, live=live, request_timeout=request_timeout, on_warmup_record=on_warmup_record,
                    gate=gate)
    finally:  # an interrupted bench still keeps the steps it finished
        if gate is not None:
            await gate.close()
        report.finished = time.time()
        if steps:
            save(target.run_dir, report, steps)
    return report
