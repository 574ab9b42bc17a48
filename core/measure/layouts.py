"""The layout search (`atomdeck sweep`, the console's Sweep view): one recipe brought up in each layout in turn on
the same nodes, benched, torn down and recorded; the Pareto of layouts; the best layout per GPU that meets the SLO.

(Named for what it searches: measure/sweep.py is the concurrency sweep of one bench, which each layout gets.)

- On Slurm the whole search runs in ONE allocation: a holding job for the nodes the biggest layout needs
  (run/allocation.py), each layout's run started in it with `job_id` (as `atomdeck up --job`: a run given a job
  leaves it running at teardown), the job released at the end (or given with --job and left running).
- It resumes: the search's state is a file (state_dir/searches/ID/search.json, ID from what makes two searches the
  same: recipe, cluster, nodes, layouts, workload); a run again skips the layouts done, and first tears down a run
  an interrupted search left up.
- A layout whose bench went wrong (invalid steps: validity.py) is recorded with its reasons; its steps are never
  recommended.
- The recommendation: among valid steps of every layout, those that meet the SLO (at least MEET_FRACTION of the
  step's requests within every limit: its p90 user, as goodput counts them), the highest output tok/s per GPU
  (compare.BASES: srt-slurm's all GPUs by default, InferenceX's decode GPUs on request).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config.paths import state_dir
from .compare import DEFAULT_BASIS, y_of
from .errors import MeasureInputError
from .sweep import Live
from .workload import Workload

MEET_FRACTION = 0.9  # a step meets the SLO when this share of its requests is within every limit
_LAYOUT = re.compile(r"^(\d+)p(\d+)d((?:-tp\d+|-dpa|-nodpa)*)$")


@dataclass(frozen=True)
class Layout:
    """xPyD, optionally with a TP for both roles and DP attention on or off (both roles): "2p1d-tp4-dpa"."""

    prefill: int
    decode: int
    tp: int | None = None
    dpa: bool | None = None

    @property
    def name(self) -> str:
        return (f"{self.prefill}p{self.decode}d" + (f"-tp{self.tp}" if self.tp else "")
                + ("" if self.dpa is None else "-dpa" if self.dpa else "-nodpa"))

    def edits(self) -> dict[str, Any]:
        """The recipe fields this layout sets."""
        out: dict[str, Any] = {"prefill.workers": self.prefill, "decode.workers": self.decode}
        for role in ("prefill", "decode"):
            if self.tp:
                out[f"{role}.tp"] = self.tp
            if self.dpa is not None:
                out[f"{role}.dp_attention"] = self.dpa
        return out


def parse_layouts(text: str) -> list[Layout]:
    """'1p1d,1p2d,2p1d-dpa,1p1d-tp4' -> layouts; MeasureInputError naming the one at fault."""
    out = []
    for part in str(text).split(","):
        p = part.strip().lower()
        m = _LAYOUT.match(p)
        if not m or int(m[1]) < 1 or int(m[2]) < 1:
            raise MeasureInputError(f"--layouts: {part.strip()!r} is not a layout; write xPyD with x, y >= 1, "
                                    f"optionally -tpN and -dpa/-nodpa for both roles, e.g. 1p1d,1p2d,2p1d-dpa")
        tp = re.search(r"-tp(\d+)", m[3])
        dpa = True if "-dpa" in m[3] else False if "-nodpa" in m[3] else None
        if tp and int(tp[1]) < 1:
            raise MeasureInputError(f"--layouts: {part.strip()!r}: -tpN needs N >= 1")
        out.append(Layout(int(m[1]), int(m[2]), int(tp[1]) if tp else None, dpa))
    names = [lay.name for lay in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise MeasureInputError(f"--layouts: {', '.join(dup)} given twice")
    return out


@dataclass
class SearchSpec:
    recipe: str
    cluster: str
    nodes: list[str]
    layouts: list[Layout]
    workload: Workload
    slo: dict[str, float] | None = None
    job: str | None = None  # a Slurm job to run in (left running); else the search holds one itself
    basis: str = DEFAULT_BASIS

    def key(self) -> str:
        w = self.workload
        same = json.dumps([self.recipe, self.cluster, self.nodes, [lay.name for lay in self.layouts], w.isl, w.osl,
                           w.concurrencies, w.num_prompts, w.dataset, w.seed])
        return hashlib.sha256(same.encode()).hexdigest()[:10]

    def to_json(self) -> dict:
        return {"recipe": self.recipe, "cluster": self.cluster, "nodes": self.nodes,
                "layouts": [lay.name for lay in self.layouts], "workload": self.workload.to_json(),
                "workload_key": self.workload.key, "slo": self.slo, "job": self.job, "per_gpu": self.basis}


@dataclass
class Entry:
    """One layout's place in the search."""

    layout: str
    status: str = "pending"  # pending | launching | benching | done | failed
    run: str = ""
    reason: str = ""  # why it failed, or what its invalid steps said
    report: str = ""  # the bench report's path
    gpus: dict = field(default_factory=dict)
    results: list[dict] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0


