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
# Every pattern cites where the real program prints it; docs/log-patterns.md has the full table.
# pin = ROCm/ATOM 087b82d9 (the AToMesh router pin), head = ROCm/ATOM ffdf3bb5, mc = Mooncake 3b5a59413,
# C = atom/kv_transfer/disaggregation/mooncake/mooncake_connector.py. Where pin and head word a line
# differently, the pattern matches both.
WORKER_PATTERNS: list[tuple[re.Pattern, str, str]] = [
    # api_server.py pin :1157/:1162, head :2086/:2100
    (re.compile(r"Loading tokenizer from |Initializing engine with model "), "stage", "loading"),
    # C pin :585, head :843
    (re.compile(r"Mooncake KV registration complete: role="), "stage", "kv_registered"),
    # engine_core.py pin :155, head :172; api_server.py pin :1187, head :2149 ("... (loop=uvloop)...")
    (re.compile(r"EngineCore fully initialized and ready|Starting server on "), "hint", "binding"),
    # api_server.py pin :743, head :1163
    (re.compile(r"Server started successfully and ready to accept requests"), "stage", "http_up"),
    # the consumer asked for its KV: pin C:722/:679 "Sending write_request ... for req" and C:772
    # "write_request sent for req N to ADDR"; head C:1026 "write_request sent for req N ... at ADDR"
    (re.compile(r"\[CONSUMER\] (?:Sending write_request(?: \(block\+slot\))?|write_request sent) for req"), "pair",
     "request"),
    # C pin :1184/:1217, head :1684/:1791 (head: "Write-done received for req N (all stages)")
    (re.compile(r"\[PRODUCER\] write-done sent for req|\[CONSUMER\] Write-done received for req"), "pair",
     "transferred"),
    # C pin :317/:286, head :567/:503 (raised: the traceback's last line)
    (re.compile(r"RuntimeError: Mooncake TransferEngine\.initialize\(\) failed|Mooncake is not installed but"),
     "error", "mooncake-init"),
    # C pin :545, head :803
    (re.compile(r"batch_register_memory FAILED"), "error", "register"),
    # C pin :892, head :1202
    (re.compile(r"\[PRODUCER\] Timed out waiting for prefill data"), "pair", "failed"),
    # C pin :907, head :1257
    (re.compile(r"\[PRODUCER\] Consumer .* has NO registered buffers"), "pair", "failed"),
    # C pin :990/:1032 and :1084, head :1421/:1499/:1556; head only: C:1281 "transfer failed for req",
    # C:1327 "transfer FAILED for req", C:1244 "src/dst block count mismatch", C:1754 "Write-done nonce mismatch"
    (re.compile(r"\[PRODUCER\] (?:block |slot )?transfer (?:failed|FAILED) for req|"
                r"\[PRODUCER\] src/dst block count mismatch|\[CONSUMER\] Write-done nonce mismatch"), "pair", "failed"),
    # mc transfer_metadata_plugin.cpp:984,1007,1030 (glog PLOG appends ": Connection refused [111]"),
    # mc transfer_metadata.cpp:1519
    (re.compile(r"SocketHandShakePlugin: connect\(\).*Connection refused|Handshake rejected by"), "pair", "failed"),
    # mc docs troubleshooting.md:66 (RDMA only)
    (re.compile(r"Failed to modify QP to RTR"), "pair", "failed"),
    # C pin :786, head :1055
    (re.compile(r"Staging pool exhausted"), "error", "staging-pool"),
    # atom/model_engine/async_proc.py pin :428, head :464: "...: [ModelRunner0/8] proc died unexpectedly (exitcode=..)"
    (re.compile(r"proc died unexpectedly"), "error", "engine-died"),
    # Python's own; the exception's line may name its module (zmq.error.ZMQError: ..., torch.OutOfMemoryError: ...)
    (re.compile(r"^Traceback \(most recent call last\)|^[\w.]*(Error|Exception): "), "error", "exception"),
    # torch / HIP runtime messages
    (re.compile(r"out of memory|HIP error|hipErrorOutOfMemory", re.IGNORECASE), "error", "gpu"),
    # uvicorn's Server.startup logs the OSError of asyncio's create_server (base_events.py: "[Errno 98] error while
    # attempting to bind on address ('0.0.0.0', 8010): address already in use") and the server exits 1
    (re.compile(r"error while attempting to bind on address"), "error", "bind"),
]

