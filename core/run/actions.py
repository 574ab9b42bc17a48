"""Acting on a live run (issue 38): restart one process in place, remove a worker, add one, without tearing the
rest down. The CLI's verbs and the console's keys call these; each step is recorded where every session reads it
(core/run/intents.py) and as an event in the run's log, with who acted and how it ended.

A restart goes drain -> stop -> start -> ready -> re-register:
- drain: the worker is removed from the router (AToMesh's `DELETE /workers/{id}`, an asynchronous job: its status is
  read back until the router no longer lists it), then its in-flight requests are waited for, read from its own
  `/metrics` (`atom:requests_running` + `atom:requests_waiting`; the router's per-worker gauge reads 0 right after
  a removal whatever is in flight: atom/mesh/src/core/worker.rs, see core/remote/router_api.py). ATOM at the
  router's pin has no /metrics: then the drain waits out its timeout. Past the timeout, what is still in flight is
  named and ended with the process (its clients get an error).
- stop: the same verified stop as a teardown, for that one process and its whole tree.
- start: the same argv and environment (or what the operator edited), through the run's launcher: on Slurm a new
  step of the run's allocation, never a new job.
- ready: the process's port open and `/health` 200, read from the run's state as the watchers fold it (the
  watching session follows the new process: core/run/watchers/logs.py), then every KV pair it is in: both sides
  registered and the producer's handshake ports reachable from the consumer's node.
- re-register: `POST /workers` (url, worker_type; the job's status read back until it is registered), then
  completions through the router until one was served by this worker (its own `atom:requests_finished` moves).

The router itself has no router to drain from: restarting it stops and starts it; clients see the gap.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import TYPE_CHECKING

from ..config.errors import AtomdeckError
from ..remote.probes import HttpClient
from .actor import ActionFailed, ActionResult, Actor, check_live, check_target
from .diagnose import last_words, meaning
from .drain import RouterSide, drain_worker
from .events import TERMINAL, Event
from .intents import how_to_finish, read, source

if TYPE_CHECKING:
    from ..design.commands import ProcessSpec
    from ..launch.base import ProcHandle
    from .actor import Run

DRAIN_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0  # as a teardown's (run.DEFAULT_GRACE)
POLL_S = 0.1
READY_STAGE = "http_up"


async def restart(run: Run, name: str, *, drain: bool = True, drain_timeout: float = DRAIN_TIMEOUT_S,
                  spec: ProcessSpec | None = None, who: str = "", resume: bool = False) -> ActionResult:
    """Restart one process in place: drain, stop, start, ready, re-register (see the module). `spec`: what to
    start instead of the process as launched (an edited argv or env). `resume`: finish a restart that was cut
    short (its session went away) or failed, from where the process is: a live, registered one is restarted
    whole; a live one the router lost is registered again; a stopped one is started."""
    check_target(run, name)
    earlier = _resumable(run, name, "restart") if resume else None
    with Actor(run, "restart", name, who or source("CLI"), {"edited": spec is not None}, earlier) as act:
        try:
            return await _restart(run, act, name, drain, drain_timeout, spec, resume)
        except ActionFailed as e:
            return act.end("failed", str(e))


async def _restart(run: Run, act: Actor, name: str, drain: bool, drain_timeout: float,
                   spec: ProcessSpec | None, resume: bool) -> ActionResult:
    proc = run.processes[name]
    is_router = proc.role == "router"
    await _node_reachable(run, proc.node)
    router = RouterSide(run)
    try:
        alive = _alive(run, name)
        listed = False if is_router else await router.listed(name)
        if resume and alive and not listed and not is_router:
            act.step("resuming", f"{name} runs but the router does not list it: registering it again")
            await wait_ready(run, act, name, run.handles[name])
        else:
            if resume:
                act.step("resuming", "restarting it whole" if alive else f"{name} is stopped: starting it")
            if alive:
                if not is_router and listed:
                    if drain:
                        await drain_worker(run, act, router, name, drain_timeout)
                    else:
                        await router.remove(act, name)
                await stop_one(run, name, act)
                act.step("stopped")
            elif listed:  # dead but still listed (a crash): out first, or the router refuses its AddWorker
                await router.remove(act, name)
            new = await start_one(run, act, name, spec or (router_spec(run) if is_router else None))
            await wait_ready(run, act, name, new)
        if not is_router:
            await router.register(act, name)
            await router.smoke_through(act, name)
        else:
            await wait_router_serving(run, act, router)
    finally:
        await router.close()
    took = time.monotonic() - act.t0
    return act.end("done", f"serving again after {took:.1f}s")


async def remove(run: Run, name: str, *, drain: bool = True, drain_timeout: float = DRAIN_TIMEOUT_S,
                 who: str = "", resume: bool = False) -> ActionResult:
    """Take a worker out of the live run: drained (or not), stopped verified, and recorded as removed, so that
    status, down, a reattach and the Runs screen know it. The router is not asked again: it was told first.
    `resume`: finish a removal that was cut short or failed (each step is skipped when already done)."""
    check_target(run, name)
    role = run.processes[name].role
    if role == "router":
        raise AtomdeckError("the router cannot be removed from its run: `atomdeck down` ends the run, `atomdeck "
                            "restart RUN router` restarts it")
    left = [n for n, p in run.state.procs.items() if p.role == role and not p.removed and n != name]
    if not left:
        raise AtomdeckError(f"{name} is the run's only {role}: without it the router has nothing to send requests "
                            f"to (every request would fail); `atomdeck down {run.id}` ends the run")
    earlier = _resumable(run, name, "remove") if resume else None
    with Actor(run, "remove", name, who or source("CLI"), resume=earlier) as act:
        try:
            await _take_out(run, act, name, drain, drain_timeout)
        except ActionFailed as e:
            return act.end("failed", str(e))
        return act.end("done", f"removed after {time.monotonic() - act.t0:.1f}s; {len(left)} {role}(s) serve")


async def _take_out(run: Run, act: Actor, name: str, drain: bool, drain_timeout: float) -> None:
    """Out of the router (drained or not), stopped verified, recorded as removed; a step already done is
    skipped (a resumed removal, an add rolled back)."""
    router = RouterSide(run)
    try:
        await _node_reachable(run, run.processes[name].node)
        if drain and _alive(run, name):
            await drain_worker(run, act, router, name, drain_timeout)
        else:
            await router.remove(act, name)
        if _alive(run, name):
            await stop_one(run, name, act)
        run.emit(Event("proc.removed", name, "", f"removed by {act.intent.source}"))
    finally:
        await router.close()


def _resumable(run: Run, name: str, kind: str):
    """The record of the action on `name` that was cut short or failed, to be finished; refused otherwise."""
    earlier = read(run.rd.path, name)
    if earlier is None or not (earlier.cut_short or earlier.step == "failed"):
        raise AtomdeckError(f"no action on {name} was cut short or failed: there is nothing to resume")
    if earlier.kind != kind:
        raise AtomdeckError(f"the action on {name} that was cut short is a {earlier.kind}: "
                            f"{how_to_finish(run.id, earlier)}")
    return earlier


BEFORE_STOP = ("requested", "draining", "drained")


async def rollback(run: Run, name: str, *, who: str = "") -> ActionResult:
    """Undo an action cut short, putting back what it changed: a restart or a removal stopped before the process
    was (it was only taken out of the router) has it registered again and checked serving; an added worker is
    taken out of the router, stopped and removed. A process an action already stopped cannot be put back: the
    refusal says what finishes it instead."""
    check_live(run)
    earlier = read(run.rd.path, name)
    if earlier is None or not earlier.cut_short:
        raise AtomdeckError(f"no action on {name} was cut short: there is nothing to roll back"
                            + (f" (the last one, a {earlier.kind}, ended {earlier.step})" if earlier else ""))
    if earlier.kind == "add":
        if name not in run.processes or name not in run.state.procs:  # cut short before it was planned
            with Actor(run, "add", name, who or source("CLI"), resume=earlier) as act:
                return act.end("rolled back", f"{name} was never started: nothing to undo")
        with Actor(run, "add", name, who or source("CLI"), resume=earlier) as act:
            try:
                await _take_out(run, act, name, drain=True, drain_timeout=DRAIN_TIMEOUT_S)
            except ActionFailed as e:
                return act.end("failed", str(e))
            return act.end("rolled back", f"the added {name} is stopped and out of the run")
    check_target(run, name)
    if earlier.step not in BEFORE_STOP:
        then = (f"`atomdeck restart {run.id} {name} --resume` starts it again" if earlier.kind == "restart" else
                f"`atomdeck remove {run.id} {name} --resume` finishes the removal, after which `atomdeck add "
                f"{run.id} --role {run.processes[name].role}` starts a worker in its slot")
        raise AtomdeckError(f"the {earlier.kind} of {name} was cut short at step {earlier.step}, after it stopped "
                            f"the process: there is nothing to put back; {then}")
    with Actor(run, earlier.kind, name, who or source("CLI"), resume=earlier) as act:
        router = RouterSide(run)
        try:
            if not _alive(run, name):
                raise ActionFailed(f"{name} is no longer running (it ended after the {earlier.kind} was cut "
                                   f"short): `atomdeck restart {run.id} {name}` starts it")
            if await router.listed(name):
                act.step("registered", "the router still lists it: nothing to put back")
            else:
                await router.register(act, name)
                await router.smoke_through(act, name)
        except ActionFailed as e:
            return act.end("failed", str(e))
        finally:
            await router.close()
        return act.end("rolled back", f"{name} serves as before the {earlier.kind}")


def _alive(run: Run, name: str) -> bool:
    p = run.state.procs.get(name)
    return p is not None and p.alive is not False and p.stage not in TERMINAL


async def _node_reachable(run: Run, node: str) -> None:
    try:
        async with asyncio.timeout(20):
            health = await run.launcher.node_health([node])
    except (OSError, AtomdeckError, TimeoutError) as e:
        raise ActionFailed(f"{node} cannot be reached: {e}; nothing was done") from None
    why = health.get(node, "")
    if why:
        raise ActionFailed(f"{node} is not usable ({why}); nothing was done")


# ---- the router's side ---------------------------------------------------------------------------------------

async def stop_one(run: Run, name: str, act: Actor) -> None:
    """The same verified stop as a teardown, for this process's whole tree; recorded as the stop the action
    meant (by its PID: a process the action starts after it that ends is not a stop)."""
    h = run.handles.get(name)
    act.intent.stopping_pid = (h.pid or 0) if h is not None else 0
    act.step("stopping", "the same verified stop as a teardown, for this process's whole tree")
    if h is None or not h.pid:
        return
    (report,) = await run.launcher.stop([h], STOP_GRACE_S)
    p = run.state.procs.get(name)
    if report.ok and p is not None and p.alive is not False and p.pid in (None, h.pid):
        run.emit(Event("proc.exit", name, "stopped", report.detail))  # (as a teardown says it: verified gone)
    if not report.ok:
        raise ActionFailed(f"{name} could not be stopped ({report.detail}); it was not started again: look at it "
                           f"with `atomdeck status {run.id}`")


def unmasked(spec: ProcessSpec) -> ProcessSpec:
    """A recorded spec with its masked secret values (run directories never hold secrets) taken from this
    session's environment; raises naming the ones it lacks."""
    import os
    from dataclasses import replace

    from ..config.secrets import MASK

    missing = sorted(k for k, v in spec.all_env().items() if v == MASK and k not in os.environ)
    if missing:
        raise ActionFailed(f"{spec.name}'s environment has {', '.join(missing)}, which the run directory keeps "
                           f"masked: give {'them' if len(missing) > 1 else 'it'} in this atomdeck's environment "
                           f"({missing[0]}=...) to start it again")
    if not any(v == MASK for v in spec.all_env().values()):
        return spec

    def fill(env: dict[str, str]) -> dict[str, str]:
        return {k: os.environ[k] if v == MASK else v for k, v in env.items()}

    def argv(tokens: list[str]) -> list[str]:  # K=*** assignments in the wrappers (env, srun --export)
        out = []
        for t in tokens:
            k, eq, v = t.partition("=")
            out.append(f"{k}={os.environ[k]}" if eq and v == MASK and k in os.environ else t)
        return out

    return replace(spec, env=fill(spec.env), runtime_env=fill(spec.runtime_env), argv=argv(spec.argv),
                   launch_argv=argv(spec.launch_argv), inner=argv(spec.inner))