@dataclass
class Pick:
    layout: str
    concurrency: int
    per_gpu: float
    interactivity: float
    run: str

    def words(self, basis: str) -> str:
        from .compare import BASES

        return (f"{self.layout} at concurrency {self.concurrency}: {self.per_gpu:.1f} {BASES[basis][1]} at "
                f"{self.interactivity:.1f} tok/s per user")


def meets(step: dict, slo: dict[str, float] | None) -> bool:
    """A valid step whose requests are within every SLO limit for at least MEET_FRACTION of them."""
    if not step.get("valid", True) or not step.get("completed"):
        return False
    if not slo:
        return True
    good = step.get("good_requests")
    if good is None:  # a step saved without goodput: its p90s decide
        return all(step.get(f"p90_{k}_ms", float("inf")) <= v for k, v in slo.items())
    return good >= MEET_FRACTION * step.get("num_prompts", step["completed"])


def recommend(entries: list[Entry], slo: dict[str, float] | None, basis: str = DEFAULT_BASIS) -> Pick | None:
    best: Pick | None = None
    for e in entries:
        if e.status != "done":
            continue
        for r in e.results:
            if not meets(r, slo):
                continue
            y = y_of({**e.gpus, **r}, basis)
            if best is None or y > best.per_gpu:
                best = Pick(e.layout, int(r["max_concurrency"]), y, float(r.get("interactivity", 0.0)), e.run)
    return best


def searches_dir() -> Path:
    return state_dir() / "searches"


@dataclass
class Progress:
    """Where the search is, for a progress bar and a line of words."""

    layout: int = -1  # index of the layout under way
    phase: str = ""  # launching | waiting | benching | tearing down | done | interrupted
    words: str = ""
    steps_done: int = 0
    steps_total: int = 0


