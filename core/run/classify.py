"""Log lines -> events: ATOM's stages, Mooncake's registration/transfer/failure lines, AToMesh's stages.

Patterns match the message text only (ATOM's prefix and AToMesh's tracing prefix vary by version),
and the prefixes of lines whose tails changed between versions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class LineMatch:
    kind: str  # "stage" | "error" | "pair" | "hint"
    value: str  # the stage, the pair stage, or the hint name
    text: str  # the line


# (regex, kind, value). Order matters only within a line: the first match wins.
WORKER_PATTERNS: list[tuple[re.Pattern, str, str]] = [
    (re.compile(r"Loading tokenizer from |Initializing engine with model "), "stage", "loading"),
    (re.compile(r"Mooncake KV registration complete: role="), "stage", "kv_registered"),
    (re.compile(r"EngineCore fully initialized and ready|Starting server on "), "hint", "binding"),
    (re.compile(r"Server started successfully and ready to accept requests"), "stage", "http_up"),
    (re.compile(r"\[CONSUMER\] Sending write_request"), "pair", "request"),
    (re.compile(r"\[PRODUCER\] write-done sent for req|\[CONSUMER\] Write-done received for req"), "pair",
     "transferred"),
    (re.compile(r"RuntimeError: Mooncake TransferEngine\.initialize\(\) failed|Mooncake is not installed but"),
     "error", "mooncake-init"),
    (re.compile(r"batch_register_memory FAILED"), "error", "register"),
    (re.compile(r"\[PRODUCER\] Timed out waiting for prefill data|\[CONSUMER\] Timed out waiting for write-done"),
     "pair", "failed"),
    (re.compile(r"\[PRODUCER\] Consumer .* has NO registered buffers"), "pair", "failed"),
    (re.compile(r"\[PRODUCER\] block transfer failed for req|\[CONSUMER\] Failed to send write_request"),
     "pair", "failed"),
    (re.compile(r"\[CONSUMER\] KV checksum mismatch"), "pair", "failed"),
    (re.compile(r"SocketHandShakePlugin: connect\(\).*Connection refused|Handshake rejected by"), "pair", "failed"),
    (re.compile(r"Failed to modify QP to RTR"), "pair", "failed"),
    (re.compile(r"Staging pool exhausted"), "error", "staging-pool"),
    (re.compile(r"Engine core proc .* died unexpectedly"), "error", "engine-died"),
    (re.compile(r"^Traceback \(most recent call last\)|^\w*(Error|Exception): "), "error", "exception"),
    (re.compile(r"out of memory|HIP error|hipErrorOutOfMemory", re.IGNORECASE), "error", "gpu"),
]

ROUTER_PATTERNS: list[tuple[re.Pattern, str, str]] = [
    (re.compile(r"Atomesh starting|Starting router on "), "stage", "starting"),
    (re.compile(r"Worker initialization job submitted"), "stage", "waiting_workers"),
    (re.compile(r"All \d+ expected worker"), "stage", "workers_registered"),
    (re.compile(r"Router ready \|"), "stage", "ready"),
    (re.compile(r"Timed out waiting for workers"), "error", "workers-timeout"),
    (re.compile(r"is not a prefill \(kv_role="), "error", "kv-role"),
    (re.compile(r"ATOM prefill .* failed:|response missing kv_transfer_params|ATOM decode .* returned error"),
     "error", "relay"),
    (re.compile(r"Received terminate signal"), "hint", "terminating"),
    (re.compile(r"\bERROR\b|\bpanicked at\b"), "error", "router-error"),
]

# Lines the console highlights as errors / known fatal lines (used by the log view).
HIGHLIGHT = re.compile(
    r"Traceback|Error|ERROR|FAILED|[Ff]ailed|Timed out|NO registered buffers|Connection refused|Handshake rejected|"
    r"is not a prefill|panicked|died unexpectedly|Staging pool exhausted|out of memory")


_ANY_WORKER = re.compile("|".join(f"(?:{rx.pattern})" for rx, _, _ in WORKER_PATTERNS
                                   if not rx.flags & re.IGNORECASE))
_ANY_WORKER_CI = re.compile("|".join(f"(?:{rx.pattern})" for rx, _, _ in WORKER_PATTERNS if rx.flags & re.IGNORECASE),
                            re.IGNORECASE)
_ANY_ROUTER = re.compile("|".join(f"(?:{rx.pattern})" for rx, _, _ in ROUTER_PATTERNS))


def classify(line: str, role: str) -> LineMatch | None:
    """What a log line of a process in `role` tells, if anything. A combined search comes first: most
    lines (and every line of a log flood) say nothing, and then that costs one or two regex passes."""
    router = role == "router"
    if router:
        if not _ANY_ROUTER.search(line):
            return None
    elif not _ANY_WORKER.search(line) and not _ANY_WORKER_CI.search(line):
        return None
    patterns = ROUTER_PATTERNS if router else WORKER_PATTERNS
    for rx, kind, value in patterns:
        if rx.search(line):
            return LineMatch(kind, value, line)
    return None
