"""The validity gate of one bench step: a step's numbers count only when every check holds.

- lengths: every completed request has the output length asked (short ones counted and named, zero-token ones
  called out: srt-slurm #429 reported success with "Total generated tokens: 0");
- failures: no request failed;
- health: no process turned unresponsive, stalled, failed or exited during the step (the run's own events);
- kv: on a P/D run, the KV transfers really happened (ROCm/ATOM PR #1866: every transfer failed while HTTP said
  200): the decodes received a write-done for every request, no prefill logged a failed transfer, and the decodes
  queued a remote KV receive for every request instead of computing the prefill again (kserve #5987);
- routing: the router sent requests to every worker (a worker that got none is named).

The evidence for kv and routing is the engines' own log lines (evidence.py reads them, which lines and from which
ATOM source); a check without evidence is "not checked" (None), never a pass or a failure. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .stats import RequestRecord

CHECKS = ("health", "kv", "routing", "lengths", "failures")  # the order reasons are given in: causes first
NAMED = 5  # requests or processes named in one reason; the rest counted
# a worker that got no request is named only when the step sent enough for none to be left out by chance: with
# a random policy and k workers, P(one gets none of n) ~ k (1 - 1/k)^n: 8k requests make it < 1e-3 for k >= 2
ROUTING_MIN_PER_WORKER = 8


@dataclass
class HealthNote:
    """A process's health going wrong during a step, from the run's events (or its state at the step's start)."""

    process: str
    what: str  # unresponsive | stalled | failed | exited | pair failed
    detail: str = ""
    t: float = 0.0  # when (time.time); 0 for "already so when the step began"


@dataclass
class KvEvidence:
    """What the engines logged about KV transfers during the step (distinct request ids), per process."""

    write_done: dict[str, int] = field(default_factory=dict)  # decode -> requests it received a write-done for
    queued: dict[str, int] = field(default_factory=dict)  # decode -> requests it queued a remote KV receive for
    failed: dict[str, list[str]] = field(default_factory=dict)  # prefill -> its failure lines (the most telling first)
    failed_requests: dict[str, int] = field(default_factory=dict)  # prefill -> requests whose transfer failed
    prefilled: dict[str, int] = field(default_factory=dict)  # prefill -> requests it cached prefill blocks for
    unread: dict[str, str] = field(default_factory=dict)  # process -> why its log could not be read

    @property
    def transfers(self) -> int:
        return sum(self.write_done.values())

    @property
    def remote(self) -> int:
        return sum(self.queued.values())


@dataclass
class Verdict:
    valid: bool
    reasons: list[str]
    checks: dict[str, dict]  # check -> {"ok": True | False | None, "detail": str, ...}

    def to_json(self) -> dict:
        return {"valid": self.valid, "invalid_reasons": list(self.reasons), "checks": self.checks}


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(items[:NAMED])
    return shown + (f" and {len(items) - NAMED} more" if len(items) > NAMED else "")


def check_lengths(records: Sequence[RequestRecord]) -> dict:
    done = [r for r in records if r.success]
    zero = [r for r in done if r.output_tokens == 0]
    short = [r for r in done if r.short and r.output_tokens > 0]
    if not zero and not short:
        return {"ok": True, "detail": f"{len(done)} outputs of the asked length", "short": 0, "zero": 0}
    parts = []
    if zero:
        parts.append(f"{len(zero)} request(s) with 0 output tokens (" + _names([f"#{r.index}" for r in zero]) + ")")
    if short:
        parts.append(f"{len(short)} short output(s) (" + _names(
            [f"#{r.index} {r.output_tokens}/{r.max_tokens}" for r in short]) + ")")
    return {"ok": False, "detail": "; ".join(parts), "short": len(short), "zero": len(zero),
            "requests": [r.index for r in zero + short]}


def check_failures(records: Sequence[RequestRecord]) -> dict:
    failed = [r for r in records if not r.success]
    if not failed:
        return {"ok": True, "detail": "no request failed", "failed": 0}
    by: dict[str, int] = {}
    for r in failed:
        by[r.error] = by.get(r.error, 0) + 1
    top = "; ".join(f"{n}x {e[:100]}" for e, n in sorted(by.items(), key=lambda x: -x[1])[:2])
    return {"ok": False, "detail": f"{len(failed)} of {len(records)} request(s) failed ({top})", "failed": len(failed),
            "requests": [r.index for r in failed]}


def check_health(notes: Sequence[HealthNote] | None, start: float = 0.0) -> dict:
    if notes is None:
        return {"ok": None, "detail": "not checked: the run's health was not followed"}
    if not notes:
        return {"ok": True, "detail": "every process stayed healthy"}
    seen: dict[str, HealthNote] = {}
    for n in notes:
        seen.setdefault(n.process, n)
    words = []
    for n in seen.values():
        when = "since before the step" if not n.t or n.t <= start else f"at +{n.t - start:.1f}s"
        words.append(f"{n.process} {n.what} {when}" + (f" ({n.detail[:120]})" if n.detail else ""))
    return {"ok": False, "detail": "; ".join(words), "processes": sorted(seen)}


def check_kv(kv: KvEvidence | None, completed: int, pd: bool) -> dict:
    if not pd:
        return {"ok": None, "detail": "no KV transfer: not a prefill/decode run"}
    if kv is None:
        return {"ok": None, "detail": "not checked: the engines' logs were not read"}
    if kv.unread:
        return {"ok": None, "detail": "not checked: " + "; ".join(f"{p}: {w}" for p, w in kv.unread.items())}
    problems = []
    if kv.failed:
        problems.append("transfers failed on " + "; ".join(
            f"{p} (for {kv.failed_requests.get(p, 0)} requests, {len(lines)} lines, e.g. {lines[0][:120]})"
            for p, lines in kv.failed.items()))
    if kv.transfers < completed:
        problems.append(f"only {kv.transfers} of {completed} completed requests had their KV transferred "
                        f"(decodes' 'Write-done received': " + ", ".join(f"{d} {n}" for d, n in kv.write_done.items())
                        + ")")
    if kv.remote < completed:
        problems.append(f"decode computed the prefill again for {completed - kv.remote} of {completed} requests "
                        f"(only {kv.remote} 'Queued req ... for remote KV recv')")
    data = {"transfers": kv.transfers, "remote_recv": kv.remote, "failed_transfers": sum(kv.failed_requests.values()),
            "by_decode": dict(kv.write_done)}
    if problems:
        return {"ok": False, "detail": "; ".join(problems), **data}
    return {"ok": True, "detail": f"{kv.transfers} KV transfers for {completed} requests, none failed", **data}


def check_routing(counts: dict[str, dict[str, int]] | None, sent: int) -> dict:
    """counts: role -> worker -> requests it served in the step (from its own log lines)."""
    if not counts:
        return {"ok": None, "detail": "not checked: no per-worker evidence"}
    idle, judged, skipped = [], [], []
    for role, workers in counts.items():
        if len(workers) < 2:
            continue  # one worker of a role gets everything or nothing: the other checks say which
        if sent < ROUTING_MIN_PER_WORKER * len(workers):
            skipped.append(f"{role}: {sent} requests for {len(workers)} workers")
            continue
        judged.append(role)
        idle += [w for w, n in workers.items() if n == 0]
    by = {w: n for ws in counts.values() for w, n in ws.items()}
    if idle:
        return {"ok": False, "detail": f"the router sent no request to {_names(idle)} ("
                + ", ".join(f"{w} {n}" for w, n in by.items()) + ")", "by_worker": by, "idle": idle}
    if not judged:
        why = f"too few requests to judge ({'; '.join(skipped)})" if skipped else "one worker per role"
        return {"ok": None if skipped else True, "detail": why, "by_worker": by}
    return {"ok": True, "detail": "every worker served: " + ", ".join(f"{w} {n}" for w, n in by.items()),
            "by_worker": by}


def judge(records: Sequence[RequestRecord], *, notes: Sequence[HealthNote] | None = None, start: float = 0.0,
          kv: KvEvidence | None = None, pd: bool = False, routing: dict[str, dict[str, int]] | None = None) -> Verdict:
    """The step's verdict from its records and the evidence gathered around it."""
    completed = sum(r.success for r in records)
    checks = {"health": check_health(notes, start), "kv": check_kv(kv, completed, pd),
              "routing": check_routing(routing, len(records)), "lengths": check_lengths(records),
              "failures": check_failures(records)}
    reasons = [f"{name}: {c['detail']}" for name, c in checks.items() if c["ok"] is False]
    return Verdict(not reasons, reasons, checks)


def short_reason(summary: dict) -> str:
    """One reason of an invalid step, short enough for a table cell ("" when valid)."""
    reasons = summary.get("invalid_reasons") or []
    if summary.get("valid", True) or not reasons:
        return ""
    first = reasons[0]
    return first if len(reasons) == 1 else f"{first} (+{len(reasons) - 1})"
