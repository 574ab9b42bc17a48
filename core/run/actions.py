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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..config.errors import AtomdeckError
from ..remote.probes import HttpClient
from ..remote.router_api import RouterApi, RouterApiError
from .events import TERMINAL, Event
from .intents import ActionLock, Intent, read, source
from .watchers.metrics import parse_wanted

if TYPE_CHECKING:
    from ..design.commands import ProcessSpec
    from ..launch.base import ProcHandle
    from .run import Run

DRAIN_TIMEOUT_S = 60.0
STOP_GRACE_S = 10.0  # as a teardown's (run.DEFAULT_GRACE)
JOB_TIMEOUT_S = 30.0
SMOKE_TRIES = 16  # completions sent at most, one each 0.25 s until the worker's own count moves
SMOKE_CONFIRM_S = 15.0  # ATOM refreshes its metrics snapshot every 5 s
POLL_S = 0.1
READY_STAGE = "http_up"


class ActionFailed(AtomdeckError):
    """The action could not be done; the message says at which step and why, and what was left how."""


@dataclass
class ActionResult:
    id: str
    kind: str
    target: str
    outcome: str              # done | failed | rolled back
    detail: str
    took_s: float
    steps: list[tuple[float, str, str]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"id": self.id, "kind": self.kind, "process": self.target, "outcome": self.outcome,
                "detail": self.detail, "took_s": round(self.took_s, 3),
                "steps": [{"t": t, "step": s, "detail": d} for t, s, d in self.steps]}


class Actor:
    """One action: its record (intent file, every session reads it), its events, and its ending."""

    def __init__(self, run: Run, kind: str, target: str, who: str, spec: dict | None = None,
                 resume: Intent | None = None):
        self.run = run
        self.t0 = time.monotonic()
        if resume is not None and resume.cut_short:  # the same action, finished by this session
            self.intent = resume
            self.intent.source = f"{resume.source}, finished by {who}"
        else:  # a new one (a retry of a failed one says so)
            retry = f" (retry of {resume.id})" if resume is not None else ""
            self.intent = Intent(uuid.uuid4().hex[:12], kind, target, who + retry, time.time(), spec=spec or {})
        self.resuming = resume is not None
        self.lock = ActionLock(run.rd.path, self.intent)
        self.steps: list[tuple[float, str, str]] = []

    def __enter__(self) -> Actor:
        self.lock.acquire(take_over=self.resuming)
        self.step("requested", f"by {self.intent.source}")
        return self

    def step(self, step: str, detail: str = "") -> None:
        self.lock.step(step, detail)
        self.steps.append((time.time(), step, detail))
        self.run.emit(Event("action", self.intent.target, step, detail,
                            {"id": self.intent.id, "kind": self.intent.kind, "source": self.intent.source}))
        self.run.watchers.settle()  # degraded while a worker is out, serving again once the action ended

    def end(self, outcome: str, detail: str) -> ActionResult:
        self.step(outcome, detail)
        self.lock.release(None)
        return ActionResult(self.intent.id, self.intent.kind, self.intent.target, outcome, detail,
                            time.monotonic() - self.t0, self.steps)

    def __exit__(self, *exc) -> None:
        self.lock.release(None)  # (already released when it ended; a crash leaves the record cut short)


def check_target(run: Run, name: str) -> None:
    """An action needs a live run and a process it has."""
    if run.state.status in ("stopping", "stopped") or run.stopping:
        raise AtomdeckError(f"run {run.id} is {run.state.status}: there is nothing to act on (`atomdeck runs` "
                            f"lists the live ones)")
    if name not in run.processes or name not in run.state.procs:
        raise AtomdeckError(f"run {run.id} has no process {name}; its processes: {', '.join(run.processes)}")
    if run.state.procs[name].removed:
        raise AtomdeckError(f"{name} was removed from run {run.id}; `atomdeck add` starts a new worker")