class Search:
    """One layout search, its state on disk. `run()` does the layouts not done yet."""

    def __init__(self, spec: SearchSpec, directory: Path, entries: list[Entry], job: str | None = None,
                 job_owned: bool = False):
        self.spec = spec
        self.dir = directory
        self.entries = entries
        self.job = job
        self.job_owned = job_owned
        self.progress = Progress(steps_total=len(entries) * len(spec.workload.concurrencies))
        self.live = Live()  # the bench under way
        self.resumed = [e.layout for e in entries if e.status in ("done", "failed")]
        self._count()

    @property
    def id(self) -> str:
        return self.dir.name

    @classmethod
    def open(cls, spec: SearchSpec, fresh: bool = False) -> Search:
        """The search of this spec: resumed from its file when there is one (unless `fresh`)."""
        d = searches_dir() / f"{Path(spec.recipe).stem}-{spec.key()}"
        entries = [Entry(lay.name) for lay in spec.layouts]
        path = d / "search.json"
        if path.is_file() and not fresh:
            try:
                saved = json.loads(path.read_text())
                known = {e["layout"]: Entry(**e) for e in saved.get("entries", [])}
                entries = [known.get(e.layout, e) for e in entries]
            except (OSError, ValueError, TypeError) as e:
                raise MeasureInputError(f"the search's state {path} cannot be read ({e}); start afresh with "
                                        f"--fresh") from None
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        return cls(spec, d, entries)

    def save(self) -> None:
        doc = {"id": self.id, "spec": self.spec.to_json(), "job": self.job, "job_owned": self.job_owned,
               "entries": [asdict(e) for e in self.entries], "updated": time.time()}
        pick = recommend(self.entries, self.spec.slo, self.spec.basis)
        doc["recommendation"] = asdict(pick) if pick else None
        tmp = self.dir / ".search.json.tmp"
        tmp.write_text(json.dumps(doc, indent=2))
        os.replace(tmp, self.dir / "search.json")

    def _count(self) -> None:
        n = len(self.spec.workload.concurrencies)
        self.progress.steps_done = sum(n if e.status in ("done", "failed") else len(e.results) for e in self.entries)

    def _say(self, on_progress: Callable[[Progress], None] | None, phase: str, words: str) -> None:
        self.progress.phase, self.progress.words = phase, words
        self._count()
        if on_progress is not None:
            on_progress(self.progress)

    def recommendation(self) -> Pick | None:
        return recommend(self.entries, self.spec.slo, self.spec.basis)

    async def run(self, on_progress: Callable[[Progress], None] | None = None) -> None:
        """Every layout not done yet, in order; interrupted (cancelled), it tears down the layout under way and
        keeps what was done for the next run."""
        from ..run.allocation import hold_nodes, release_hold
        from ..run.run import Run

        for e in self.entries:  # an interrupted search may have left a layout's run up
            if e.status in ("launching", "benching") and e.run:
                self._say(on_progress, "tearing down", f"{e.layout}: tearing down run {e.run}, left by an interrupted "
                                                       f"search")
                await _teardown(Run, e.run)
                e.status, e.run, e.results = "pending", "", []
                self.save()
        todo = [i for i, e in enumerate(self.entries) if e.status not in ("done", "failed")]
        try:
            if todo and self.spec.job:
                self.job = self.spec.job
            elif todo:
                need = max(self.spec.layouts[i].prefill + self.spec.layouts[i].decode for i in todo)
                self.job = await hold_nodes(self.spec.cluster, self.spec.nodes[:need], self.id, str(self.dir),
                                            lambda w: self._say(on_progress, "allocating", w))
                self.job_owned = self.job is not None
            self.save()
            for i in todo:
                await self._one(i, on_progress)
        except asyncio.CancelledError:
            self._say(on_progress, "interrupted", "interrupted: the layouts done are kept; run the same search again "
                                                  "to go on")
            raise
        finally:
            if self.job and self.job_owned:
                words = await _whatever(release_hold(self.spec.cluster, self.job, self.id, str(self.dir)))
                self._say(on_progress, self.progress.phase, "; ".join(words))
                self.job, self.job_owned = None, False
            self.save()
        self._say(on_progress, "done", "search done")

    async def _one(self, i: int, on_progress: Callable[[Progress], None] | None) -> None:
        from ..run.run import Run
        from .bench import bench, check_target, target_of

        e, lay, spec = self.entries[i], self.spec.layouts[i], self.spec
        self.progress.layout = i
        e.status, e.started, e.reason, e.results = "launching", time.time(), "", []
        self._say(on_progress, "launching", f"{lay.name}: bringing it up on {', '.join(spec.nodes)}")
        try:
            ws, a = await _assess(spec, lay)
        except MeasureInputError as err:
            self._fail(e, str(err))
            return
        if not a.ok:
            errs = [f"{f.rule}: {f.message}" for f in a.findings if f.severity == "error"]
            self._fail(e, "cannot be planned: " + "; ".join(errs[:3]))
            return
        run = None
        made: list[Any] = []

        async def keep(r: Any) -> None:  # the run exists (its processes about to start): torn down whatever comes
            made.append(r)
            e.run = r.id
            self.save()

        try:
            try:
                run = await Run.launch(ws, a, job_id=self.job, on_run=keep,
                                       progress=lambda w: self._say(on_progress, "launching", f"{lay.name}: {w}"))
            except Exception as err:  # an AtomdeckError for a refusal; anything else is recorded, not raised
                self._fail(e, f"launch failed: {err}")
                return
            e.run = run.id
            self.save()
            self._say(on_progress, "waiting", f"{lay.name}: run {run.id} starting")
            timeout = run.recipe.health.worker_timeout_s + run.recipe.health.router_timeout_s + 30
            state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=timeout)
            if state.status != "serving":
                self._fail(e, f"did not serve ({state.status}): {state.diagnosis}")
                return
            e.status = "benching"
            self.save()
            target = target_of(run)
            w = Workload(**{**spec.workload.to_json(), "goodput": spec.slo or spec.workload.goodput})
            self._say(on_progress, "benching", f"{lay.name}: benching {w.key}")
            await check_target(target, w)
            self.live = Live()

            def step_done(_i: int, step: Any) -> None:
                e.results.append(step.summary)
                self._count()
                self._say(on_progress, "benching", f"{lay.name}: concurrency {step.concurrency} done")

            report = await bench(target, w, checked=True, live=self.live, on_step=step_done)
            e.gpus, e.report, e.results = report.gpus.to_json(), report.path or "", list(report.results)
            bad = report.problems()
            e.status, e.reason = "done", "; ".join(bad)
        except MeasureInputError as err:
            self._fail(e, str(err))
        finally:
            e.finished = time.time()
            run = run or (made[0] if made else None)
            if run is not None:
                self._say(on_progress, "tearing down", f"{lay.name}: tearing down run {run.id}")
                await _whatever(_teardown_run(run))
            if e.status in ("launching", "benching"):  # interrupted: its run is gone, the layout is still to do
                e.status, e.run, e.results = "pending", "", []
            self.save()
            self._count()

    def _fail(self, e: Entry, why: str) -> None:
        e.status, e.reason = "failed", why
        self.save()

    def to_json(self) -> dict:
        pick = self.recommendation()
        return {"search": self.id, "dir": str(self.dir), "spec": self.spec.to_json(), "resumed": self.resumed,
                "entries": [asdict(e) for e in self.entries],
                "recommendation": (asdict(pick) | {"words": pick.words(self.spec.basis)}) if pick else None}

    def reports(self) -> list[dict]:
        """The entries as bench reports (for compare.rows and the chart)."""
        return [{"run": e.run, "layout": e.layout, "gpus": e.gpus, "workload_key": self.spec.workload.key,
                 "results": e.results} for e in self.entries if e.results]


async def _assess(spec: SearchSpec, lay: Layout) -> tuple[Any, Any]:
    from ..config.errors import AtomdeckError
    from ..design.edit import set_field
    from ..design.workspace import load_workspace
    from ..run.inventory import fetch_inventory

    try:
        ws = load_workspace(spec.recipe, spec.cluster)
        for path, value in lay.edits().items():
            ws.recipe = set_field(ws.recipe, path, value)
        ws.inventory, ws.inventory_note = await fetch_inventory(ws.cluster)
    except AtomdeckError as err:
        raise MeasureInputError(str(err)) from None
    return ws, ws.assess(spec.nodes)


async def _whatever(work: Any) -> Any:
    """Await `work` to its end even when the caller is cancelled meanwhile (a teardown, a release: an interrupted
    search must not leave a layout running or the allocation held); the cancel is raised once it is done."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


async def _teardown_run(run: Any) -> None:
    try:
        await run.teardown(grace=5)
    finally:
        await run.close()


async def _teardown(run_cls: Any, run_id: str) -> None:
    from ..config.errors import AtomdeckError

    try:
        run = run_cls.open(run_id)
    except AtomdeckError:
        return
    await _teardown_run(run)
