"""Bench results on disk, in the run directory: `bench/<timestamp>.json` (one object: run, layout, GPUs,
workload, one result per concurrency step) and `bench/<timestamp>.requests.jsonl` (every request's record)
beside it, so runs can be compared long after teardown.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.storage import Unwritable, fix_words, private_dir, spill_root, unwritable
from .stats import Gpus
from .workload import Workload

if TYPE_CHECKING:
    from .sweep import StepResult

BENCH_DIR = "bench"


@dataclass
class BenchReport:
    """One bench of one run: what the CLI's --json prints and the file holds."""

    run: str
    layout: str
    model: str
    gpus: Gpus
    workload: Workload
    router: str = ""
    recipe: str = ""
    started: float = field(default_factory=time.time)
    finished: float | None = None
    results: list[dict] = field(default_factory=list)
    warmup: dict = field(default_factory=dict)
    path: str | None = None  # where it was saved
    save_problem: str = ""  # the run directory could not take it: why, where it went instead, what to do

    def to_json(self) -> dict:
        return {"run": self.run, "layout": self.layout, "model": self.model, "recipe": self.recipe,
                "router": self.router, "gpus": self.gpus.to_json(), "workload": self.workload.to_json(),
                "workload_key": self.workload.key, "started": self.started, "finished": self.finished,
                "warmup": self.warmup, "results": self.results}

    @property
    def complete(self) -> bool:
        """Every step done and valid (validity.py): nothing failed, nothing short, the run healthy throughout, ..."""
        return bool(self.results) and all(r["failed"] == 0 and r["short"] == 0 and r.get("valid", True)
                                          for r in self.results)

    def problems(self) -> list[str]:
        """Why the bench is not complete, one line per step that is invalid (its reasons) or had failed or short
        requests."""
        out = []
        for r in self.results:
            if r.get("valid", True) is False and r.get("invalid_reasons"):
                out.append(f"concurrency {r['max_concurrency']} INVALID: " + "; ".join(r["invalid_reasons"]))
            elif r["failed"] or r["short"]:
                top = ", ".join(f"{n}x {e}" for e, n in sorted(r.get("errors", {}).items(), key=lambda x: -x[1])[:2])
                out.append(f"concurrency {r['max_concurrency']}: {r['failed']} failed, {r['short']} short"
                           + (f" ({top})" if top else ""))
        return out


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def save(run_dir: str | Path, report: BenchReport, steps: list[StepResult]) -> Path:
    """Write the report and the raw records into <run_dir>/bench/; returns the report's path. A run directory
    that cannot take them (full, over quota, read-only) does not lose them: they go to the run's spill directory
    ($TMPDIR/atomdeck-UID/unsaved/RUN/bench, read by `load_all` too) and `report.save_problem` says so."""
    try:
        return _save_in(Path(run_dir) / BENCH_DIR, report, steps)
    except OSError as e:
        if not unwritable(e):
            raise
        t = Unwritable.of(Path(run_dir), e)
        elsewhere = _spilled(run_dir)  # where the run's other unsaved files wait: written back with them
        if not private_dir(elsewhere.parent.parent):
            raise
        elsewhere.parent.mkdir(mode=0o700, exist_ok=True)
        elsewhere.mkdir(mode=0o700, exist_ok=True)
        path = _save_in(elsewhere, report, steps)
        fix = fix_words(t.code, t.directory, t.mount)
        report.save_problem = (f"the bench could not be saved in {t.where()} ({t.reason}); saved in {elsewhere} "
                               f"instead (`atomdeck compare` finds it there); the next atomdeck that finds room in the "
                               f"run directory moves it there. Fix: {fix}")
        return path


def _spilled(run_dir: str | Path) -> Path:
    return spill_root() / Path(run_dir).name / "files" / BENCH_DIR


def _remove(*paths: Path) -> None:
    for p in paths:
        try:
            p.unlink()
        except OSError:
            pass


def _save_in(d: Path, report: BenchReport, steps: list[StepResult]) -> Path:
    d.mkdir(mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(report.started))
    name, n = stamp, 1
    while (d / f"{name}.json").exists():
        n += 1
        name = f"{stamp}-{n}"
    lines = [json.dumps({"max_concurrency": s.concurrency, **r.to_json()}) for s in steps for r in s.records]
    doc = report.to_json() | {"requests_file": f"{name}.requests.jsonl"}
    tmp = d / f".{name}.json.tmp"
    try:
        _write_private(d / f"{name}.requests.jsonl", "".join(line + "\n" for line in lines))
        _write_private(tmp, json.dumps(doc, indent=2))
        os.replace(tmp, d / f"{name}.json")
    except OSError:  # nothing half-written is left (on a full disk it holds the last blocks)
        _remove(tmp, d / f"{name}.requests.jsonl")
        raise
    report.path = str(d / f"{name}.json")
    return d / f"{name}.json"


def load_all(run_dir: str | Path) -> list[dict]:
    """Every bench report of a run, oldest first (damaged files are skipped and named in 'damaged'); also those
    saved in the run's spill directory when the run directory could not take them."""
    found = []
    for d in (Path(run_dir) / BENCH_DIR, _spilled(run_dir)):
        found += sorted(d.glob("*.json")) if d.is_dir() else []
    out = []
    for p in sorted(found, key=lambda p: p.name):
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("results"), list):
            doc["path"] = str(p)
            out.append(doc)
    return out
