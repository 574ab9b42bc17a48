"""CLI verbs that act on runs: up, status, watch, logs, down, runs."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
import time
from collections.abc import Coroutine
from typing import Any

from ..run.diagnose import diagnose, parked_words
from ..run.events import Event, RunState
from ..run.run import Run
from ..run.rundir import RunDir
from .output import fail, storage_notices, unsaved_notice
from .status_text import status_json, status_text

_QUIET_KINDS = {"cell"}
PARKED_SHOW_S = 10.0  # `atomdeck watch`: a decode's parked requests are shown again this often while any waits


def _progress(t0: float):
    def show(e: Event) -> None:
        if e.kind == "cell" and e.value != "open":
            return
        subject = e.name or ""
        print(f"[{time.time() - t0:6.1f}s] {e.kind:10} {subject:22} {e.value:16} {e.detail[:100]}",
              file=sys.stderr, flush=True)
    return show


_COUNT = re.compile(r"(\d+) of (\d+) processes started(?:, (\d+) could not start)?")


def _launch_progress(t0: float):
    """Print what a launch does (stderr): each new step, a long wait every 10 s, a count when it is complete."""
    last_shape, last_at = "", 0.0

    def say(text: str) -> None:
        nonlocal last_shape, last_at
        now, shape = time.time(), re.sub(r"\d+", "#", text)
        count = _COUNT.fullmatch(text)
        if count:
            s, total, f = int(count[1]), int(count[2]), int(count[3] or 0)
            if s + f < total and shape == last_shape:
                return
        elif shape == last_shape and now - last_at < 10:
            return
        last_shape, last_at = shape, now
        print(f"[{now - t0:6.1f}s] launch     {text}", file=sys.stderr, flush=True)
    return say


def cmd_up(args: argparse.Namespace) -> int:
    from .design_verbs import _findings_text, prepare
    from .output import fail as _fail

    ws, a = prepare(args)
    if not a.ok:
        errors = len(a.errors())
        return _fail(getattr(args, "json", False), 1, "lint",
                     f"nothing launched: {errors} error(s) must be fixed first" if a.plan else
                     "nothing launched: no plan could be made", [f.to_json() for f in a.findings],
                     [*_findings_text(a.findings), "atomdeck: nothing launched: fix the errors above"])
    return asyncio.run(_up(ws, a, args))


def _interrupted(as_json: bool, message: str) -> None:
    """Ctrl-C during `up`: say what was left and how to stop it (the exit status is 130 all the same)."""
    fail(as_json, 130, "interrupted", message, text=[f"atomdeck: {message}"])


def up_json(run: Run, state: RunState, *, waited: bool, timeout: float | None = None) -> dict:
    """What `up --json` prints: the run, where it serves, and (after --wait) how it ended."""
    d = diagnose(state)
    out = {"run": run.id, "status": state.status, "readiness": state.readiness(),
           "router": run.plan.router.url, "model": run.recipe.model.client_name,
           "processes": {n: {"node": h.node, "launcher": h.launcher} for n, h in run.handles.items()},
           "waited": waited, "diagnosis": state.diagnosis or d.headline, "details": d.details}
    if waited and state.status not in ("serving", "failed"):
        out["diagnosis"] = f"timed out after {timeout:g}s: {d.headline}"
    return out


async def _up(ws, a, args) -> int:
    t0 = time.time()
    as_json = getattr(args, "json", False)
    made: list[Run] = []

    async def keep(run: Run) -> None:
        made.append(run)
        storage_notices(run, as_json)

    try:
        run = await Run.launch(ws, a, job_id=args.job, progress=_launch_progress(t0), on_run=keep)
    except asyncio.CancelledError:  # Ctrl-C: what started runs on, recorded; say how to stop it
        if made:
            _interrupted(as_json, made[0].state.diagnosis)
        raise
    if not as_json:
        print(run.id, flush=True)
    if not args.wait:
        print(f"launched {len(run.handles)} processes; watch with `atomdeck status {run.id}`, "
              f"stop with `atomdeck down {run.id}`", file=sys.stderr)
        await run.close()
        unsaved_notice(run, as_json)
        if as_json:
            print(json.dumps(up_json(run, run.state, waited=False), indent=2, default=str))
        return 0 if run.state.status != "failed" else 1
    run.listeners.append(_progress(t0))
    timeout = args.timeout or (run.recipe.health.worker_timeout_s + run.recipe.health.router_timeout_s + 30)
    try:
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=timeout)
    except asyncio.CancelledError:  # Ctrl-C while waiting: stop waiting, not the run
        _interrupted(as_json, f"interrupted: stopped waiting for run {run.id} ({run.state.status}: "
                              f"{run.state.readiness()}); it goes on: `atomdeck watch {run.id}` follows it, "
                              f"`atomdeck down {run.id}` stops it")
        raise
    finally:
        await run.close()
        unsaved_notice(run, as_json)
    if as_json:
        print(json.dumps(up_json(run, state, waited=True, timeout=timeout), indent=2, default=str))
    if state.status == "serving":
        print(f"serving: {state.readiness()} at {run.plan.router.url} (model {run.recipe.model.client_name})",
              file=sys.stderr)
        return 0
    d = diagnose(state)
    why = state.diagnosis or d.headline
    if state.status != "failed":
        why = f"timed out after {timeout:g}s: {d.headline}"
    print(f"FAILED: {why}", file=sys.stderr)
    for line in d.details[:8]:
        print(f"  {line}", file=sys.stderr)
    print(f"the processes are left running for inspection; stop them with `atomdeck down {run.id}`",
          file=sys.stderr)
    return 1


def cmd_watch(args: argparse.Namespace) -> int:
    """Follow a run's events until Ctrl-C (or until the run is torn down): one line each, or one
    JSON event per line with --json."""
    run = Run.open(args.run)
    t0 = time.time()

    parked: dict[str, tuple[float, float]] = {}  # decode -> (count, when) last shown

    def show(e: Event) -> None:
        if args.json:
            print(e.to_json(), flush=True)
            return
        if e.kind == "metrics" and "parked" in e.data:  # a decode's parked requests: at a change, and every
            n, (was, at) = e.data.get("parked") or 0, parked.get(e.name, (0, 0.0))  # PARKED_SHOW_S while any
            if n == was and (not n or e.t - at < PARKED_SHOW_S):
                return
            parked[e.name] = (n, e.t)
            e = Event("kv.parked", e.name, str(n), parked_words(e.data) or "no request parked for KV", t=e.t)
        if e.kind == "metrics" or (e.kind == "cell" and e.value != "open"):
            return
        print(f"[{time.strftime('%H:%M:%S', time.localtime(e.t))}] {e.kind:11} {e.name or '':22} {e.value:13} "
              f"{e.detail[:160]}", flush=True)

    if args.json:
        print(json.dumps({"kind": "watching", "name": run.id, "value": run.state.status,
                          "detail": run.state.diagnosis, "data": {}, "t": t0}), flush=True)
    else:
        print(f"watching {run.id}: {run.state.status}: {run.state.diagnosis or diagnose(run.state).headline} "
              f"(Ctrl-C to stop)", flush=True)
        for words in run.state.storage.values():  # found when it was opened; later changes are events shown
            print(f"[{time.strftime('%H:%M:%S')}] storage     {words}", flush=True)
    run.listeners.append(show)

    return _until_ctrl_c(run, run.watch(until=lambda s: s.status in ("stopped", "dirty")))


def cmd_status(args: argparse.Namespace) -> int:
    run = Run.open(args.run)

    async def go() -> RunState:
        try:
            if run.state.status not in ("stopped",):
                state = await run.refresh()
                await run.check_log_space()  # a node's full log directory, named with the node and the path
                return state
            return run.state
        finally:
            await run.close()

    state = asyncio.run(go())
    if args.json:
        print(json.dumps(status_json(run, state), indent=2, default=str))
    else:
        print(status_text(run, state))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    run = Run.open(args.run)
    storage_notices(run, getattr(args, "json", False))
    names = [args.process] if args.process else list(run.handles)
    for n in names:
        run.local_log(n)  # an unknown process name is a clear error, not a traceback
    if getattr(args, "json", False):
        return _logs_json(run, names, args)
    prefix = len(names) > 1

    async def follow(name: str) -> None:
        async for line in run.follow_log(name, args.lines or 0):
            print(f"{name}| {line}" if prefix else line, flush=True)

    async def go() -> None:
        if args.follow:
            await asyncio.gather(*(follow(n) for n in names))
        else:
            for n in names:
                for line in await run.log_lines(n, args.lines):
                    print(f"{n}| {line}" if prefix else line)

    return _until_ctrl_c(run, go())


def _logs_json(run: Run, names: list[str], args: argparse.Namespace) -> int:
    """JSON lines: {"process", "node", "text", "offset"} per log line; offset is the byte offset in the
    process's log just after the line (give it back to resume)."""

    def emit(name: str, offset: int, text: str) -> None:
        rec = {"process": name, "node": run.handles[name].node, "text": text, "offset": offset}
        print(json.dumps(rec), flush=True)

    async def one(name: str) -> None:
        records = await run.log_records(name, args.lines)
        for offset, text in records:
            emit(name, offset, text)
        if args.follow:
            start = records[-1][0] if records else (0 if args.lines else None)
            async for offset, text in run.follow_records(name, start):
                emit(name, offset, text)

    async def go() -> None:
        if args.follow:
            await asyncio.gather(*(one(n) for n in names))
        else:
            for n in names:
                await one(n)

    return _until_ctrl_c(run, go())


