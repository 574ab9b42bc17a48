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


def test_a_128_node_come_up_names_the_first_owners_and_folds_the_rest():
    """129 processes whose ports are not open yet: the diagnosis describes the first LISTED one by one
    (each line changes every second: "loading for 12s") and names the others in one line, in ranges."""
    from atomdeck.core.run.diagnose import LISTED, name_ranges

    procs = [(f"prefill-{i}", "prefill", f"s{i:03d}") for i in range(64)]
    procs += [(f"decode-{i}", "decode", f"s{64 + i:03d}") for i in range(64)]
    cells = [{"node": node, "host": f"127.0.1.{i}", "port": 8010, "role": role, "kind": "http", "owner": name}
             for i, (name, role, node) in enumerate(procs)]
    state = new_state("r1", procs, cells, [])
    # core's launch has not started them yet: the headline says so, the details have the shape they keep once
    # the barrier's wait begins
    launching = diagnose(state, 100.0)
    assert launching.headline == "launching: starting 128 processes" and len(launching.blocking) == 128
    assert len(launching.details) == LISTED + 1
    assert launching.details[0] == "s000 :8010 not open — prefill-0 on s000 not started yet"
    state.status = "starting"  # started, loading
    for p in state.procs.values():
        p.advance("launching", 50.0)
    d = diagnose(state, 100.0)
    assert len(d.blocking) == 128
    assert len(d.details) == LISTED + 1
    assert d.details[0].startswith("s000 :8010 not open — prefill-0 on s000 alive")
    assert d.details[-1] == (f"… and {128 - LISTED} more with ports not open: prefill-{LISTED}–63, decode-0–63")
    assert name_ranges(["decode-3", "decode-1", "decode-2", "router", "s005", "s009", "s006"]) == \
        "decode-1–3, router, s005–006, s009"
    few = new_state("r2", procs[:3], cells[:3], [])
    few.status = "starting"
    assert len(diagnose(few, 100.0).details) == 3  # a handful are each described, none folded
