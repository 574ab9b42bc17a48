"""What a bench reads of the run around each step, for the validity gate (validity.py): the run's health events
during the step and the engines' own log lines about KV transfers and the requests each worker served.

Which lines, from ROCm/ATOM's Mooncake connector (atom/kv_transfer/disaggregation/mooncake/mooncake_connector.py,
"C"; docs/log-patterns.md has every line at both revisions). ATOM's /metrics has no transfer counter at head
ffdf3bb5 (atom/entrypoints/openai/metrics.py: requests, tokens, KV blocks, prefix cache, MTP) and the pin 087b82d9
has no /metrics at all, so the log lines are the engines' only count of transfers:
- a transfer that arrived: the decode's `[CONSUMER] Write-done received for req N` (pin C:1217, head C:1791 with
  "(all stages)"), once per request;
- a remote prefill taken (not computed again): the decode scheduler's `[SCHEDULER-CONSUMER] Queued req N for remote
  KV recv` (pin C:197, head C:392), once per request;
- a failed transfer, on the prefill: `[PRODUCER] block|slot transfer failed for req N` (pin C:990/C:1084, head
  C:1421/C:1556; at the pin write-done is sent anyway and the decode answers 200 from the wrong bytes),
  `[PRODUCER] transfer failed|FAILED for req N` (head C:1281/C:1327), `Timed out waiting for prefill data` (pin
  C:892, head C:1202), `has NO registered buffers` (pin C:907, head C:1257), `src/dst block count mismatch` (head
  C:1244);
- the requests a prefill served: `[PRODUCER] Cached N prefill blocks (slot=S) for req N` (pin C:640, head C:899).
AToMesh has no per-worker request counter: `mesh_worker_selection_total` is labelled by worker type, connection
mode, model and policy only (atom/mesh/src/observability/metrics/recorder.rs `record_worker_selection`) and
`mesh_worker_requests_active{worker}` is a gauge of requests in flight; the workers' lines above count per worker.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from typing import Any

from .validity import HealthNote, KvEvidence

WRITE_DONE = re.compile(r"\[CONSUMER\] Write-done received for req ([^\s,]+)")
QUEUED = re.compile(r"\[SCHEDULER-CONSUMER\] Queued req (\S+) for remote KV recv")
CACHED = re.compile(r"\[PRODUCER\] Cached \d+ prefill blocks \(slot=-?\d+\) for req (\S+)")
FAILED = re.compile(r"\[PRODUCER\] (?:(?:block|slot) transfer failed for req (\S+)|transfer (?:failed|FAILED) for req "
                    r"(\S+)|Timed out waiting for prefill data for transfer_id=\S+ \(req_id=([^)\s]+)\)|Consumer \S+ "
                    r"has NO registered buffers|src/dst block count mismatch for req (\S+))")
FAILED_KEPT = 100  # failure lines kept per prefill per step
SETTLE_S = 0.3  # after a step's last answer, for the engines' last lines of it to reach their logs
SICK = ("unresponsive", "stalled")


def sick(state: Any, since: bool = False) -> list[HealthNote]:
    """Who is unhealthy in a run's state right now: unresponsive or stalled processes, failed or exited ones, failed
    KV pairs (`since`: each note's t is when it began, else 0 for "before")."""
    out = []
    for p in state.procs.values():
        if p.stage in SICK:
            out.append(HealthNote(p.name, p.stage, p.health_detail, p.since if since else 0.0))
        elif p.stage == "failed" or p.alive is False:
            out.append(HealthNote(p.name, "failed" if p.stage == "failed" else "exited", p.exit_detail,
                                  p.since if since else 0.0))
    for pr in state.pairs.values():
        if pr.stage == "failed":
            out.append(HealthNote(pr.key, "pair failed", pr.failed, pr.since if since else 0.0))
    return out


class HealthLog:
    """The run's health events as they come (core's listener on the run): what went wrong, and when."""

    def __init__(self, run: Any, on_note: Callable[[HealthNote], None] | None = None):
        self.run = run
        self.notes: list[HealthNote] = []
        self.on_note = on_note
        run.listeners.append(self._heard)

    def close(self) -> None:
        if self._heard in self.run.listeners:
            self.run.listeners.remove(self._heard)

    def _heard(self, e: Any) -> None:
        note = None
        if e.kind == "proc.health" and e.value in SICK:
            note = HealthNote(e.name, e.value, e.detail, e.t)
        elif e.kind == "proc.exit":
            note = HealthNote(e.name, "exited" if e.value == "stopped" else "failed", e.detail, e.t)
        elif e.kind == "proc.stage" and e.value == "failed":
            note = HealthNote(e.name, "failed", e.detail, e.t)
        elif e.kind == "pair" and e.value == "failed":
            note = HealthNote(e.name, "pair failed", e.detail, e.t)
        if note is not None:
            self.notes.append(note)
            if self.on_note is not None:
                self.on_note(note)

    def now_sick(self) -> list[HealthNote]:
        """The processes unhealthy right now (state), as notes from before the step."""
        return sick(self.run.state)

    def between(self, start: float, end: float) -> list[HealthNote]:
        return [n for n in self.notes if start <= n.t <= end]


class LogCursor:
    """Each worker's log read from where the last read ended (any launcher: `launcher.read_log`)."""

    def __init__(self, run: Any):
        self.run = run
        self.at: dict[str, int] = {}

    def workers(self) -> list[str]:
        return [n for n, p in self.run.state.procs.items() if p.role != "router" and n in self.run.handles]

    async def skip_to_end(self) -> dict[str, str]:
        """Move every cursor to the end of its log now; returns the processes whose log cannot be read, and why."""
        lines = await self.read()
        return {n: v for n, v in lines.items() if isinstance(v, str)}

    async def read(self) -> dict[str, list[str] | str]:
        """Every worker's new lines since the last read (or why they could not be read)."""
        names = self.workers()
        got = await asyncio.gather(*(self._read(n) for n in names), return_exceptions=True)
        out: dict[str, list[str] | str] = {}
        for name, r in zip(names, got):
            out[name] = f"{type(r).__name__}: {str(r)[:120]}" if isinstance(r, BaseException) else r
        return out

    async def _read(self, name: str) -> list[str]:
        h = self.run.handles[name]
        start = self.at.get(name)
        if start is None and h.launcher != "ssh" and h.log_path and os.path.exists(h.log_path):
            self.at[name] = os.path.getsize(h.log_path)  # a first look: from here on (not the whole log again)
            return []
        lines = []
        off = start or 0
        async for end, line in self.run.launcher.read_log(h, off):
            lines.append(line)
            off = end
        self.at[name] = off
        return lines


def kv_and_routing(run: Any, lines: dict[str, list[str] | str]) -> tuple[KvEvidence, dict[str, dict[str, int]]]:
    """The KV evidence and each P/D worker's served requests in one step's lines."""
    kv = KvEvidence()
    routing: dict[str, dict[str, int]] = {}
    for name, got in lines.items():
        p = run.state.procs.get(name)
        role = p.role if p is not None else ""
        if isinstance(got, str):
            kv.unread[name] = got
            continue
        if role == "decode":
            done, queued = set(), set()
            for line in got:
                if (m := WRITE_DONE.search(line)) is not None:
                    done.add(m.group(1))
                elif (m := QUEUED.search(line)) is not None:
                    queued.add(m.group(1))
            kv.write_done[name], kv.queued[name] = len(done), len(queued)
            routing.setdefault("decode", {})[name] = len(queued)
        elif role == "prefill":
            cached, bad, reqs = set(), [], set()
            for line in got:
                if (m := CACHED.search(line)) is not None:
                    cached.add(m.group(1))
                elif (m := FAILED.search(line)) is not None:
                    bad.append(line.strip())
                    req = next((g for g in m.groups() if g), None)
                    if req is not None:  # (a "NO registered buffers" line names the consumer, not the request)
                        reqs.add(req)
            kv.prefilled[name] = len(cached)
            if bad:
                bad.sort(key=lambda x: "transfer failed for req" not in x)  # the line that says it plainly first
                kv.failed[name] = bad[:FAILED_KEPT]
                kv.failed_requests[name] = len(reqs)
            routing.setdefault("prefill", {})[name] = len(cached)
    return kv, routing


def is_pd(run: Any) -> bool:
    roles = {p.role for p in run.state.procs.values()}
    return "prefill" in roles and "decode" in roles


def clock() -> float:
    return time.time()
