"""`atomdeck bench` against requests that hang (issue 44: it printed its header, then nothing for 60 s): with the
decode stalled (HTTP answers, no token comes), the bench says where it is while nothing finishes, prints each
failed request with its reason as it ends, and ends its step with the failures counted."""

from __future__ import annotations

import json
import re
import time

import pytest

from .test_bench_local import _sim_speed, cli, runs, up  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def test_a_bench_of_hanging_requests_is_never_silent_and_ends_its_step(runs):  # noqa: F811
    run = up(runs, decode__env={"ATOMSIM_STALL_AFTER": "2"})
    time.sleep(3)  # the decode stalls: every request through the router now waits for tokens that never come
    p = cli("bench", run.id, "--concurrency", "2", "--num-prompts", "3", "--isl", "32", "--osl", "4", "--warmup", "0",
            "--request-timeout", "12", "--keep-going")  # every request to its timeout (by default the stall found
    # by the bench's own metrics scrapes would stop the step: test_stalled_decode_is_named_and_stops_the_step)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 1, p.stderr
    lines = p.stderr.splitlines()
    # where it is, said while nothing finished: the heartbeat after 10 s of silence, or the stall the bench's own
    # scrapes found at 8 s (which breaks the silence; the heartbeat comes 10 s later)
    beat = [i for i, x in enumerate(lines) if re.search(r"step 1/1 concurrency 2: 0/3 ok, 0 failed, 2 in flight, the "
                                                        r"oldest for 1\ds; nothing finished for 1\ds", x)
            or re.search(r"step 1/1 concurrency 2: decode-0 stalled \(requests in flight, no output", x)]
    failed = [i for i, x in enumerate(lines) if re.search(r"step 1/1 concurrency 2: request \d FAILED after 1\d\.\ds: "
                                                          r"timed out with no token", x)]
    assert beat and len(failed) == 3, p.stderr
    assert beat[0] < failed[0]  # said while nothing finished, before the first request gave up
    assert "step 1/1 concurrency    2: 0/3 ok, 3 FAILED" in lines[-1] or any(
        "step 1/1 concurrency    2: 0/3 ok, 3 FAILED" in x for x in lines), p.stderr
    assert "NOT complete: concurrency 2 INVALID: " in p.stderr
    assert "failures: 3 of 3 request(s) failed (3x timed out with no token)" in p.stderr


def test_stalled_decode_is_named_and_stops_the_step(runs):  # noqa: F811
    """The decode stalls (HTTP answers, /health 200, no token): the bench's own metrics scrapes find it (no output
    for 8 s while requests run), the step stops at once, INVALID, naming decode-0 stalled; it does not wait out the
    requests' timeout."""
    run = up(runs, decode__env={"ATOMSIM_STALL_AFTER": "2"})
    time.sleep(3)
    p = cli("bench", run.id, "--concurrency", "2", "--num-prompts", "3", "--isl", "32", "--osl", "4", "--warmup", "0",
            "--request-timeout", "110", "--json")
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == 1, p.stderr
    (step,) = json.loads(p.stdout)["results"]
    assert step["valid"] is False and step["checks"]["health"]["processes"] == ["decode-0"], step["checks"]["health"]
    assert step["invalid_reasons"][0].startswith("health: decode-0 stalled at +"), step["invalid_reasons"]
    assert "decode-0 stalled (requests in flight, no output" in p.stderr and "this step is INVALID" in p.stderr
    assert step["halted"].startswith("stopped after 2 of 3 requests: decode-0 stalled")  # not by the timeout
    assert "2x stopped: decode-0 stalled during the step" in step["invalid_reasons"][1]
