"""The validity gate's verdict (core/measure/validity.py), the goodput SLO spellings and the per-GPU definitions,
from hand-made records and evidence: every reason a step can be invalid, named."""

from __future__ import annotations

import pytest
from atomdeck.core.measure import compare
from atomdeck.core.measure.stats import Gpus, RequestRecord, parse_slo, summarize
from atomdeck.core.measure.validity import HealthNote, KvEvidence, judge


def rec(i: int, out: int = 8, asked: int = 8, ok: bool = True, error: str = "") -> RequestRecord:
    return RequestRecord(i, 0.0, success=ok, error=error, output_tokens=out, max_tokens=asked, ttft=0.1, e2el=0.8,
                         chunks=out)


def test_a_clean_step_is_valid_and_says_what_was_not_checked():
    v = judge([rec(i) for i in range(4)])
    assert v.valid and v.reasons == []
    assert v.checks["health"]["ok"] is None and v.checks["kv"]["ok"] is None


def test_each_check_names_what_went_wrong():
    records = [rec(0), rec(1, out=3), rec(2, ok=False, error="HTTP 500: boom")]
    kv = KvEvidence(write_done={"decode-0": 1}, queued={"decode-0": 1},
                    failed={"prefill-0": ["[PRODUCER] block transfer failed for req 7"]},
                    failed_requests={"prefill-0": 1})
    notes = [HealthNote("prefill-0", "unresponsive", "state T", 105.0)]
    routing = {"prefill": {"prefill-0": 3, "prefill-1": 0}}
    v = judge(records, notes=notes, start=100.0, kv=kv, pd=True, routing=routing)
    assert not v.valid
    by = {r.split(":")[0]: r for r in v.reasons}
    assert list(by) == ["health", "kv", "lengths", "failures"]  # causes first; routing not judged (3 < 16)
    assert by["health"] == "health: prefill-0 unresponsive at +5.0s (state T)"
    assert "transfers failed on prefill-0 (for 1 requests" in by["kv"]
    assert "only 1 of 2 completed requests had their KV transferred" in by["kv"]
    assert "decode computed the prefill again for 1 of 2 requests" in by["kv"]
    assert by["lengths"] == "lengths: 1 short output(s) (#1 3/8)"
    assert by["failures"] == "failures: 1 of 3 request(s) failed (1x HTTP 500: boom)"


def test_a_worker_left_out_is_named_once_enough_requests_were_sent():
    records = [rec(i) for i in range(16)]
    v = judge(records, routing={"prefill": {"prefill-0": 16, "prefill-1": 0}, "decode": {"decode-0": 16}})
    assert v.reasons == ["routing: the router sent no request to prefill-1 (prefill-0 16, prefill-1 0, decode-0 16)"]


@pytest.mark.parametrize("text", ["ttft_ms:500,tpot_ms:20", "ttft:500 tpot:20",
                                  "time_to_first_token:500 inter_token_latency:20"])
def test_goodput_slo_is_read_as_vllm_and_aiperf_spell_it(text):
    assert parse_slo(text) == {"ttft": 500.0, "tpot": 20.0}


@pytest.mark.parametrize("text, words", [("ttft_ms=500", "not KEY:MILLISECONDS"), ("ttft_ms:-1", "positive"),
                                         ("", "at least one")])
def test_bad_slo_is_named(text, words):
    with pytest.raises(ValueError, match=words):
        parse_slo(text)


def test_goodput_and_both_per_gpu_definitions():
    records = [rec(i) for i in range(4)] + [RequestRecord(9, 0.0, success=True, output_tokens=8, max_tokens=8,
                                                          ttft=0.9, e2el=1.5, chunks=8)]
    s = summarize(4, records, 2.0, Gpus(24, 16, 8), slo={"ttft": 500.0})
    assert s["good_requests"] == 4 and s["request_goodput"] == pytest.approx(2.0)
    assert s["output_throughput_per_gpu"] == pytest.approx(40 / 2 / 24)  # srt-slurm: output / all GPUs
    assert s["output_throughput_per_decode_gpu"] == pytest.approx(40 / 2 / 8)  # InferenceX: output / decode GPUs
    assert s["p90_interactivity"] == pytest.approx(1000 / s["p90_tpot_ms"])


def test_invalid_steps_stay_off_the_front_unless_asked():
    good = {"max_concurrency": 1, "interactivity": 50.0, "output_throughput_per_gpu": 10.0, "valid": True}
    bad = {"max_concurrency": 2, "interactivity": 90.0, "output_throughput_per_gpu": 90.0, "valid": False,
           "invalid_reasons": ["lengths: 8 short output(s)"]}
    reps = [{"run": "r", "layout": "1P1D", "workload_key": "w", "gpus": {"total_gpus": 16}, "results": [good, bad]}]
    rows = compare.rows(reps)
    assert [r["pareto"] for r in rows] == [True, False]
    assert [r["pareto"] for r in compare.rows(reps, include_invalid=True)] == [False, True]
    assert "lengths: 8 short output(s)" in compare.to_csv(rows)
