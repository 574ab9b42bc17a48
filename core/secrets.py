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
