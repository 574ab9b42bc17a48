"""Statistics of a step against values computed by hand."""

from __future__ import annotations

import math

import pytest
from atomdeck.core.measure.compare import pareto_front, rows, to_csv
from atomdeck.core.measure.stats import Gpus, RequestRecord, percentile, summarize


def rec(i, ttft, e2el, out, itl=(), prompt=100, ok=True, max_tokens=10, error=""):
    return RequestRecord(index=i, start=0.0, success=ok, error=error, prompt_tokens=prompt if ok else 0,
                         output_tokens=out if ok else 0, max_tokens=max_tokens, ttft=ttft, e2el=e2el, itl=list(itl))


def test_percentile_interpolates_linearly_like_numpy():
    xs = [100.0, 300.0, 200.0]
    assert percentile(xs, 50) == 200.0
    assert percentile(xs, 90) == pytest.approx(280.0)  # position 1.8: 200 + 0.8 x 100
    assert percentile(xs, 99) == pytest.approx(298.0)
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) == 0.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


def test_step_summary_has_the_fields_keys_and_hand_computed_values():
    records = [
        rec(0, 0.1, 1.0, 10, itl=[0.1] * 9, prompt=100),
        rec(1, 0.3, 2.1, 10, itl=[0.2] * 9, prompt=120),
        rec(2, 0.2, 0.2, 1, itl=[], prompt=80),           # one token: no TPOT, no ITL; short (asked 10)
        rec(3, 0.0, 0.5, 0, ok=False, error="HTTP 500: boom"),
    ]
    s = summarize(4, records, 4.0, Gpus(16, 8, 8))
    assert s["max_concurrency"] == 4
    assert (s["completed"], s["failed"], s["short"]) == (3, 1, 1)
    assert s["errors"] == {"HTTP 500: boom": 1}
    assert s["total_input_tokens"] == 300 and s["total_output_tokens"] == 21
    assert s["duration"] == 4.0
    assert s["request_throughput"] == pytest.approx(0.75)
    assert s["output_throughput"] == pytest.approx(21 / 4)
    assert s["total_token_throughput"] == pytest.approx(321 / 4)
    # TTFT over completed requests: 100, 300, 200 ms
    assert s["mean_ttft_ms"] == pytest.approx(200.0)
    assert s["median_ttft_ms"] == pytest.approx(200.0)
    assert s["p90_ttft_ms"] == pytest.approx(280.0)
    assert s["p99_ttft_ms"] == pytest.approx(298.0)
    assert s["std_ttft_ms"] == pytest.approx(math.sqrt(20000 / 3))
    # TPOT = (e2e - ttft) / (out - 1): 0.9/9 = 100 ms and 1.8/9 = 200 ms; the 1-token request has none
    assert s["median_tpot_ms"] == pytest.approx(150.0)
    assert s["mean_tpot_ms"] == pytest.approx(150.0)
    assert s["p90_tpot_ms"] == pytest.approx(190.0)
    assert s["p99_tpot_ms"] == pytest.approx(199.0)
    # ITL: every gap of every request: nine of 100 ms and nine of 200 ms
    assert s["mean_itl_ms"] == pytest.approx(150.0)
    assert s["median_itl_ms"] == pytest.approx(150.0)
    assert s["p99_itl_ms"] == pytest.approx(200.0)
    # E2E: 1000, 2100, 200 ms
    assert s["median_e2el_ms"] == pytest.approx(1000.0)
    assert s["mean_e2el_ms"] == pytest.approx(1100.0)
    # per GPU and per user
    assert (s["total_gpus"], s["prefill_gpus"], s["decode_gpus"]) == (16, 8, 8)
    assert s["output_throughput_per_gpu"] == pytest.approx(21 / 4 / 16)
    assert s["total_token_throughput_per_gpu"] == pytest.approx(321 / 4 / 16)
    assert s["interactivity"] == pytest.approx(1000 / 150)
    for key in ("max_concurrency", "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
                "request_throughput", "output_throughput", "total_token_throughput"):
        assert key in s
    for m in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "p90", "p99"):
            assert f"{stat}_{m}_ms" in s


def test_a_step_where_everything_failed_reports_zeros_not_a_crash():
    s = summarize(2, [rec(0, 0, 0.1, 0, ok=False, error="x"), rec(1, 0, 0.1, 0, ok=False, error="x")], 0.2,
                  Gpus(8))
    assert (s["completed"], s["failed"]) == (0, 2) and s["errors"] == {"x": 2}
    assert s["output_throughput"] == 0 and s["median_ttft_ms"] == 0 and s["interactivity"] == 0


def test_record_round_trips_through_json():
    r = rec(3, 0.1, 1.0, 10, itl=[0.1] * 9)
    back = RequestRecord.from_json(r.to_json())
    assert back == r and r.to_json()["tpot"] == pytest.approx(0.1) and r.to_json()["short"] is False


def test_pareto_front_marks_points_nothing_beats_on_both_axes():
    pts = [(10, 100), (20, 80), (15, 70), (30, 40), (5, 100), (30, 30)]
    # (15,70) loses to (20,80); (5,100) to (10,100); (30,30) to (30,40)
    assert pareto_front(pts) == {0, 1, 3}
    assert pareto_front([]) == set()
    assert pareto_front([(1, 1), (1, 1)]) == {0, 1}  # equal points do not dominate each other


def test_comparison_rows_mark_the_front_per_workload_and_export_csv():
    def report(run, layout, steps, key="ISL 1024 OSL 128"):
        return {"run": run, "layout": layout, "workload_key": key,
                "gpus": {"total_gpus": 16, "prefill_gpus": 8, "decode_gpus": 8},
                "results": [{"max_concurrency": c, "completed": 4, "failed": 0, "short": 0, "duration": 1.0,
                             "output_throughput": y * 16, "output_throughput_per_gpu": y, "interactivity": x,
                             "median_ttft_ms": 1.0, "median_tpot_ms": 1000 / x} for c, x, y in steps]}
    table = rows([report("a", "1P1D TP8", [(1, 100, 5), (4, 80, 20)]),
                  report("b", "2P1D TP8", [(1, 90, 4), (4, 70, 30)]),
                  report("c", "1P1D TP8", [(1, 1, 1)], key="ISL 8000 OSL 128")])
    assert [(r["run"], r["max_concurrency"], r["pareto"]) for r in table] == [
        ("a", 1, True), ("a", 4, True), ("b", 1, False), ("b", 4, True), ("c", 1, True)]
    text = to_csv(table)
    assert text.splitlines()[0].startswith("run,layout,total_gpus,prefill_gpus,decode_gpus,workload,max_concurrency")
    assert text.splitlines()[1].startswith("a,1P1D TP8,16,8,8,ISL 1024 OSL 128,1,4,0,0,1.0000")
