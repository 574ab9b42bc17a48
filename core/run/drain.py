"""The router's side of an action on a live run (issue 38): a worker taken out of AToMesh and drained, registered
again and checked to get work, through the router's worker API (core/remote/router_api.py) and the worker's own
queues (its /metrics)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import TYPE_CHECKING, Any

from ..remote.probes import HttpClient
from ..remote.router_api import RouterApi, RouterApiError
from .actor import ActionFailed, Actor
from .watchers.metrics import parse_wanted

if TYPE_CHECKING:
    from .actor import Run

JOB_TIMEOUT_S = 30.0
# A worker served a request, in its own log: uvicorn's access line for a completion (ATOM's server runs uvicorn with
# its access log unless --disable-uvicorn-access-log), a decode's KV received for a request and a prefill's KV sent
# (mooncake_connector.py: pin :1184/:1217, head :1684/:1791; core/run/classify.py)
SERVED = re.compile(r'"POST /v1/(?:chat/)?completions HTTP/1\.[01]" 200|\[CONSUMER\] Write-done received for req|'
                    r"\[PRODUCER\] write-done sent for req")
SMOKE_TRIES = 16  # completions sent at most, one each 0.25 s until the worker's own count moves
SMOKE_CONFIRM_S = 15.0  # ATOM refreshes its metrics snapshot every 5 s


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
        """Completions through the router until one was served by this worker: a line of its own log says so
        (SERVED: read as the watch follows it), or its own requests_finished moved (ATOM refreshes its metrics
        every 5 s, so that count comes late). The first answer through the router makes it serving; the evidence
        confirms the router sends it work."""
        run = self.run
        h = run.recipe.health
        ep = run.plan.endpoint(name)
        runner = run.launcher.probe_runner(ep.node)
        body = {"model": run.recipe.model.client_name, "prompt": h.smoke_prompt, "max_tokens": h.smoke_max_tokens,
                "temperature": 0}
        before = await finished_requests(self.http, ep, runner)
        act.step("smoke", "completions through the router until this worker served one")
        deadline = time.monotonic() + SMOKE_CONFIRM_S
        served: list[str] = []

        def hear(proc: str, line: str) -> None:
            if proc == name and not served and SERVED.search(line):
                served.append(line.strip()[:200])

        def hear_event(e: Any) -> None:  # (a console: its watcher process hands the lines over as events)
            if e.kind == "proc.line":
                hear(e.name, e.detail)

        run.line_listeners.append(hear)
        run.listeners.append(hear_event)
        try:
            await self._smoke_loop(act, name, body, ep, runner, before, deadline, served)
        finally:
            run.line_listeners.remove(hear)
            run.listeners.remove(hear_event)

    async def _smoke_loop(self, act: Actor, name: str, body: dict, ep: Any, runner: Any, before: float | None,
                          deadline: float, served: list[str]) -> None:
        run = self.run
        h = run.recipe.health
        router = run.plan.router
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
            if served:  # its own log says it served one (long before its metrics refresh)
                act.step("smoke", f"served by {name} ({sent} completion(s) sent through the router; its log: "
                                  f"{served[0]})")
                return
            now = await finished_requests(self.http, ep, runner) if before is not None else None
            if before is not None and now is not None and now > before:
                act.step("smoke", f"served by {name} ({sent} completion(s) sent through the router; its "
                                  f"requests_finished moved)")
                return
            if time.monotonic() >= deadline:
                if before is None or now is None:  # no /metrics (ATOM at the pin), no telling line: it answered
                    act.step("smoke", "the router answered (neither its log nor /metrics told which worker "
                                      "served)")
                    return
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
