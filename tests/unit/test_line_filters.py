"""Every log line is redacted and classified in the watcher (16,000 a second under bench/console.py's
flood). Both now look for cheap literal anchors before running their regexes; these tests hold the
shortcut to the same answers as the regexes alone, over the documented ATOM/Mooncake/AToMesh lines, the
simulator's sources (a lot of words, "token", "Error", "=", ":") and hand-made credential lines."""

from __future__ import annotations

from pathlib import Path

from atomdeck.core.config import secrets
from atomdeck.core.config.secrets import MASK, redact_line
from atomdeck.core.run import classify as cl
from atomdeck.core.run.classify import ROUTER_PATTERNS, WORKER_PATTERNS, LineMatch, classify

ROOT = Path(__file__).resolve().parents[2]

TRICKY = [
    "[atom 12:00:01] Engine Core: running=0 reqs, waiting=0 reqs, KV cache usage=0.0%, prefix cache hit rate=0.0%, "
    "prompt throughput=0.0 tokens/s, generation throughput=0.0 tokens/s (status #123456)",
    "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456", "export hf_token = 'abc123'", 'api_key: "sk-live"',
    '{"access_key":"AKIAABCDEFGHIJKLMNOP"}', "DB_PASSWORD=hunter22 next", "passwd : x", "My_Secret_Key= zz",
    "max_tokens=32 num_speculative_tokens: 4", "token", "TOKEN:", "the secret is out", "x_key\t=\tvalue",
    "ghp_abcdefghijklmnopqrstuvwxyz12 gho_abcdefghijklmnopqrstu", "xoxb-1234567890-abc", "sk-ant-abcdefghijklmnopqrstuv",
    # case folding beyond ASCII: IGNORECASE matches these; lower() would not find them
    "\u017fecret=visible", "api_\u212aey=visible", "ſecret : x", "Ünïcödé line: token=abc",
    "Traceback (most recent call last):", "ValueError: bad", "KeyError: 'x'", "  File x, line 3", "RuntimeError: boom",
    "torch.OutOfMemoryError: HIP out of memory", "HIP ERROR: invalid device", "hiperroroutofmemory",
    "[PRODUCER] Consumer 10.0.0.1 has NO registered buffers", "[PRODUCER] slot transfer FAILED for req 7",
    "[CONSUMER] Sending write_request (block+slot) for req 3", "[CONSUMER] write_request sent for req 3 to x",
    "SocketHandShakePlugin: connect() to 1.2.3.4 failed: Connection refused [111]", "Handshake rejected by peer",
    "[ModelRunner0/8] proc died unexpectedly (exitcode=-9)", "Staging pool exhausted, waiting",
    "All 4 expected workers registered", "Router ready | listening", "ERROR something", "thread 'main' panicked at x",
    "ATOM prefill 10.0.0.1:8000 failed: timeout", "ATOM decode x returned error 500", "Received terminate signal",
    "", "=", ":", "\x1b[31mError: red\x1b[0m",
    # the cheap tests' gates: a credential word then a quote, whitespace, = or :; "gh" then one of its prefixes
    "ghs_abcdefghijklmnopqrstuvwx1234", "see ghr_abcdefghijklmnopqrstuvwx1234.", "gh_not_a_token_abcdefghijklmnop",
    "password'=hunter2", 'SECRET_KEY"  :v', "token\x0b=x", "db_passwd\t\t:  x", "tokens=3 token_count: 4",
]


def corpus() -> list[str]:
    lines = list(TRICKY)
    lines += (ROOT / "docs" / "log-patterns.md").read_text().splitlines()
    for path in sorted((ROOT / "sim").glob("*.py")):
        lines += path.read_text().splitlines()
    return lines


def slow_classify(line: str, role: str) -> LineMatch | None:
    for rx, kind, value in ROUTER_PATTERNS if role == "router" else WORKER_PATTERNS:
        if rx.search(line):
            return LineMatch(kind, value, line)
    return None


def slow_redact(line: str) -> str:
    line = secrets._ASSIGN.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{MASK}", line)
    return secrets._TOKEN_SHAPES.sub(MASK, line)


def test_every_pattern_has_literal_anchors():
    # a pattern without one would silently turn the shortcut off for its whole role
    assert cl._WORKER_NEEDLES is not None and cl._ROUTER_NEEDLES is not None
    for rx, _, _ in WORKER_PATTERNS + ROUTER_PATTERNS:
        assert cl._needles(rx), rx.pattern


def test_classify_answers_as_the_patterns_alone():
    lines = corpus()
    hits = 0
    for line in lines:
        for role in ("prefill", "decode", "router"):
            want = slow_classify(line, role)
            assert classify(line, role) == want, (line, role)
            hits += want is not None
    assert hits > 40  # the corpus does exercise the patterns
    assert classify(TRICKY[0], "decode") is None


def test_redaction_answers_as_the_patterns_alone():
    lines = corpus()
    masked = 0
    for line in lines:
        want = slow_redact(line)
        assert redact_line(line) == want, line
        masked += want != line
    assert masked >= 12
    assert redact_line("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456") == f"HF_TOKEN={MASK}"
    assert redact_line("\u017fecret=visible") == f"\u017fecret={MASK}"  # non-ASCII: the regex decides
    assert redact_line(TRICKY[0]) == TRICKY[0]


def test_an_exception_named_with_its_module_is_an_error_line():
    """The line after a traceback names the exception, often with its module: the diagnosis's "last:" shows it
    (before, only bare names matched and a pyzmq bind failure read "last: Traceback (most recent call last):")."""
    for line in ("zmq.error.ZMQError: Address already in use (addr='tcp://*:6301')",
                 "torch.OutOfMemoryError: HIP out of memory", "OSError: [Errno 98] Address already in use"):
        assert classify(line, "prefill") == LineMatch("error", "exception", line), line
    assert classify("see zmq.error.ZMQError: x", "prefill") is None  # only at the start of a line