async def restart(run: Run, name: str, *, drain: bool = True, drain_timeout: float = DRAIN_TIMEOUT_S,
                  spec: ProcessSpec | None = None, who: str = "", resume: bool = False) -> ActionResult:
    """Restart one process in place: drain, stop, start, ready, re-register (see the module). `spec`: what to
    start instead of the process as launched (an edited argv or env). `resume`: finish a restart that was cut
    short (its session went away) or failed, from where the process is: a live, registered one is restarted
    whole; a live one the router lost is registered again; a stopped one is started."""
    check_target(run, name)
    earlier = read(run.rd.path, name) if resume else None
    if resume and (earlier is None or not (earlier.cut_short or earlier.step == "failed")):
        raise AtomdeckError(f"no action on {name} was cut short or failed: there is nothing to resume")
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
                act.step("stopping", "the same verified stop as a teardown, for this process's whole tree")
                await stop_one(run, name)
                act.step("stopped")
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
                 who: str = "") -> ActionResult:
    """Take a worker out of the live run: drained (or not), stopped verified, and recorded as removed, so that
    status, down, a reattach and the Runs screen know it. The router is not asked again: it was told first."""
    check_target(run, name)
    role = run.processes[name].role
    if role == "router":
        raise AtomdeckError("the router cannot be removed from its run: `atomdeck down` ends the run, `atomdeck "
                            "restart RUN router` restarts it")
    left = [n for n, p in run.state.procs.items() if p.role == role and not p.removed and n != name]
    if not left:
        raise AtomdeckError(f"{name} is the run's only {role}: without it the router has nothing to send requests "
                            f"to (every request would fail); `atomdeck down {run.id}` ends the run")
    with Actor(run, "remove", name, who or source("CLI")) as act:
        router = RouterSide(run)
        try:
            await _node_reachable(run, run.processes[name].node)
            if drain:
                await drain_worker(run, act, router, name, drain_timeout)
            else:
                await router.remove(act, name)
            act.step("stopping", "the same verified stop as a teardown, for this process's whole tree")
            await stop_one(run, name)
            run.emit(Event("proc.removed", name, "", f"removed by {act.intent.source}"))
        except ActionFailed as e:
            return act.end("failed", str(e))
        finally:
            await router.close()
        return act.end("done", f"removed after {time.monotonic() - act.t0:.1f}s; {len(left)} {role}(s) serve")


def _alive(run: Run, name: str) -> bool:
    p = run.state.procs.get(name)
    return p is not None and p.alive is not False and p.stage not in TERMINAL


async def _node_reachable(run: Run, node: str) -> None:
    try:
        health = await asyncio.wait_for(run.launcher.node_health([node]), 20)
    except (OSError, AtomdeckError, TimeoutError) as e:
        raise ActionFailed(f"{node} cannot be reached: {e}; nothing was done") from None
    why = health.get(node, "")
    if why:
        raise ActionFailed(f"{node} is not usable ({why}); nothing was done")


# ---- the router's side ---------------------------------------------------------------------------------------

