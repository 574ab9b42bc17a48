"""Secret-looking environment values: redacted wherever atomdeck shows or stores a command."""

from __future__ import annotations

import re

SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# Names that contain KEY but hold no secret.
_NOT_SECRET = {"KEYBOARD", "MONKEYPATCH"}
MASK = "***"


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name)) and name.upper() not in _NOT_SECRET


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret(k) and v else v) for k, v in env.items()}


def redact_tokens(tokens: list[str], env: dict[str, str]) -> list[str]:
    """Mask secret values inside an argv: `K=V` assignments and any token equal to a secret value."""
    secrets = {v for k, v in env.items() if is_secret(k) and v}
    out = []
    for t in tokens:
        if "=" in t:
            k, v = t.split("=", 1)
            if is_secret(k) and v:
                out.append(f"{k}={MASK}")
                continue
        for s in secrets:
            if s and s in t:
                t = t.replace(s, MASK)
        out.append(t)
    return out


def redact_text(text: str, env: dict[str, str]) -> str:
    """Mask secret values in free text (log lines shown on screen)."""
    for k, v in env.items():
        if is_secret(k) and v and len(v) >= 4:
            text = text.replace(v, MASK)
    return text


# Tokens that look like credentials even when atomdeck does not know the value (a reattached console).
_TOKEN_SHAPES = re.compile(r"\b(hf_[A-Za-z0-9]{20,}|ghp_[A-Za-z0-9]{20,}|gh[ousr]_[A-Za-z0-9]{20,}|"
                           r"sk-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})\b")
# NAME=value / "name": value where the name ends like a credential (HF_TOKEN, api_key, DB_PASSWORD), not
# merely contains the word (max_tokens, num_speculative_tokens stay readable)
_ASSIGN = re.compile(r"(?i)\b([A-Z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|SECRET_KEY))"
                     r"(['\"]?\s*[=:]\s*)(['\"]?)([^\s'\",}]+)")


# Cheap tests that must hold wherever the patterns above match: every log line goes through
# redact_line (16,000 a second under a flood), and _ASSIGN is slow on lines full of words (its [A-Z0-9_]*
# retries at every word boundary: ~90 us on ATOM's engine-status line, which holds "=" and "tokens", so a
# "[=:]" test let nearly every line through). _ASSIGN needs a credential word right before its = or :;
# _TOKEN_SHAPES needs one of these prefixes.
_CRED_WORDS = ("token", "secret", "passwd", "password", "_key")  # the ends of _ASSIGN's names, lower case
_SHAPE_PREFIXES = ("hf_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "sk-", "xox", "AKIA")


def _may_assign(line: str) -> bool:
    if "=" not in line and ":" not in line:
        return False
    if not line.isascii():  # case folding beyond ASCII (the Kelvin sign, the long s): _ASSIGN decides
        return True
    low = line.lower()
    return any(rx.search(low) for rx in _CRED_NEXT)


# a credential word followed by what _ASSIGN's separator can start with (a quote, a space, = or :): one
# regex a word, each with a literal prefix the regex engine looks for fast. A word looked for at each of its
# places in Python (ATOM's engine-status line says "tokens" twice) cost ~2.5 us a flood line.
_CRED_NEXT = tuple(re.compile(re.escape(w) + r"['\"\s=:]") for w in _CRED_WORDS)
_UNDERSCORED = tuple(p for p in _SHAPE_PREFIXES if "_" in p)
_OTHERS = tuple(p for p in _SHAPE_PREFIXES if "_" not in p)


def _may_be_shaped(line: str) -> bool:
    # six of the prefixes hold "_": one look for it first (ATOM's status line has none, and it says
    # "throughput", so a look for "gh" let every flood line through to five more)
    if "_" in line and any(p in line for p in _UNDERSCORED):
        return True
    return any(p in line for p in _OTHERS)


def nothing_to_mask(text: str, known: dict[str, str]) -> bool:
    """True only if redact_line(line, known) changes none of the lines joined in `text`: no known secret
    value in it (redact_text replaces only those), and neither cheap test holds (they hold wherever a
    line's NAME=value or credential shape could be masked; a test on `text` is a test on each line). One
    look at a batch of log lines instead of one per line (a flood's lines have nothing to mask)."""
    if any(v in text for v in known.values() if v):
        return False
    return not _may_assign(text) and not _may_be_shaped(text)


def redact_line(line: str, known: dict[str, str] | None = None) -> str:
    """A log line safe to show: known secret values, NAME=value for secret-looking names, and
    credential-shaped tokens masked."""
    if known:
        line = redact_text(line, known)
    if _may_assign(line):
        line = _ASSIGN.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{MASK}", line)
    if _may_be_shaped(line):
        line = _TOKEN_SHAPES.sub(MASK, line)
    return line