async def start_one(run: Run, act: Actor, name: str, spec: ProcessSpec | None) -> ProcHandle:
    """The process as launched (its recorded spec: the same argv and environment) or as edited, through the
    run's launcher; its handle saved where every session finds it (the watching one follows it from there)."""
    from .runfiles import recorded_spec

    want = unmasked(spec or recorded_spec(run.rd, name) or run.processes[name])
    act.step("starting", f"on {want.node}" + (" (edited)" if spec is not None else ""))
    try:
        h = await run.launcher.start(want, attempt=uuid.uuid4().hex[:8])
    except (OSError, AtomdeckError) as e:
        raise ActionFailed(f"{name} could not be started on {want.node}: {e}; retry with `atomdeck restart "
                           f"{run.id} {name} --resume`") from None
    run.rd.save_handle(h)
    run.handles[name] = h
    if spec is not None:
        from .runfiles import write_spec

        run.processes[name] = spec
        write_spec(run.rd, spec)
    act.step("loading", f"pid {h.pid} on {h.node}")
    return h


async def wait_ready(run: Run, act: Actor, name: str, h: ProcHandle) -> None:
    """Until the new process answers GET /health on its port (asked directly, as the barrier's check does; the
    watchers' stages show its progress meanwhile), then until every KV pair it is in is checked again from the
    consumers' nodes. A crash or the recipe's health timeout fails it, saying which and why."""
    p = run.state.procs
    spec = run.processes[name]
    is_router = spec.role == "router"
    if is_router:
        host, port, node = run.plan.router.host, run.plan.router.port, run.plan.router.node
    else:
        ep = run.plan.endpoint(name)
        host, port, node = ep.host, ep.http_port, ep.node
    runner = run.launcher.probe_runner(node)
    limit = run.recipe.health.router_timeout_s if is_router else run.recipe.health.worker_timeout_s
    deadline = time.monotonic() + limit
    shown = ""
    http = HttpClient()
    try:
        while True:
            st = p[name]
            _check_alive(run, name, h)
            r = await http.get(host, port, "/health", 2.0, runner)
            if r.ok:
                if not is_router:
                    run.emit_stage(name, "http_up", "GET /health 200")
                break
            if st.stage != shown and st.pid == h.pid:  # (the old process's state until the watch follows it)
                shown = st.stage
                act.step("loading", f"{st.stage.replace('_', ' ')} (pid {h.pid})")
            if time.monotonic() >= deadline:
                raise ActionFailed(f"the new {name} (pid {h.pid}) is not up after {limit:g}s (health timeout); it is "
                                   f"{st.stage.replace('_', ' ')}; last: {list(st.last_lines)[-1:] or ''}")
            await asyncio.sleep(POLL_S)
    finally:
        await http.aclose()
    act.step("ready", f"port open, /health 200 (pid {h.pid})")
    pairs = [pr for pr in run.state.pairs.values() if name in (pr.prefill, pr.decode)]
    if pairs:
        act.step("handshake", f"{len(pairs)} KV pair(s) checked again from the consumers' nodes")
        while True:
            _check_alive(run, name, h)
            pairs = [pr for pr in run.state.pairs.values() if name in (pr.prefill, pr.decode)]
            bad = [pr for pr in pairs if pr.stage == "failed"]
            if bad:
                raise ActionFailed(f"KV pair {bad[0].prefill} -> {bad[0].decode}: {bad[0].failed}")
            if all(pr.stage in ("ports_reachable", "transferred") for pr in pairs):
                break
            if time.monotonic() >= deadline:
                waiting = ", ".join(f"{pr.key} {pr.stage}" for pr in pairs if pr.stage not in
                                    ("ports_reachable", "transferred"))
                raise ActionFailed(f"KV pairs not reachable after {limit:g}s: {waiting}")
            await asyncio.sleep(POLL_S)