class RouterSide:
    """The run's router through its worker API (core/remote/router_api.py)."""

    def __init__(self, run: Run):
        self.run = run
        r = run.plan.router
        self.http = HttpClient()
        self.api = RouterApi(r.host, r.port, self.http, run.launcher.probe_runner(r.node))

    async def close(self) -> None:
        await self.http.aclose()

    def url(self, name: str) -> str:
        return self.run.plan.endpoint(name).url

    async def listed(self, name: str) -> bool:
        try:
            return await self.api.find_worker(self.url(name)) is not None
        except RouterApiError as e:
            raise ActionFailed(f"the router's worker list cannot be read: {e}; nothing was done") from None

    async def remove(self, act: Actor, name: str) -> int | None:
        """Take the worker out of the router (job read back); its load just before, if it was registered."""
        url = self.url(name)
        try:
            worker = await self.api.find_worker(url)
            if worker is None:
                act.step("draining", "not registered with the router (already removed): nothing routes to it")
                return None
            load = worker.load
            act.intent.before = {"router_id": worker.id, "worker_type": worker.worker_type}
            acc = await self.api.remove_worker(worker.id)
            await self.api.wait_for_job(acc.worker_id, "RemoveWorker", time.monotonic() + JOB_TIMEOUT_S)
        except RouterApiError as e:
            raise ActionFailed(f"could not remove {name} from the router: {e}; nothing was stopped") from None
        return load

    async def register(self, act: Actor, name: str) -> None:
        ep = self.run.plan.endpoint(name)
        act.step("registering", f"POST /workers {ep.url} ({ep.role})")
        try:
            acc = await self.api.add_worker(ep.url, "regular" if ep.role == "worker" else
                                            "prefill" if ep.role == "prefill" else "decode")
            done = await self.api.wait_for_job(acc.worker_id, "AddWorker", time.monotonic() + JOB_TIMEOUT_S)
        except RouterApiError as e:
            raise ActionFailed(f"{name} is up but the router did not take it back: {e}; it serves no requests: "
                               f"retry with `atomdeck restart {self.run.id} {name} --resume`") from None
        act.intent.before = {}
        self.run.emit_stage(name, "registered", f"registered with the router as {done.worker_id}")
        act.step("registered", f"router id {done.worker_id}")

    async def smoke_through(self, act: Actor, name: str) -> None:
        """Completions through the router until one was served by this worker (its own requests_finished moved;
        ATOM refreshes its metrics every few seconds, so the count is read until it moves). The first answer
        through the router makes it serving; the count confirms the router sends it work."""
        run = self.run
        h = run.recipe.health
        ep = run.plan.endpoint(name)
        runner = run.launcher.probe_runner(ep.node)
        body = {"model": run.recipe.model.client_name, "prompt": h.smoke_prompt, "max_tokens": h.smoke_max_tokens,
                "temperature": 0}
        before = await finished_requests(self.http, ep, runner)
        act.step("smoke", "completions through the router until this worker served one")
        router = run.plan.router
        deadline = time.monotonic() + SMOKE_CONFIRM_S
        sent = 0
        while True:
            if sent < SMOKE_TRIES:
                r = await self.http.post(router.host, router.port, "/v1/completions", body, h.smoke_timeout_s,
                                         run.launcher.probe_runner(router.node))
                if not r.ok:
                    raise ActionFailed(f"a completion through the router failed: HTTP {r.status or r.error}: "
                                       f"{r.text(200)}")
                sent += 1
                if sent == 1:
                    run.emit_stage(name, "serving", "registered, and the router answers")
            now = await finished_requests(self.http, ep, runner)
            if before is None or now is None:  # no /metrics (ATOM at the pin): the router answered
                act.step("smoke", "the router answered (no /metrics on this ATOM to tell which worker served)")
                return
            if now > before:
                act.step("smoke", f"served by {name} ({sent} completion(s) sent through the router)")
                return
            if time.monotonic() >= deadline:
                raise ActionFailed(f"{sent} completions through the router in {SMOKE_CONFIRM_S:g}s, none served by "
                                   f"{name}: the router does not send it work (its policy: "
                                   f"{run.recipe.router.policy})")
            await asyncio.sleep(0.25)


async def finished_requests(http: HttpClient, ep: Any, runner: Any) -> float | None:
    """The worker's own count of finished requests (atom:requests_finished), None without /metrics."""
    stats = await worker_queue(http, ep, runner)
    return None if stats is None else stats.get("requests_finished", 0.0)


QUEUE_NAMES = frozenset({"atom:requests_running", "atom:requests_waiting", "atom:requests_parked_kv_load",
                         "atom:requests_finished", "atom:metrics_last_refresh_timestamp_seconds"})


async def worker_queue(http: HttpClient, ep: Any, runner: Any) -> dict[str, float] | None:
    """The worker's own queues from its /metrics (ATOM head; None without them): running, waiting, parked for a
    KV load, finished, and when its engines' snapshot was taken (ATOM refreshes it every few seconds)."""
    r = await http.get(ep.host, ep.http_port, "/metrics", 2.0, runner)
    if r.status != 200:
        return None
    try:
        samples = parse_wanted(r.body.decode(errors="replace"), QUEUE_NAMES)
    except ValueError:
        return None
    out: dict[str, float] = {}
    for name, _, value in samples:
        key = name.removeprefix("atom:")
        out[key] = out.get(key, 0.0) + value
    return out


def in_flight(q: dict[str, float]) -> int:
    return int(q.get("requests_running", 0) + q.get("requests_waiting", 0) + q.get("requests_parked_kv_load", 0))


