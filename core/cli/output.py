"""What every verb prints when it answers in JSON, and how an error is reported (JSON or text)."""

from __future__ import annotations

import json
import sys
from typing import Any


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def error_json(kind: str, message: str, findings: list | None = None) -> dict:
    """The one shape of an error under --json."""
    return {"error": {"kind": kind, "message": message, "findings": findings or []}}


def fail(as_json: bool, code: int, kind: str, message: str, findings: list | None = None,
         text: list[str] | None = None) -> int:
    """Report an error: JSON on stdout under --json, else text on stderr. Returns the exit code."""
    if as_json:
        print_json(error_json(kind, message, findings))
    else:
        for line in text or [f"atomdeck: error: {message}"]:
            print(line, file=sys.stderr)
    return code
