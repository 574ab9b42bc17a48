"""Presentation helpers for what core computed: port ranges, argv laid out one flag per line.

They only lay out text; every token shown is core's, unchanged.
"""

from __future__ import annotations

import json
import shlex

KV_FLAG = "--kv-transfer-config"


def port_ranges(ports: list[int] | tuple[int, ...]) -> str:
    """[8010, 6301, ..., 6308] -> '6301-6308, 8010'."""
    spans: list[list[int]] = []
    for p in sorted(set(ports)):
        if spans and spans[-1][1] == p - 1:
            spans[-1][1] = p
        else:
            spans.append([p, p])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def argv_lines(argv: list[str]) -> list[str]:
    """Shell-quoted tokens grouped for reading: program words, then each flag with its value,
    each `K=V` on its own line. Joined with ' \\\\\\n' the lines are one exact shell command."""
    return [" ".join(group) for group in argv_groups(argv)]


def argv_groups(argv: list[str]) -> list[list[str]]:
    """The shell-quoted tokens of each line argv_lines makes."""
    lines: list[list[str]] = []
    kinds: list[str] = []
    i = 0
    while i < len(argv):
        t = argv[i]
        if t == "-m" and kinds and kinds[-1] == "word" and i + 1 < len(argv):  # python3 -m module
            lines[-1] += argv[i:i + 2]
            i += 2
            continue
        if t.startswith("-") and len(t) > 1 and t != "--":
            takes_value = "=" not in t and i + 1 < len(argv) and not _is_flag(argv[i + 1])
            lines.append(argv[i:i + 2] if takes_value else [t])
            kinds.append("flag")
            i += 2 if takes_value else 1
            continue
        kind = "assign" if "=" in t and not t.startswith("{") else "word"
        if kind == "word" and kinds and kinds[-1] == "word":
            lines[-1].append(t)
        else:
            lines.append([t])
            kinds.append(kind)
        i += 1
    return [[shlex.quote(t) for t in line] for line in lines]


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not token[1:2].isdigit()


def kv_transfer_config(argv: list[str]) -> dict | None:
    """The Mooncake connector config passed as `--kv-transfer-config JSON` (None when absent)."""
    for i, t in enumerate(argv):
        value = None
        if t == KV_FLAG and i + 1 < len(argv):
            value = argv[i + 1]
        elif t.startswith(KV_FLAG + "="):
            value = t.split("=", 1)[1]
        if value is not None:
            try:
                data = json.loads(value)
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None


def ago(seconds: float | None) -> str:
    """12s, 3m04s, 2h05m: how long something has been in its state."""
    if seconds is None:
        return ""
    s = int(max(0.0, seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def words(stage: str) -> str:
    """A stage or state as words: 'kv_registered' -> 'kv registered'."""
    return stage.replace("_", " ")
