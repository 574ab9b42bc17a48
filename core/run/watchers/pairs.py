"""The Mooncake KV path per prefill->decode pair: both sides registered, the producer's handshake ports
reachable FROM THE CONSUMER'S NODE, and every write_request answered by a write-done.

Real ATOM logs no error when the path is blocked: the consumer sends its write_request over a ZMQ
DEALER socket (which queues and never fails) and waits. So a blocked pair is found from what is
missing (a write_request with no write-done within KV_WAIT_S) plus a probe from the consumer's node.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ...remote.probes import tcp_probe
from ..events import LIVE, WORKER_STAGES, Event
from .base import RunHost

if TYPE_CHECKING:
    from .base import WatcherGroup as Watchers  # (the package imports this module)

REPROBE_S = 3.0
_REGISTERED = frozenset(WORKER_STAGES[WORKER_STAGES.index("kv_registered"):])  # stages at or past it
# consumers whose reachability is probed at the same time (each probe is a process on the consumer's node:
# one after another, 64P64D's 64 decodes x 512 ports took 30 s after serving to fill the handshake matrix)
REACH_AT_ONCE = 4
PROBES_AT_ONCE = 32  # a decode's handshake probes made from here in parallel (a 64P's 512 ports: 32 at a time)
KV_WAIT_S = 4.0  # a write_request with no write-done for this long: the pair's path is checked and failed
# a decode whose oldest request parked for its KV (ATOM's atom:requests_parked_kv_load) waits this long: the run
# is degraded, naming the decode and the prefill it waits on
PARKED_S = 3.0
# ATOM refreshes its /metrics every 5 s (atom/entrypoints/openai/api_server.py: _METRICS_REFRESH_INTERVAL_SECONDS):
# a parked count read there can stand that long after the requests it counted got their KV (a drained decode's
# stays up with no write-done to reset it). Judged from the gauge alone, the wait must outlast one refresh too.
METRICS_REFRESH_S = 5.0

_TARGET = re.compile(r"\b(?:to|at) (?:tcp://)?(\[[0-9a-fA-F:]+\]|[\w.-]+):(\d+)")
_CONSUMER = re.compile(r"\b(?:consumer=|Consumer )(\[[0-9a-fA-F:]+\]|[\w.-]+?)(?::\d+)?[\s,)]")
_REQ = re.compile(r"\bfor req (\S+?)[,\s]")


async def at_most(n: int, jobs: list[Coroutine]) -> None:
    """Run the jobs, `n` at a time; the first error is raised once all have ended (none is left running)."""
    gate = asyncio.Semaphore(n)

    async def one(job: Coroutine) -> None:
        try:
            async with gate:
                await job
        finally:
            job.close()  # (cancelled while it waited for the gate: never started, closed without a warning)

    try:
        ended = await asyncio.gather(*(one(j) for j in jobs), return_exceptions=True)
    finally:  # cancelled before a job's task first ran, `one` never started: close its job here
        for job in jobs:
            job.close()
    errors = [e for e in ended if e is not None]
    if errors:
        raise errors[0]


class HandshakeWatcher:
    def __init__(self, run: RunHost, group: Watchers):
        self.run = run
        self.group = group
        self.decode_target: dict[str, str] = {}  # decode -> the prefill its last write_request went to
        self.waiting: dict[tuple[str, str], tuple[float, str, str | None]] = {}  # (decode, req) -> (t, line, prefill)
        self.checked: set[tuple[str, str]] = set()
        self.probed_at: dict[str, float] = {}  # decode -> last reachability probe (one every REPROBE_S)
        self.transferred_at: dict[str, float] = {}  # decode -> when its last write-done was seen
        self.parked_from: dict[str, float] = {}  # decode -> since when its parked count stayed above 0

    # ---------------------------------------------------------------------------------- log lines
    def on_line(self, name: str, role: str, value: str, line: str) -> None:
        run = self.run
        pairs = [pr for pr in run.state.pairs.values() if name in (pr.prefill, pr.decode)]
        target = _TARGET.search(line)
        target_prefill = None
        if role == "decode" and target:
            host, port = target.group(1).strip("[]"), int(target.group(2))
            for ep in run.plan.role_endpoints("prefill"):
                if ep.host == host and (port in ep.handshake_ports or not ep.handshake_ports):
                    target_prefill = ep.name
            if target_prefill is None:
                target_prefill = next((ep.name for ep in run.plan.role_endpoints("prefill") if ep.host == host),
                                      None)
            if target_prefill:
                self.decode_target[name] = target_prefill
        if role == "decode" and name in self.decode_target:
            pairs = [pr for pr in pairs if pr.prefill == self.decode_target[name]] or pairs
        if role == "prefill" and len(pairs) > 1:
            # a producer's line names its consumer only sometimes ("consumer=10.0.0.3:15571"); without
            # it, it could be about any of the prefill's decodes: leave those to the decode-side lines
            consumer = _CONSUMER.search(line)
            hosts = {ep.name: ep.host for ep in run.plan.role_endpoints("decode")}
            pairs = [pr for pr in pairs if consumer and hosts.get(pr.decode) == consumer.group(1).strip("[]")]
        req = _REQ.search(line + " ")
        if value == "request":
            if role == "decode" and req:
                self.waiting.setdefault((name, req.group(1)), (time.time(), line.strip(), target_prefill))
            return
        if value == "transferred" and role == "decode":
            self.transferred_at[name] = time.time()
            if req:
                self.waiting.pop((name, req.group(1)), None)
            else:
                for k in [k for k in self.waiting if k[0] == name]:
                    self.waiting.pop(k, None)
        for pr in pairs:
            if value == "transferred":
                run.emit(Event("pair", pr.key, "transferred", line.strip()[:300]))
            elif value == "failed" and pr.stage != "transferred":
                run.emit(Event("pair", pr.key, "failed", line.strip()[:300]))

    def again(self, name: str) -> None:
        """A process started again (a restart): its pairs' paths are probed at the next pass, not REPROBE_S
        after the last probe of their consumer."""
        for pr in self.run.state.pairs.values():
            if name in (pr.prefill, pr.decode):
                self.probed_at.pop(pr.decode, None)

    # ---------------------------------------------------------------------------------- periodic checks
    async def checks(self) -> None:
        """Registered pairs: probe the producer's handshake ports from the consumer's node. Then the
        write_requests that got no write-done."""
        run = self.run
        by_decode: dict[str, list] = {}
        # which workers registered, once per pass (issue 19: asked per pair, twice, it was ~10 % of the
        # watcher's samples at 64P64D, 4,096 pairs every 0.5 s long after they had all moved on)
        registered = {name for name, x in run.state.procs.items() if x.up_stage in _REGISTERED}
        for pr in run.state.pairs.values():
            if pr.stage == "waiting" and pr.prefill in registered and pr.decode in registered:
                run.emit(Event("pair", pr.key, "both_registered", "both sides registered their KV memory"))
            if pr.stage == "both_registered" and pr.prefill in run.state.procs and pr.decode in run.state.procs:
                by_decode.setdefault(pr.decode, []).append(pr)
        now = time.monotonic()
        due = [(d, prs) for d, prs in by_decode.items() if now - self.probed_at.get(d, -REPROBE_S) >= REPROBE_S]
        await at_most(REACH_AT_ONCE, [self.reach_pairs(d, prs) for d, prs in due])
        await self.unanswered()

    async def reach_pairs(self, decode: str, prs: list) -> None:
        """Probe the handshake ports of `decode`'s registered prefills from its node."""
        run = self.run
        self.probed_at[decode] = time.monotonic()
        node = run.plan.endpoint(decode).node
        targets = [(ep.host, port) for ep in (run.plan.endpoint(pr.prefill) for pr in prs)
                   for port in ep.handshake_ports]
        results, where = await self.reach(node, targets)
        for pr in prs:
            ep = run.plan.endpoint(pr.prefill)
            if ep.handshake_ports and all(results.get((ep.host, port)) == "open" for port in ep.handshake_ports):
                run.emit(Event("pair", pr.key, "ports_reachable",
                               f"{ep.host}:{ep.handshake_ports[0]}-{ep.handshake_ports[-1]} reachable from "
                               f"{where}"))

    async def reach(self, node: str, targets: list[tuple[str, int]]) -> tuple[dict, str]:
        """Connect to targets from `node` itself; where that cannot run, from as near as the launcher gets."""
        run = self.run
        try:
            return await run.launcher.connect_from(node, targets, 1.0), f"{node} (the consumer's node)"
        except Exception:
            runner = run.launcher.probe_runner(node)
            gate = asyncio.Semaphore(PROBES_AT_ONCE)

            async def one(host: str, port: int) -> str:
                async with gate:
                    return await tcp_probe(host, port, 1.0, runner)

            res = await asyncio.gather(*(one(h, p) for h, p in targets))
            return dict(zip(targets, res)), run.launcher.probe_vantage(node)

    async def unanswered(self, now: float | None = None) -> None:
        """A write_request with no write-done for KV_WAIT_S: find out why from the consumer's node, fail
        the pair with the path in words; the run's headline says it."""
        run = self.run
        now = now or time.time()
        jobs, named = [], set()
        for (decode, req), (t, _line, prefill) in list(self.waiting.items()):
            if now - t < KV_WAIT_S or (decode, req) in self.checked:
                continue
            self.checked.add((decode, req))
            prefills = [prefill] if prefill else [pr.prefill for pr in run.state.pairs.values() if pr.decode == decode]
            for pname in prefills:
                pr = run.state.pairs.get(f"{pname}>{decode}")
                if pr is not None and pr.stage != "failed" and pr.key not in named:
                    named.add(pr.key)  # two requests of one pair waiting: it fails once, as before
                    jobs.append(self.fail_pair(decode, pname, req, now - t))
        await at_most(REACH_AT_ONCE, jobs)  # a path blocked to one prefill: all its decodes' pairs named at once

    async def fail_pair(self, decode: str, prefill: str, req: str, waited: float) -> None:
        run = self.run
        key = f"{prefill}>{decode}"
        why = await self.explain(decode, prefill, req, waited)
        run.emit(Event("pair", key, "failed", why, data={"req": req, "waited": round(waited, 1)}))
        headline = f"KV transfer {prefill} -> {decode} failed: {why}"
        if run.state.status in ("launching", "starting"):
            run._fail(headline)
        elif run.state.status in LIVE:
            run._set_status("degraded", headline)

    async def explain(self, decode: str, prefill: str, req: str, waited: float) -> str:
        run = self.run
        d_ep, p_ep = run.plan.endpoint(decode), run.plan.endpoint(prefill)
        ports = list(p_ep.handshake_ports)
        start = f"{decode} sent write_request for req {req} {waited:.0f}s ago and got no write-done"
        if not ports:
            return start
        results, where = await self.reach(d_ep.node, [(p_ep.host, port) for port in ports])
        bad = [(port, results.get((p_ep.host, port), "?")) for port in ports
               if results.get((p_ep.host, port)) != "open"]
        if not bad:
            return (f"{start}; {prefill} {p_ep.host}:{ports[0]}-{ports[-1]} is reachable from {where}: the "
                    f"producer took the request but did not answer (see {prefill}'s log)")
        port, why = bad[0]
        span = f"{p_ep.host}:{port}" + (f" (and {len(bad) - 1} more of :{ports[0]}-{ports[-1]})" if len(bad) > 1
                                        else "")
        here = await tcp_probe(p_ep.host, port, 1.0)
        if here == "open":
            tail = "reachable from the console host: the path between the nodes is blocked"
        else:
            tail = f"from the console host too ({here}): {prefill}'s handshake listener is not there"
        return f"{decode} on {d_ep.node} cannot reach {prefill} {span} ({why}); {tail}; {start}"

    # ---------------------------------------------------------------------------------- parked requests
    def parked(self, decode: str, count: float | None, now: float) -> dict:
        """A decode's requests parked for their KV: ATOM's atom:requests_parked_kv_load (`count`, None when its
        /metrics has no such gauge), and how long the oldest has waited, as far as atomdeck saw it: the oldest
        write_request of the decode's log with no write-done yet (when atomdeck read the line: a lower bound),
        else the time the count stayed above 0 with no write-done seen meanwhile. The prefill it waits on: the one
        its write_request went to (the address in the line); with a single prefill, that one. Returns the figures
        for the decode's metrics; the run is degraded while the oldest waited PARKED_S or more."""
        n = int(count or 0)
        mine = [(t, prefill, req) for (d, req), (t, _line, prefill) in self.waiting.items() if d == decode]
        if n > 0:
            self.parked_from.setdefault(decode, now)
        else:
            self.parked_from.pop(decode, None)
        since, prefill, req, by = None, None, "", ""
        if mine and (n > 0 or count is None):
            since, prefill, req = min(mine, key=lambda x: x[0])
            by = "log"
        elif n > 0:
            since, by = max(self.parked_from[decode], self.transferred_at.get(decode, 0.0)), "metrics"
        if since is not None and prefill is None:
            prefill = self.decode_target.get(decode) or self._only_prefill(decode)
        out: dict[str, Any] = {"parked": n if count is not None else len(mine)}
        if since is not None:
            out.update(parked_oldest_s=round(max(0.0, now - since), 1), parked_on=prefill or "", parked_by=by,
                       parked_req=req)
        self._judge(decode, out, since, now)
        return out

    def _only_prefill(self, decode: str) -> str | None:
        prefills = [pr.prefill for pr in self.run.state.pairs.values() if pr.decode == decode]
        return prefills[0] if len(prefills) == 1 else None

    def _judge(self, decode: str, figures: dict, since: float | None, now: float) -> None:
        """Degraded while a request waits PARKED_S or more; said again when the count changes; ok once none does."""
        run = self.run
        p = run.state.procs.get(decode)
        if p is None or run.stopping:
            return
        wait = PARKED_S if figures.get("parked_by") == "log" else PARKED_S + METRICS_REFRESH_S
        if since is None or now - since < wait:
            # recovered: nothing parked, or a write-done came since (a session that just began sees the old
            # requests' age only from now on: that alone is no recovery)
            if p.parked and (since is None or self.transferred_at.get(decode, 0.0) > p.parked_data.get("since", 0.0)):
                run.emit(Event("proc.parked", decode, "ok", f"no request has waited {PARKED_S:g}s for its KV any more"))
                self.group.settle()
            return
        on = figures.get("parked_on")
        ep = run.plan.endpoint(on) if on else None
        where = f"waiting on {on}" + (f" ({ep.host}:{ep.handshake_ports[0]}-{ep.handshake_ports[-1]})"
                                      if ep is not None and ep.handshake_ports else "") if on else \
            "waiting on a prefill atomdeck cannot name (no write_request line of it was read)"
        req = f"; req {figures['parked_req']} got no write-done" if figures.get("parked_req") else ""
        count = figures["parked"]
        detail = (f"{decode} on {p.node}: {count} request{'s' if count != 1 else ''} parked for KV, the oldest for "
                  f"{now - since:.0f}s+, {where}{req}")
        data = {"count": count, "since": since, "prefill": on or "", "req": figures.get("parked_req", "")}
        same = p.parked and p.parked_data.get("count") == count and p.parked_data.get("prefill") == (on or "")
        if not same:
            run.emit(Event("proc.parked", decode, "parked", detail, data))
            self.group.settle()