# AToMesh: atom/mesh/src in ROCm/ATOM (pin and head); docs/log-patterns.md §3.
ROUTER_PATTERNS: list[tuple[re.Pattern, str, str]] = [
    (re.compile(r"Atomesh starting|Starting router on "), "stage", "starting"),  # main.rs:28, server.rs:545
    (re.compile(r"Worker initialization job submitted"), "stage", "waiting_workers"),
    (re.compile(r"All \d+ expected worker"), "stage", "workers_registered"),  # pin server.rs:658, head :700
    (re.compile(r"Router ready \|"), "stage", "ready"),  # server.rs:734
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


def _needles(rx: re.Pattern) -> tuple[str, ...] | None:
    """Lower-case strings one of which every line that `rx` matches contains (a literal run of 3 or more
    characters per alternative, or per alternative of a group in it), or None when some alternative has
    none (then the pattern is always tried). Read from the pattern itself, so a pattern added above is
    covered without anyone keeping a second list."""
    try:
        from re import _parser  # type: ignore[attr-defined]  # sre's parser: what re.compile reads

        tree = _parser.parse(rx.pattern, rx.flags)
    except Exception:  # another Python: no shortcut, the regexes decide
        return None
    return _seq_needles(list(tree))


def _seq_needles(items: list) -> tuple[str, ...] | None:
    """Needles of a sequence: its longest literal run, else those of a group or alternation in it that
    must match (repeats, which may match nothing, are skipped)."""
    from re import _parser  # type: ignore[attr-defined]

    best, run, group = "", "", None
    for op, av in items + [(None, None)]:
        if op is _parser.LITERAL:
            run += chr(av)
            continue
        best = max(best, run, key=len)
        run = ""
        if group is not None:
            continue
        if op is _parser.SUBPATTERN:
            group = _seq_needles(list(av[-1]))
        elif op is _parser.BRANCH:
            out: list[str] = []
            for alt in av[1]:
                sub = _seq_needles(list(alt))
                if sub is None:
                    out = []
                    break
                out += sub
            group = tuple(out) or None
    if len(best) >= 3:
        return (best.lower(),)
    return group


def _all_needles(patterns: list[tuple[re.Pattern, str, str]]) -> tuple[str, ...] | None:
    out: list[str] = []
    for rx, _, _ in patterns:
        got = _needles(rx)
        if got is None:
            return None
        out += got
    out = list(dict.fromkeys(out))
    # a needle that holds another is found only where that one is: looking for both is one scan too many
    return tuple(n for n in out if not any(o != n and o in n for o in out))


# Most lines (and every line of a log flood) say nothing: one look for a few literal strings in the
# lower-cased line tells so in ~2 us, where the patterns' combined regex took ~40 us on ATOM's engine-status
# line (8 processes x 2,000 lines/s needed most of a core for that alone).
_WORKER_NEEDLES = _all_needles(WORKER_PATTERNS)
_ROUTER_NEEDLES = _all_needles(ROUTER_PATTERNS)


def _says_nothing(line: str, needles: tuple[str, ...] | None) -> bool:
    """True only if no pattern can match (non-ASCII lines go to the regexes: case folding beyond ASCII)."""
    if needles is None or not line.isascii():
        return False
    low = line.lower()
    for needle in needles:
        if needle in low:
            return False
    return True


def says_nothing(text: str, role: str) -> bool:
    """True only if classify(line, role) is None for every line joined in `text` (one look at a batch)."""
    return _says_nothing(text, _ROUTER_NEEDLES if role == "router" else _WORKER_NEEDLES)


_ANY_WORKER = re.compile("|".join(f"(?:{rx.pattern})" for rx, _, _ in WORKER_PATTERNS
                                   if not rx.flags & re.IGNORECASE))
_ANY_WORKER_CI = re.compile("|".join(f"(?:{rx.pattern})" for rx, _, _ in WORKER_PATTERNS if rx.flags & re.IGNORECASE),
                            re.IGNORECASE)
_ANY_ROUTER = re.compile("|".join(f"(?:{rx.pattern})" for rx, _, _ in ROUTER_PATTERNS))


def classify(line: str, role: str) -> LineMatch | None:
    """What a log line of a process in `role` tells, if anything. A combined search comes first: most
    lines (and every line of a log flood) say nothing, and then that costs one or two regex passes."""
    router = role == "router"
    if _says_nothing(line, _ROUTER_NEEDLES if router else _WORKER_NEEDLES):
        return None
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
