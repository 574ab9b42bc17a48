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


def storage_notices(run: Any, as_json: bool = False) -> None:
    """Say once, on stderr, that the run directory (or a node's log directory) cannot be written, and when it is
    written again: what the run's state holds now (found when the run was opened), then each change."""
    if as_json:
        return  # --json: stdout holds one object; the state's `storage` says it there
    for words in run.state.storage.values():
        print(f"atomdeck: {words}", file=sys.stderr, flush=True)

    def show(e: Any) -> None:
        if e.kind == "storage":
            print(f"atomdeck: {e.detail}", file=sys.stderr, flush=True)

    run.listeners.append(show)


def unsaved_notice(run: Any, as_json: bool = False) -> None:
    """After `run.close()`: what this session could not write into the run directory, and where it is kept."""
    if run.unsaved_words and not as_json:
        print(f"atomdeck: {run.unsaved_words}", file=sys.stderr, flush=True)
