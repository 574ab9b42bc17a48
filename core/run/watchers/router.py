"""The router once its port is open: /readiness, /workers, /v1/models, then one smoke completion; on
success the run is serving. All of it on one kept-alive connection, closed when the checks end."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from ...remote.probes import HttpClient
from ..events import Event
from .base import RunHost

if TYPE_CHECKING:
    from .base import WatcherGroup as Watchers  # (the package imports this module)


class RouterWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group

    async def run_checks(self) -> None:
        http = HttpClient()
        try:
            await self._checks(http)
        finally:
            await http.aclose()

    async def _checks(self, http: HttpClient) -> None:
        run = self.run
        router = run.plan.router
        runner = run.launcher.probe_runner(router.node)
        while run.state.procs.get("router") is None or run.state.procs["router"].up_stage not in ("http_up",
                                                                                                 "serving"):
            await asyncio.sleep(0.1)
        if run.state.checks.get("smoke") and run.state.checks["smoke"].ok:
            return
        name = run.recipe.model.client_name
        deadline = time.monotonic() + run.recipe.health.router_timeout_s
        while time.monotonic() < deadline:
            r = await http.get(router.host, router.port, "/readiness", 3.0, runner)
            if r.ok:
                run.emit(Event("check", "readiness", "ok", r.text(200), data=r.json() or {}))
                break
            run.emit(Event("check", "readiness", "wait", f"{r.status or r.error}: {r.text(120)}"))
            await asyncio.sleep(0.5)
        w = await http.get(router.host, router.port, "/workers", 3.0, runner)
        stats = (w.json() or {}).get("stats", {}) if w.ok else {}
        if stats:
            want_p, want_d = len(run.plan.role_endpoints("prefill")), len(run.plan.role_endpoints("decode"))
            have_p, have_d = stats.get("prefill_count", 0), stats.get("decode_count", 0) + stats.get("regular_count", 0)
            ok = have_p >= want_p and have_d >= want_d if run.recipe.mode == "disagg" else \
                have_d >= len(run.plan.role_endpoints("worker"))
            run.emit(Event("check", "workers", "ok" if ok else "fail",
                           f"router has {have_p} prefill and {have_d} decode/regular workers", data=stats))
            if ok:
                for wname, wp in run.state.procs.items():
                    if wp.role != "router" and wp.stage == "http_up":
                        run.emit_stage(wname, "registered", "listed by the router's /workers")
        m = await http.get(router.host, router.port, "/v1/models", 5.0, runner)
        ids = [d.get("id") for d in (m.json() or {}).get("data", [])] if m.ok else []
        if name in ids:
            run.emit(Event("check", "models", "ok", f"router serves '{name}'"))
        else:
            run.emit(Event("check", "models", "fail",
                           f"clients will ask for '{name}' but the router serves {ids or m.error or m.status}"))
            run._fail(f"the router does not serve '{name}' (it serves {ids}); clients would get 503")
            return
        await self.smoke(http, runner)

    async def smoke(self, http: HttpClient, runner) -> None:
        run = self.run
        h = run.recipe.health
        body = {"model": run.recipe.model.client_name, "prompt": h.smoke_prompt, "max_tokens": h.smoke_max_tokens,
                "temperature": 0}
        router = run.plan.router
        for attempt in range(3):
            t0 = time.monotonic()
            r = await http.post(router.host, router.port, "/v1/completions", body, h.smoke_timeout_s, runner)
            dt = time.monotonic() - t0
            data = r.json() or {}
            text = ((data.get("choices") or [{}])[0] or {}).get("text", "") if r.ok else ""
            if r.ok and text:
                tokens = (data.get("usage") or {}).get("completion_tokens")
                run.emit(Event("check", "smoke", "ok", f"{tokens or '?'} tokens in {dt:.2f}s: {text.strip()[:80]!r}",
                               data={"tokens": tokens, "seconds": round(dt, 3), "text": text[:200]}))
                # the transfer's log lines may still be on their way, and a port may wait for its next
                # probe: give the tails and the barrier a moment, so the handshake panel shows the first
                # transfer and the grid every port open when "serving" is declared
                self.group.barrier.look_again()
                for _ in range(20):
                    if (not run.state.pairs or any(pr.stage == "transferred" for pr in run.state.pairs.values())) \
                            and not self.group.barrier.unconfirmed():
                        break
                    await asyncio.sleep(0.05)
                if run.stopping or run.torn_down_elsewhere():
                    return  # a teardown began meanwhile: "serving" must not overwrite "stopping"
                if run.state.status == "failed":
                    return  # a pair or a process failed the run meanwhile
                run.emit_stage("router", "serving")
                for wname, wp in run.state.procs.items():
                    if wp.role != "router":
                        run.emit_stage(wname, "serving")
                run._set_status("serving", f"serving: {run.state.readiness()}; smoke {tokens or '?'} tokens")
                self.group.settle()  # (degraded at once when a worker of a role that is not critical is down)
                return
            why = f"HTTP {r.status}: {r.text(200)}" if r.status else r.error
            run.emit(Event("check", "smoke", "fail", f"attempt {attempt + 1}: {why}"))
            if run.state.status == "failed":
                return  # the run's headline already says why (a failed KV path, a dead process)
            await asyncio.sleep(1.0)
        run._fail(f"smoke request through the router failed: {run.state.checks['smoke'].detail}")

    async def live_smoke(self, deadline: float) -> None:
        """One fresh smoke request with a short deadline (for `atomdeck status`): the `smoke:live` check, never
        the bring-up's `smoke` (whose failure would fail a run that is starting). A request whose KV path is
        broken parks on its decode and gets no answer: said as such."""
        run = self.run
        h = run.recipe.health
        router = run.plan.router
        body = {"model": run.recipe.model.client_name, "prompt": h.smoke_prompt, "max_tokens": h.smoke_max_tokens,
                "temperature": 0}
        http = HttpClient()
        t0 = time.monotonic()
        try:
            r = await http.post(router.host, router.port, "/v1/completions", body, deadline,
                                run.launcher.probe_runner(router.node))
        finally:
            await http.aclose()
        dt = time.monotonic() - t0
        data = r.json() or {}
        text = ((data.get("choices") or [{}])[0] or {}).get("text", "") if r.ok else ""
        if r.ok and text:
            tokens = (data.get("usage") or {}).get("completion_tokens")
            run.emit(Event("check", "smoke:live", "ok", f"{tokens or '?'} tokens in {dt:.2f}s: {text.strip()[:80]!r}",
                           data={"tokens": tokens, "seconds": round(dt, 3), "at": time.time()}))
            return
        why = f"HTTP {r.status}: {r.text(200)}" if r.status else (r.error or "no answer")
        if not r.status and dt >= deadline * 0.95:
            why = f"no answer within {deadline:g}s"
        run.emit(Event("check", "smoke:live", "fail", why, data={"seconds": round(dt, 3), "at": time.time()}))
