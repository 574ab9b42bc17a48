"""Health after the start: every endpoint asked on a steady cadence with a short timeout.

Each worker's GET /health and the router's GET /readiness (one request in flight per endpoint, on one
kept-alive connection per endpoint), from where the launcher probes ports. Any HTTP answer counts as an
answer (a 503 from /readiness says the router has no healthy worker, which the router panel shows), and so
does the metrics watcher's scrape of a worker's GET /metrics on the same server (`answered`).

Cadence (issue 19: 129 endpoints at 128 nodes made 129 checks a second, all in the same instant, next to
the scrapes): an endpoint that answered within HEALTHY_EVERY_S is not asked (a worker scraped every 2 s is
then asked nothing more); one that missed is asked again at once and then every EVERY_S; the endpoints'
checks are spread over the period instead of all starting together. Past metrics.MAX_SCRAPES_S endpoints
a second (64P64D: 129 endpoints) the scrapes are further apart and so is this window (`healthy_every`):
a frozen worker there is found within the scrape period (3.2 s) + SLOW_S.

MISSES unanswered checks in a row from a process that is still alive make it `unresponsive` and the run
`degraded`; so does one miss when the process's state on its node says it cannot answer (`T (stopped)`
after a SIGSTOP, `t` traced): its state is read from /proc when a check is not answered within SLOW_S,
and a stopped process's check is a miss then, without waiting for TIMEOUT_S. The diagnosis says what was
asked, where, since when, whether the process is alive and its state, and its last line. An answer again
is shown as a recovery. Frozen (SIGSTOP) -> unresponsive: at most HEALTHY_EVERY_S (+ SCRAPE_SLACK_S) + SLOW_S +
the /proc read (bench/frozen_detect.py; it was 2 x TIMEOUT_S + up to EVERY_S with a check every second and two
misses); a process that hangs while running: up to HEALTHY_EVERY_S + 2 x TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...remote.node_probes import worst
from ...remote.probes import HttpClient, HttpResult
from ..events import HEALTH_STAGES, LIVE, TERMINAL, Event, ProcState
from .base import RunHost

if TYPE_CHECKING:
    from .base import WatcherGroup as Watchers  # (the package imports this module)

EVERY_S = 1.0  # between the starts of two checks of one endpoint that missed or is unresponsive
HEALTHY_EVERY_S = 2.0  # an endpoint that answered (a check or a scrape) this recently is not asked
# a scraped endpoint's window is this much longer than the scrape period: its next answer comes a period
# later give or take how long each took, and a check whenever the later one took longer was a wasted request
# (1P1D at load 6-9: 3 checks next to 6 scrapes). A frozen scraped worker is found this much later.
SCRAPE_SLACK_S = 0.25
TIMEOUT_S = 1.5
MISSES = 2  # unanswered checks in a row before it is called unresponsive (1 if its process is stopped)
SLOW_S = 0.5  # a check not answered this soon: its process's state is read (stopped: no need to wait)
EARLY_READS = 2
CANNOT_ANSWER = ("T", "t")  # /proc states of a process that cannot answer until resumed (stopped, traced)


@dataclass(frozen=True)
class Endpoint:
    name: str  # the process
    node: str
    host: str
    port: int
    path: str


class ServingHealth:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group
        self.misses: dict[str, int] = {}
        self.first_miss: dict[str, float] = {}
        self.requests: dict[str, int] = {}  # checks made per endpoint (the cadence is measured from it)
        self.answered_at: dict[str, float] = {}  # endpoint -> last answer (monotonic), a check's or a scrape's
        self.early: dict[str, tuple[str, dict]] = {}  # endpoint -> its state, read while its check was slow
        self.reading = 0  # such reads running
        self.scraped: set[str] = set()  # endpoints whose scrapes answer (their window has SCRAPE_SLACK_S more)
        self.http = HttpClient()  # one connection per endpoint, closed when the watch ends

    def endpoints(self) -> list[Endpoint]:
        run = self.run
        out = []
        for name, p in run.state.procs.items():
            if p.role == "router":
                r = run.plan.router
                out.append(Endpoint(name, r.node, r.host, r.port, "/readiness"))
            else:
                ep = run.plan.endpoint(name)
                out.append(Endpoint(name, ep.node, ep.host, ep.http_port, "/health"))
        return out

    def answered(self, name: str) -> None:
        """Another request to this endpoint's server got an HTTP answer (a metrics scrape): it answers."""
        p = self.run.state.procs.get(name)
        if p is not None and p.stage != "unresponsive" and not self.misses.get(name):
            self.answered_at[name] = time.monotonic()  # an unresponsive one recovers by its own checks
            self.scraped.add(name)

    async def watch(self) -> None:
        try:
            while self.run.state.status not in LIVE:
                await asyncio.sleep(0.5)
            eps = self.endpoints()
            await asyncio.gather(*(self.follow(ep, HEALTHY_EVERY_S * i / len(eps)) for i, ep in enumerate(eps)))
        finally:
            await self.http.aclose()

    def due_in(self, name: str, now: float) -> float:
        """Seconds until this endpoint is asked again (<= 0: now)."""
        p = self.run.state.procs.get(name)
        if self.misses.get(name) or (p is not None and p.stage == "unresponsive"):
            return 0.0  # follow() keeps these EVERY_S apart
        last = self.answered_at.get(name)
        if last is None:
            return 0.0
        return last + self.healthy_every() + (SCRAPE_SLACK_S if name in self.scraped else 0.0) - now

    def healthy_every(self) -> float:
        """HEALTHY_EVERY_S, or the scrape period where a big run's scrapes are further apart (a worker whose
        scrapes answer is then still asked nothing more)."""
        metrics = getattr(self.group, "metrics", None)  # a health watcher alone has no scrapes to follow
        return max(HEALTHY_EVERY_S, metrics.period() if metrics is not None else 0.0)

    async def follow(self, ep: Endpoint, phase: float = 0.0) -> None:
        await asyncio.sleep(phase)  # spread over the period: not every endpoint in the same instant
        while True:
            t0 = time.monotonic()
            p = self.run.state.procs.get(ep.name)
            if not (self.run.state.status in LIVE and p is not None and p.stage not in TERMINAL
                    and p.alive is not False and came_up(p)):
                await asyncio.sleep(EVERY_S)
                continue
            wait = self.due_in(ep.name, t0)
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            await self.check(ep, MISSES)
            await asyncio.sleep(max(0.05, EVERY_S - (time.monotonic() - t0)))

    async def check_once(self) -> None:
        """One bounded pass over every endpoint (for `atomdeck status`): one miss is enough to look."""
        if self.run.state.status not in LIVE:
            return
        eps = [ep for ep in self.endpoints() if self.run.state.procs[ep.name].stage not in TERMINAL
               and came_up(self.run.state.procs[ep.name])]
        try:
            await asyncio.gather(*(self.check(ep, 1) for ep in eps))
        finally:
            await self.http.aclose()

    async def check(self, ep: Endpoint, misses: int) -> None:
        run = self.run
        runner = run.launcher.probe_runner(ep.node)
        self.requests[ep.name] = self.requests.get(ep.name, 0) + 1
        t0 = time.time()
        get = asyncio.ensure_future(self.http.get(ep.host, ep.port, ep.path, TIMEOUT_S, runner))
        try:
            r = await self.answer_or_stopped(ep, get)
        finally:
            if not get.done():
                get.cancel()  # (closes its connection)
        p = run.state.procs.get(ep.name)
        if p is None or run.stopping:
            return
        now = time.time()
        if r.status:
            self.misses[ep.name] = 0
            self.answered_at[ep.name] = time.monotonic()
            first = self.first_miss.pop(ep.name, None)
            if p.stage == "unresponsive":
                gone = f" after {now - first:.0f}s" if first else ""
                run.emit(Event("proc.health", ep.name, "ok", f"answers GET {ep.path} again{gone} (HTTP {r.status})"))
                run.emit(Event("note", ep.name, detail=f"{ep.name} on {ep.node}:{ep.port} answers again{gone}"))
                self.group.settle()
            return
        self.misses[ep.name] = self.misses.get(ep.name, 0) + 1
        self.first_miss.setdefault(ep.name, t0)
        early = self.early.pop(ep.name, None)
        if p.stage == "unresponsive":
            return
        found = early or await self.inspect(ep, r.error)
        if found is None:
            return  # gone: the log watcher records the exit and why
        detail, data = found
        if self.misses[ep.name] < misses and data.get("proc_state", "?")[:1] not in CANNOT_ANSWER:
            return  # it may be busy: one more miss before it is called unresponsive
        p = run.state.procs.get(ep.name)
        if p is None or run.stopping or not self.misses.get(ep.name) or p.stage == "unresponsive":
            return  # answered (or torn down) while its state was read
        run.emit(Event("proc.health", ep.name, "unresponsive", detail,
                       data={"node": ep.node, "port": ep.port, "path": ep.path, "since": self.first_miss[ep.name],
                             **data}))
        self.group.settle()

    async def answer_or_stopped(self, ep: Endpoint, get: asyncio.Future) -> HttpResult:
        """The check's answer; or, when none came within SLOW_S and the process's state on its node says it
        cannot answer (T: SIGSTOP), no answer at once instead of at TIMEOUT_S. At most EARLY_READS of these
        state reads run at a time (each is a command on the node: not one per endpoint on a busy machine)."""
        done, _ = await asyncio.wait({get}, timeout=SLOW_S)
        p = self.run.state.procs.get(ep.name)
        if done or self.reading >= EARLY_READS or p is None or p.stage == "unresponsive":
            return await get
        self.reading += 1
        try:
            found = await self.inspect(ep, f"no answer within {SLOW_S:g}s")
        finally:
            self.reading -= 1
        if get.done() or found is None or found[1].get("proc_state", "?")[:1] not in CANNOT_ANSWER:
            return await get
        self.early[ep.name] = found
        return HttpResult(0, error=f"no answer within {SLOW_S:g}s")

    async def inspect(self, ep: Endpoint, error: str) -> tuple[str, dict] | None:
        """Alive? and its state on the node. None when the process is gone."""
        run = self.run
        h = run.handles.get(ep.name)
        alive = "alive"
        if h is not None:
            try:
                st = await run.launcher.poll(h)
                if not st.alive:
                    return None
            except Exception as e:
                alive = f"alive unknown ({e})"
        state, data = "", {}

        try:
            async with asyncio.timeout(10):
                procs = await run.launcher.node_processes(ep.node, f"{run.id}:{ep.name}")
            w = worst(procs)
            if w is not None:
                state = f", state {w.state_words} (pid {w.pid} {w.comm})"
                data = {"pid": w.pid, "proc_state": w.state_words}
        except Exception as e:
            state = f", state unknown ({str(e)[:80]})"
        return f"GET {ep.path} on {ep.node}:{ep.port}: {error or 'no answer'}; process {alive}{state}", data


def unhealthy(run: RunHost) -> list[str]:
    return [p.name for p in run.state.procs.values() if p.stage in HEALTH_STAGES]


def came_up(p: ProcState) -> bool:
    """Its port answered once since it (last) started: a process loading again after a restart is not asked for
    its health, it is not up yet (its start is watched as a launch's is)."""
    order = p.order
    return p.up_stage in order and order.index(p.up_stage) >= order.index("http_up")