def cmd_down(args: argparse.Namespace) -> int:
    run = Run.open(args.run)

    storage_notices(run, args.json)

    async def go():
        try:
            if not args.json:
                run.listeners.append(_teardown_progress(time.time()))
            return await run.teardown(args.grace)
        finally:
            await run.close()

    report = asyncio.run(go())
    unsaved_notice(run, args.json)
    if args.json:
        print(json.dumps({"run": run.id, **report.to_json(), "storage": {"problems": dict(run.state.storage),
                                                                          "unsaved": run.unsaved_words}}, indent=2))
    else:
        print("\n".join(report.lines()))
    return 0 if report.clean else 1


def _teardown_progress(t0: float):
    def show(e: Event) -> None:
        if e.kind == "teardown":
            print(f"[{time.time() - t0:5.1f}s] {e.name:14} {e.value:9} {e.detail}", file=sys.stderr, flush=True)
    return show


def cmd_runs(args: argparse.Namespace) -> int:
    runs = Run.list()
    if args.json:
        print(json.dumps({"runs": runs}, indent=2, default=str))
        return 0
    if not runs:
        print("no runs yet; start one with `atomdeck up RECIPE`")
        return 0
    return runs_text(runs)


def runs_text(runs: list[dict], width: int | None = None) -> int:
    """The table, its columns as wide as their longest value (long run ids and cluster names). On a terminal a
    diagnosis is cut to the terminal's width, marked, and `atomdeck status` named for the whole of it; piped,
    every line is whole (for grep). `width`: the terminal's columns (None: asked when stdout is a terminal)."""
    if width is None and sys.stdout.isatty():
        width = shutil.get_terminal_size().columns
    w_id = max([3, *(len(str(m["id"])) for m in runs)])
    w_status = max([6, *(len(str(m.get("status", "?"))) for m in runs)])
    w_cluster = max([7, *(len(str(m.get("cluster", "?"))) for m in runs)])
    room = None if width is None else max(30, width - (w_id + w_status + w_cluster + 19 + 4))
    print(f"{'RUN':{w_id}} {'STATUS':{w_status}} {'CLUSTER':{w_cluster}} {'STARTED':19} DIAGNOSIS")
    cut = None
    for m in runs:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m.get("created", 0)))
        diagnosis = " ".join((m.get("diagnosis") or "").split())
        if room is not None and len(diagnosis) > room:
            diagnosis, cut = diagnosis[:room - 1] + "…", cut or m["id"]
        print(f"{m['id']:{w_id}} {m.get('status', '?'):{w_status}} {m.get('cluster', '?'):{w_cluster}} "
              f"{started:19} {diagnosis}".rstrip())
    if cut:
        print(f"(… cut to the terminal's width: `atomdeck status RUN` shows the whole diagnosis, e.g. "
              f"`atomdeck status {cut}`)")
    return 0


__all__ = ["RunDir", "cmd_down", "cmd_logs", "cmd_runs", "cmd_status", "cmd_up", "cmd_watch"]


def _until_ctrl_c(run: Run, work: Coroutine[Any, Any, Any]) -> int:
    """Run a following verb's work, closing the run's connections however it ends; Ctrl-C is the
    normal way to stop following, so it exits 0."""

    async def go() -> None:
        try:
            await work
        finally:
            await run.close()

    try:
        asyncio.run(go())
    except KeyboardInterrupt:
        pass
    unsaved_notice(run)
    return 0
