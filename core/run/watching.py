"""Watching a run: every process's liveness and log, the barrier, the KV handshake, the router's checks
and the smoke request, timeouts. A mixin of Run (run.py), which owns the state and the run directory."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from ..config.secrets import redact_line
from ..launch.base import ProcHandle
from ..remote.backoff import Backoff
from ..remote.probes import http_get, http_post, tcp_probe
from .barrier import BarrierProber, checkpoint
from .classify import classify
from .diagnose import diagnose
from .events import TERMINAL, WORKER_STAGES, Event, RunState

_TARGET = re.compile(r"\bto (?:tcp://)?(\[[0-9a-fA-F:]+\]|[\w.-]+):(\d+)")
# a watcher that failed runs again after 1 s (first_delay), ×2, at most 15 s apart, forever
WATCHER_RETRY = Backoff(first_s=1.0, factor=2.0, max_s=15.0, give_up_s=None)
_CONSUMER = re.compile(r"\b(?:consumer=|Consumer )(\[[0-9a-fA-F:]+\]|[\w.-]+?)(?::\d+)?[\s,)]")


async def cancel_all(tasks: list[asyncio.Task]) -> None:
    """Cancel tasks and wait for them; re-cancel any that swallowed the first cancellation."""
    pending = [t for t in tasks if not t.done()]
    for _ in range(10):
        if not pending:
            return
        for t in pending:
            t.cancel()
        _, still = await asyncio.wait(pending, timeout=0.5)
        pending = list(still)



class RunWatching:
    """The watchers. Expects: state, plan, recipe, launcher, handles, offsets, emit(), _set_status(),
    _fail(), save_offsets(), torn_down_elsewhere() and the fields Run.__init__ sets."""

    async def watch(self, until: Callable[[RunState], bool] | None = None, timeout: float | None = None) -> RunState:
        """Watch every process, port and check until `until(state)` holds, the timeout passes, or cancelled."""
        keep = self._keep_going
        tasks = [asyncio.create_task(keep(f"watching {name}", lambda n=name: self._watch_proc(n)), name=f"proc:{name}")
                 for name in self.handles]
        self.prober = BarrierProber(list(self.state.cells.values()), self.launcher.probe_runner,
                                    self._expected_soon, self._owner_alive, self._on_cell)
        prober = self.prober
        tasks += [asyncio.create_task(keep(f"probing {n}", lambda n=n: prober.run_node(n)), name=f"probe:{n}")
                  for n in prober.by_node]
        tasks += [asyncio.create_task(keep("router checks", self._router_checks), name="router"),
                  asyncio.create_task(keep("timeouts", self._ticker), name="ticker"),
                  asyncio.create_task(keep("node health", self._node_health), name="nodes")]
        conn_hook = getattr(self.launcher, "on_connection_state", None)
        if conn_hook is not None:
            conn_hook(lambda node, state, reason: self.emit(Event("conn", node, "ok" if state == "up" else state,
                                                                   reason)))
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while True:
                if until is not None and until(self.state):
                    break
                self._changed.clear()
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if wait == 0.0:
                    break
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=min(wait or 1.0, 1.0))
                except TimeoutError:
                    pass
                checkpoint()  # a cancel that raced the wake-up (Python 3.11) still stops the watch
        finally:
            await cancel_all(tasks + list(self._background))
            self.save_offsets()
        return self.state

    async def _keep_going(self, what: str, factory: Callable[[], Awaitable[None]], first_delay: float = 1.0) -> None:
        """Run a watcher; if it fails (an SSH connection to the login host dropped under a `cat` or a
        `squeue`), say so and run it again with back-off, instead of watching nothing from then on
        while the run still looks watched. Logs resume from the saved offsets: no line twice."""
        delays = replace(WATCHER_RETRY, first_s=first_delay).delays()
        while True:
            try:
                await factory()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                delay = next(delays)
                self.emit(Event("note", what, detail=f"{what} failed ({e}); trying again in {delay:g}s"))
                await asyncio.sleep(delay)

    async def _watch_proc(self, name: str) -> None:
        h = self.handles[name]
        tail = asyncio.create_task(self._keep_going(f"reading {name}'s log", lambda: self._tail(name, h)))
        try:
            p = self.state.procs[name]
            if p.alive is False and p.stage in TERMINAL:
                await asyncio.sleep(3600 * 24 * 365)  # already over: keep the tail only
            status = await self.launcher.wait(h)
            # read the log to its end first: the last lines usually say why it ended
            await cancel_all([tail])
            await self._drain(name, h, idle=0.15 if h.launcher != "ssh" else 0.6)
            last = list(self.state.procs[name].last_lines)[-10:]
            if not self.stopping and self.torn_down_elsewhere():
                self.stopping = True
            value = "stopped" if self.stopping else "failed"
            detail = status.detail if status.exit_code != 0 or self.stopping else "exited 0 unexpectedly"
            self.emit(Event("proc.exit", name, value, detail, {"code": status.exit_code, "last_lines": last}))
            if self.prober:
                self.prober.wake(h.node)
            if not self.stopping:
                self._fail()
            tail = asyncio.create_task(self._tail(name, h))  # a few more lines may come over slow links
            await asyncio.sleep(3600 * 24 * 365)
        finally:
            await cancel_all([tail])

    async def _tail(self, name: str, h: ProcHandle) -> None:
        async for off, line in self.launcher.tail(h, self.offsets.get(name, 0)):
            self.offsets[name] = off
            self._on_line(name, line)

    def _on_line(self, name: str, raw: str) -> None:
        p = self.state.procs.get(name)
        if p is None:
            return
        line = redact_line(raw, self._secrets)  # everything kept or shown from here on is redacted
        p.last_lines.append(line)
        p.last_line_at = time.time()
        for fn in list(self.line_listeners):
            fn(name, line)
        m = classify(line, p.role)
        if m is None:
            return
        if m.kind == "stage":
            if self.emit_stage(name, m.value) and m.value in ("kv_registered",) and self.prober:
                self.prober.wake(p.node)
            if p.role == "router" and m.value == "workers_registered":
                for w in self.state.procs.values():
                    if w.role != "router" and w.stage == "http_up":
                        self.emit_stage(w.name, "registered")
        elif m.kind == "hint":
            self._hints.add(name)
            if self.prober:
                self.prober.wake(p.node)
        elif m.kind == "error":
            self.emit(Event("proc.error", name, m.value, line.strip()[:500]))
            if p.role == "router" and m.value in ("kv-role", "workers-timeout"):
                self._fail(f"router: {line.strip()[:300]}")
        elif m.kind == "pair":
            self._on_pair_line(p.name, p.role, m.value, line)

    def emit_stage(self, name: str, stage: str, detail: str = "") -> bool:
        before = self.state.procs[name].stage
        self.emit(Event("proc.stage", name, stage, detail))
        return self.state.procs[name].stage != before

    def _on_pair_line(self, name: str, role: str, value: str, line: str) -> None:
        pairs = [pr for pr in self.state.pairs.values() if name in (pr.prefill, pr.decode)]
        target = _TARGET.search(line)
        if role == "decode" and target:
            host = target.group(1).strip("[]")
            for ep in self.plan.role_endpoints("prefill"):
                if ep.host == host:
                    self._decode_target[name] = ep.name
        if role == "decode" and name in self._decode_target:
            pairs = [pr for pr in pairs if pr.prefill == self._decode_target[name]] or pairs
        if role == "prefill" and len(pairs) > 1:
            # a producer's line names its consumer only sometimes ("consumer=10.0.0.3:15571"); without
            # it, it could be about any of the prefill's decodes: leave those to the decode-side lines
            consumer = _CONSUMER.search(line)
            hosts = {ep.name: ep.host for ep in self.plan.role_endpoints("decode")}
            pairs = [pr for pr in pairs if consumer and hosts.get(pr.decode) == consumer.group(1).strip("[]")]
        if value == "request":
            return
        for pr in pairs:
            if value == "transferred":
                self.emit(Event("pair", pr.key, "transferred", line.strip()[:300]))
            elif value == "failed" and pr.stage != "transferred":
                self.emit(Event("pair", pr.key, "failed", line.strip()[:300]))

    def _expected_soon(self, c) -> bool:
        p = self.state.procs.get(c.owner or "")
        if p is None:
            return False
        if c.kind == "handshake":
            return WORKER_STAGES.index(p.stage) >= WORKER_STAGES.index("kv_registered") if p.stage in WORKER_STAGES \
                else False
        if c.kind == "router":
            return p.stage in ("workers_registered", "ready") or p.name in self._hints
        if c.kind == "http":
            return p.name in self._hints or p.stage == "http_up"
        return False

    def _owner_alive(self, c) -> bool | None:
        p = self.state.procs.get(c.owner or "")
        return None if p is None else p.alive

    def _on_cell(self, c, result: str) -> None:
        was = self.state.cells[c.key].state if c.key in self.state.cells else None
        self.emit(Event("cell", c.key, result, data={"node": c.node, "port": c.port}))
        if result != "open" or was == "open":
            return  # only a cell that just opened starts its checks (open cells are re-probed every second)
        if c.kind == "http" and c.owner:
            task = asyncio.ensure_future(self._check_worker(c.owner))
            self._background.add(task)  # keep a reference until it is done, and cancel it with the watch
            task.add_done_callback(self._background.discard)
        if c.kind == "router":
            self.emit_stage("router", "http_up")

    async def _check_worker(self, name: str) -> None:
        """Port open: confirm /health, and that the worker's kv_role is the one AToMesh expects."""
        ep = self.plan.endpoint(name)
        runner = self.launcher.probe_runner(ep.node)
        for _ in range(20):
            r = await http_get(ep.host, ep.http_port, "/health", 2.0, runner)
            if r.ok:
                self.emit_stage(name, "http_up", "GET /health 200")
                break
            await asyncio.sleep(0.25)
        if ep.role in ("prefill", "decode"):
            info = await http_get(ep.host, ep.http_port, "/kv_transfer_info", 2.0, runner)
            role = (info.json() or {}).get("kv_role") if info.ok else None
            want = "kv_producer" if ep.role == "prefill" else "kv_consumer"
            if role is not None and role != want:
                self.emit(Event("check", f"kv_role:{name}", "fail",
                                f"{name} reports kv_role={role}, expected {want} (AToMesh refuses a prefill that "
                                f"is not a producer)"))
            elif role == want:
                self.emit(Event("check", f"kv_role:{name}", "ok", f"kv_role={role}"))

    async def _node_health(self, every: float = 3.0) -> None:
        """Slurm's view of the run's nodes (a dead slurmd shows as 'not responding')."""
        nodes = list(self.plan.selection.all())
        while True:
            health = await self.launcher.node_health(nodes)
            for node, why in health.items():
                self.emit(Event("conn", node, "ok" if not why else "unhealthy", why))
            await asyncio.sleep(every)

    async def _ticker(self) -> None:
        """Timeouts, and the handshake panel's reachability checks."""
        t0 = self.state.started or time.time()
        all_up_at: float | None = None
        while True:
            await asyncio.sleep(0.5)
            now = time.time()
            s = self.state
            if s.status not in ("starting", "launching"):
                if s.status in ("failed", "stopped", "dirty", "serving"):
                    await self._pair_checks()
                continue
            workers = [p for p in s.procs.values() if p.role != "router"]
            up = all(p.stage in ("http_up", "registered", "serving") for p in workers)
            if up and all_up_at is None:
                all_up_at = now
            if not up and now - t0 > self.recipe.health.worker_timeout_s:
                self._fail(f"timeout after {self.recipe.health.worker_timeout_s:g}s: {diagnose(s).headline}")
            if all_up_at and now - all_up_at > self.recipe.health.router_timeout_s and \
                    s.procs.get("router") and s.procs["router"].stage != "serving":
                self._fail(f"router not serving {self.recipe.health.router_timeout_s:g}s after every worker "
                           f"was up: {diagnose(s).headline}")
            await self._pair_checks()

    async def _pair_checks(self) -> None:
        for pr in self.state.pairs.values():
            p, d = self.state.procs.get(pr.prefill), self.state.procs.get(pr.decode)
            if p is None or d is None:
                continue
            reg = [x.stage in WORKER_STAGES and WORKER_STAGES.index(x.stage) >= WORKER_STAGES.index("kv_registered")
                   for x in (p, d)]
            if pr.stage == "waiting" and all(reg):
                self.emit(Event("pair", pr.key, "both_registered", "both sides registered their KV memory"))
            if pr.stage == "both_registered":
                ep, decode_node = self.plan.endpoint(pr.prefill), self.plan.endpoint(pr.decode).node
                runner = self.launcher.probe_runner(decode_node)  # as near the decode side as the launcher gets
                results = await asyncio.gather(*(tcp_probe(ep.host, port, 1.0, runner) for port in ep.handshake_ports))
                if all(r == "open" for r in results):
                    self.emit(Event("pair", pr.key, "ports_reachable",
                                    f"{ep.host}:{ep.handshake_ports[0]}-{ep.handshake_ports[-1]} reachable from "
                                    f"{self.launcher.probe_vantage(decode_node)}"))

    async def _router_checks(self) -> None:
        """Once the router's port is open: /readiness, /workers, /v1/models, then one smoke completion."""
        router = self.plan.router
        runner = self.launcher.probe_runner(router.node)
        while self.state.procs.get("router") is None or self.state.procs["router"].stage not in ("http_up", "serving"):
            await asyncio.sleep(0.1)
        if self.state.checks.get("smoke") and self.state.checks["smoke"].ok:
            return
        name = self.recipe.model.client_name
        deadline = time.monotonic() + self.recipe.health.router_timeout_s
        while time.monotonic() < deadline:
            r = await http_get(router.host, router.port, "/readiness", 3.0, runner)
            if r.ok:
                self.emit(Event("check", "readiness", "ok", r.text(200), data=r.json() or {}))
                break
            self.emit(Event("check", "readiness", "wait", f"{r.status or r.error}: {r.text(120)}"))
            await asyncio.sleep(0.5)
        w = await http_get(router.host, router.port, "/workers", 3.0, runner)
        stats = (w.json() or {}).get("stats", {}) if w.ok else {}
        if stats:
            want_p, want_d = len(self.plan.role_endpoints("prefill")), len(self.plan.role_endpoints("decode"))
            have_p, have_d = stats.get("prefill_count", 0), stats.get("decode_count", 0) + stats.get("regular_count", 0)
            ok = have_p >= want_p and have_d >= want_d if self.recipe.mode == "disagg" else \
                have_d >= len(self.plan.role_endpoints("worker"))
            self.emit(Event("check", "workers", "ok" if ok else "fail",
                            f"router has {have_p} prefill and {have_d} decode/regular workers", data=stats))
            if ok:
                for wname, wp in self.state.procs.items():
                    if wp.role != "router" and wp.stage == "http_up":
                        self.emit_stage(wname, "registered", "listed by the router's /workers")
        m = await http_get(router.host, router.port, "/v1/models", 5.0, runner)
        ids = [d.get("id") for d in (m.json() or {}).get("data", [])] if m.ok else []
        if name in ids:
            self.emit(Event("check", "models", "ok", f"router serves '{name}'"))
        else:
            self.emit(Event("check", "models", "fail",
                            f"clients will ask for '{name}' but the router serves {ids or m.error or m.status}"))
            self._fail(f"the router does not serve '{name}' (it serves {ids}); clients would get 503")
            return
        await self._smoke(runner)

    async def _smoke(self, runner) -> None:
        h = self.recipe.health
        body = {"model": self.recipe.model.client_name, "prompt": h.smoke_prompt, "max_tokens": h.smoke_max_tokens,
                "temperature": 0}
        router = self.plan.router
        for attempt in range(3):
            t0 = time.monotonic()
            r = await http_post(router.host, router.port, "/v1/completions", body, h.smoke_timeout_s, runner)
            dt = time.monotonic() - t0
            data = r.json() or {}
            text = ((data.get("choices") or [{}])[0] or {}).get("text", "") if r.ok else ""
            if r.ok and text:
                tokens = (data.get("usage") or {}).get("completion_tokens")
                self.emit(Event("check", "smoke", "ok", f"{tokens or '?'} tokens in {dt:.2f}s: {text.strip()[:80]!r}",
                                data={"tokens": tokens, "seconds": round(dt, 3), "text": text[:200]}))
                # the transfer's log lines may still be on their way: give the tails a moment, so the
                # handshake panel shows the first transfer when "serving" is declared
                for _ in range(20):
                    if not self.state.pairs or any(pr.stage == "transferred" for pr in self.state.pairs.values()):
                        break
                    await asyncio.sleep(0.05)
                if self.stopping or self.torn_down_elsewhere():
                    return  # a teardown began meanwhile: "serving" must not overwrite "stopping"
                self.emit_stage("router", "serving")
                for wname, wp in self.state.procs.items():
                    if wp.role != "router":
                        self.emit_stage(wname, "serving")
                self._set_status("serving", f"serving: {self.state.readiness()}; smoke {tokens or '?'} tokens")
                return
            why = f"HTTP {r.status}: {r.text(200)}" if r.status else r.error
            self.emit(Event("check", "smoke", "fail", f"attempt {attempt + 1}: {why}"))
            await asyncio.sleep(1.0)
        self._fail(f"smoke request through the router failed: {self.state.checks['smoke'].detail}")

    # ------------------------------------------------------------------------------------- one-shot view
    async def refresh(self) -> RunState:
        """One pass of every watcher (for `atomdeck status`): liveness, new log lines, ports, router."""
        for name, h in self.handles.items():
            p = self.state.procs.get(name)
            st = await self.launcher.poll(h)
            if not st.alive and p is not None and p.alive is not False:
                value = "stopped" if self.state.status in ("stopping", "stopped") else "failed"
                self.emit(Event("proc.exit", name, value, st.detail, {"code": st.exit_code}))
                if value == "failed":
                    self._fail()  # run.json says so too, not only this status pass
        await asyncio.gather(*(self._drain(n, h) for n, h in self.handles.items()))
        runner_for = self.launcher.probe_runner
        cells = list(self.state.cells.values())
        results = await asyncio.gather(*(tcp_probe(c.host, c.port, 1.0, runner_for(c.node)) for c in cells))
        for c, res in zip(cells, results):
            self.emit(Event("cell", c.key, res, data={"node": c.node, "port": c.port}))
        self.save_offsets()
        return self.state

    async def _drain(self, name: str, h: ProcHandle, idle: float = 0.3) -> None:
        q: asyncio.Queue = asyncio.Queue()

        async def pump():
            async for item in self.launcher.tail(h, self.offsets.get(name, 0)):
                await q.put(item)

        task = asyncio.create_task(pump())
        try:
            while True:
                try:
                    off, line = await asyncio.wait_for(q.get(), idle)
                except TimeoutError:
                    break
                self.offsets[name] = off
                self._on_line(name, line)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
