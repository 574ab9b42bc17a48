"""A run watched for a day must not grow: what the run state keeps per process is bounded (issue 19's
soak). The fold is the one the watcher and the console both run."""

from __future__ import annotations

from atomdeck.core.run.diagnose import diagnose
from atomdeck.core.run.events import MAX_ERRORS, Event, new_state


def test_a_process_that_logs_errors_all_day_keeps_only_the_newest():
    state = new_state("r1", [("decode-0", "decode", "n1")], [], [])
    for i in range(20_000):
        state.apply(Event("proc.error", "decode-0", "exception", f"RuntimeError: transfer {i} failed", t=float(i)))
        state.apply(Event("proc.line", "decode-0", detail=f"line {i}", t=float(i)))
    p = state.procs["decode-0"]
    assert len(p.errors) == MAX_ERRORS
    assert p.errors[-1] == "RuntimeError: transfer 19999 failed"
    assert len(p.last_lines) == 20 and len(state.notes) <= 50
    state.apply(Event("proc.exit", "decode-0", "failed", "exited 1", {"code": 1}, t=20_000.0))
    assert "transfer 19999 failed" in " ".join(diagnose(state, 20_001.0).details)