def _check_alive(run: Run, name: str, h: ProcHandle) -> None:
    """The process the action started is still there (the watchers follow it), else the action fails saying how
    it ended."""
    st = run.state.procs[name]
    if st.pid == h.pid and st.alive is False:
        last = last_words(st)
        raise ActionFailed(f"the new {name} (pid {h.pid}) {st.exit_detail or 'exited'}; last: {last}"
                           f"{meaning(last)}; retry with `atomdeck restart {run.id} {name} --resume`")


async def wait_router_serving(run: Run, act: Actor, router: RouterSide) -> None:
    """The router restarted and its port is open: it registered its workers from its command line before it
    bound it. One completion through it, then the run serves again."""
    h = run.recipe.health
    body = {"model": run.recipe.model.client_name, "prompt": h.smoke_prompt, "max_tokens": h.smoke_max_tokens,
            "temperature": 0}
    r = run.plan.router
    act.step("smoke", "a completion through the router")
    res = await router.http.post(r.host, r.port, "/v1/completions", body, h.smoke_timeout_s,
                                 run.launcher.probe_runner(r.node))
    if not res.ok:
        raise ActionFailed(f"the router is up but a completion through it failed: HTTP {res.status or res.error}: "
                           f"{res.text(200)}")
    run.emit_stage("router", "serving", "answered a completion")
    for name, p in run.state.procs.items():  # it registered every worker again as it started: they serve
        if name != "router" and not p.removed and p.stage in ("http_up", "registered"):
            run.emit_stage(name, "serving", "registered again by the restarted router")


def router_spec(run: Run) -> ProcessSpec:
    """The router's command for the run as it is now: without the workers actions removed (it would wait for
    them at startup), with those they added (they are in the plan)."""
    removed = {n for n, p in run.state.procs.items() if p.removed}
    if not removed:
        return run.processes["router"]
    from dataclasses import replace

    from ..design.workspace import render_for_run

    plan = replace(run.plan, endpoints=tuple(e for e in run.plan.endpoints if e.name not in removed))
    meta = run.rd.meta()
    specs = render_for_run(plan, None, run.id, meta.get("job_id"), str(run.rd.path / "logs"))
    return next(s for s in specs if s.name == "router")
