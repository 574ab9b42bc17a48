"""Health after the start: every endpoint asked on a steady cadence with a short timeout.

Each worker's GET /health and the router's GET /readiness, once a second at most (one request in
flight per endpoint, on one kept-alive connection per endpoint), from where the launcher probes ports.
Any HTTP answer counts as an answer (a 503 from /readiness says the router has no healthy worker, which
the router panel shows). MISSES
unanswered checks in a row from a process that is still alive make it `unresponsive` and the run
`degraded`; the diagnosis says what was asked, where, since when, whether the process is alive and
its state read from /proc on its node (`T (stopped)` after a SIGSTOP), and its last line. An answer
again is shown as a recovery.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...remote.node_probes import processes_on_node, worst
from ...remote.probes import HttpClient
from ..events import HEALTH_STAGES, LIVE, TERMINAL, Event
from .base import RunHost

if TYPE_CHECKING:
    from . import Watchers

EVERY_S = 1.0  # between the starts of two checks of one endpoint (<= 1 request/s each)
TIMEOUT_S = 1.5
MISSES = 2  # unanswered checks in a row before it is called unresponsive


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

    async def watch(self) -> None:
        try:
            while self.run.state.status not in LIVE:
                await asyncio.sleep(0.5)
            await asyncio.gather(*(self.follow(ep) for ep in self.endpoints()))
        finally:
            await self.http.aclose()

    async def follow(self, ep: Endpoint) -> None:
        while True:
            t0 = time.monotonic()
            p = self.run.state.procs.get(ep.name)
            if self.run.state.status in LIVE and p is not None and p.stage not in TERMINAL and p.alive is not False:
                await self.check(ep, MISSES)
            await asyncio.sleep(max(0.05, EVERY_S - (time.monotonic() - t0)))

    async def check_once(self) -> None:
        """One bounded pass over every endpoint (for `atomdeck status`): one miss is enough to look."""
        if self.run.state.status not in LIVE:
            return
        eps = [ep for ep in self.endpoints() if self.run.state.procs[ep.name].stage not in TERMINAL]
        try:
            await asyncio.gather(*(self.check(ep, 1) for ep in eps))
        finally:
            await self.http.aclose()

    async def check(self, ep: Endpoint, misses: int) -> None:
        run = self.run
        runner = run.launcher.probe_runner(ep.node)
        self.requests[ep.name] = self.requests.get(ep.name, 0) + 1
        r = await self.http.get(ep.host, ep.port, ep.path, TIMEOUT_S, runner)
        p = run.state.procs.get(ep.name)
        if p is None or run.stopping:
            return
        now = time.time()
        if r.status:
            self.misses[ep.name] = 0
            first = self.first_miss.pop(ep.name, None)
            if p.stage == "unresponsive":
                gone = f" after {now - first:.0f}s" if first else ""
                run.emit(Event("proc.health", ep.name, "ok", f"answers GET {ep.path} again{gone} (HTTP {r.status})"))
                run.emit(Event("note", ep.name, detail=f"{ep.name} on {ep.node}:{ep.port} answers again{gone}"))
                self.group.settle()
            return
        self.misses[ep.name] = self.misses.get(ep.name, 0) + 1
        self.first_miss.setdefault(ep.name, now - TIMEOUT_S)
        if self.misses[ep.name] < misses or p.stage == "unresponsive":
            return
        found = await self.inspect(ep, r.error)
        if found is None:
            return  # gone: the log watcher records the exit and why
        detail, data = found
        run.emit(Event("proc.health", ep.name, "unresponsive", detail,
                       data={"node": ep.node, "port": ep.port, "path": ep.path, "since": self.first_miss[ep.name],
                             **data}))
        self.group.settle()

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

        async def node_run(argv: list[str], timeout: float):
            return await run.launcher.node_run(ep.node, argv, timeout)

        try:
            async with asyncio.timeout(10):
                procs = await processes_on_node(node_run, f"{run.id}:{ep.name}")
            w = worst(procs)
            if w is not None:
                state = f", state {w.state_words} (pid {w.pid} {w.comm})"
                data = {"pid": w.pid, "proc_state": w.state_words}
        except Exception as e:
            state = f", state unknown ({str(e)[:80]})"
        return f"GET {ep.path} on {ep.node}:{ep.port}: {error or 'no answer'}; process {alive}{state}", data


def unhealthy(run: RunHost) -> list[str]:
    return [p.name for p in run.state.procs.values() if p.stage in HEALTH_STAGES]