async def drain_worker(run: Run, act: Actor, router: RouterSide, name: str, timeout: float) -> None:
    """Out of the router, then wait until nothing of it is in flight, or the timeout (what is left is named, and
    ended with the stop). A worker's own requests are its engine's running, waiting and parked ones; a prefill
    also owes the KV of the requests it prefilled to the decodes, which pull it after the router relayed them:
    until a snapshot of every decode's queues taken after the prefill's own went empty shows none parked for a
    KV load (ATOM exposes no producer-side count of pending transfers)."""
    act.step("draining", "removing it from the router")
    load = await router.remove(act, name)
    ep = run.plan.endpoint(name)
    runner = run.launcher.probe_runner(ep.node)
    deadline = time.monotonic() + timeout
    shown = None
    own_empty_at: float | None = None
    while True:
        q = await worker_queue(router.http, ep, runner)
        if q is None:
            left: int | None = None
            words = (f"no /metrics on {name} (ATOM before them): in-flight requests cannot be counted "
                     f"({load or 0} just before the removal); waiting the drain timeout, {timeout:g}s")
        else:
            left = in_flight(q)
            words = f"{left} in flight"
            if left == 0 and own_empty_at is None:
                own_empty_at = q.get("metrics_last_refresh_timestamp_seconds") or time.time()
            if left == 0 and ep.role == "prefill":
                owed = await _kv_owed(run, router, own_empty_at or time.time())
                if owed is None:
                    words, left = "0 in flight; waiting for the decodes' next snapshot of their KV loads", -1
                elif owed:
                    words, left = f"0 in flight; {owed} request(s) parked at decodes for a KV load", owed
        if words != shown:
            act.step("draining", words)
            shown = words
        if left == 0:
            act.step("drained", "nothing in flight")
            return
        if time.monotonic() >= deadline:
            what = f"{left} request(s) still in flight" if left and left > 0 else "requests may still be in flight"
            act.step("drained", f"drain timeout ({timeout:g}s) reached: {what}, ended with the stop (their clients "
                                f"get an error)")
            return
        await asyncio.sleep(0.25)


async def _kv_owed(run: Run, router: RouterSide, since: float) -> int | None:
    """Requests parked for a KV load on the decodes, from snapshots taken after `since`; None while some decode's
    latest snapshot is older."""
    total = 0
    for d in run.plan.role_endpoints("decode"):
        p = run.state.procs.get(d.name)
        if p is None or p.removed or p.alive is False:
            continue
        q = await worker_queue(router.http, d, run.launcher.probe_runner(d.node))
        if q is None:
            continue  # no /metrics: nothing to read; the drain's timeout bounds it
        if q.get("metrics_last_refresh_timestamp_seconds", 0.0) <= since:
            return None
        total += int(q.get("requests_parked_kv_load", 0))
    return total


# ---- the process ---------------------------------------------------------------------------------------------

async def stop_one(run: Run, name: str) -> None:
    h = run.handles.get(name)
    if h is None or not h.pid:
        return
    (report,) = await run.launcher.stop([h], STOP_GRACE_S)
    if not report.ok:
        raise ActionFailed(f"{name} could not be stopped ({report.detail}); it was not started again: look at it "
                           f"with `atomdeck status {run.id}`")


async def start_one(run: Run, act: Actor, name: str, spec: ProcessSpec | None) -> ProcHandle:
    """The process as launched (or as edited), through the run's launcher; its handle saved where every
    session finds it (the watching one follows it from there)."""
    want = spec or run.processes[name]
    act.step("starting", f"on {want.node}" + (" (edited)" if spec is not None else ""))
    try:
        h = await run.launcher.start(want)
    except (OSError, AtomdeckError) as e:
        raise ActionFailed(f"{name} could not be started on {want.node}: {e}; retry with `atomdeck restart "
                           f"{run.id} {name} --resume`") from None
    run.rd.save_handle(h)
    run.handles[name] = h
    if spec is not None:
        run.processes[name] = spec
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
            if st.pid == h.pid and st.alive is False:
                last = list(st.last_lines)[-1] if st.last_lines else ""
                raise ActionFailed(f"the new {name} (pid {h.pid}) {st.exit_detail or 'exited'}; last: {last}; retry "
                                   f"with `atomdeck restart {run.id} {name} --resume`")
            r = await http.get(host, port, "/health", 2.0, runner)
            if r.ok:
                if not is_router:
                    run.emit_stage(name, "http_up", "GET /health 200")
                break
            if st.stage != shown:
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
