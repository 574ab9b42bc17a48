"""The load generator against a real HTTP server on loopback: what it sends, what it records, and that
nothing is dropped (HTTP errors, error events, cut streams and short outputs are all counted)."""

from __future__ import annotations

import json
import random

import aiohttp
import pytest
from atomdeck.core.measure.client import stream_request
from atomdeck.core.measure.errors import MeasureInputError
from atomdeck.core.measure.sweep import sweep
from atomdeck.core.measure.workload import (
    WORDS,
    Prompt,
    Workload,
    load_dataset,
    parse_concurrencies,
    random_prompts,
    write_dataset,
)


async def one(server, text, endpoint="completions", max_tokens=8):
    async with aiohttp.ClientSession() as s:
        return await stream_request(s, server.url, "m", Prompt(text, len(text.split())), max_tokens, endpoint, 0,
                                    0.0)


async def test_a_good_stream_is_timed_token_by_token_with_the_servers_usage(server):
    server.gap = 0.002
    r = await one(server, "one two three")
    assert r.success and not r.error and not r.short
    assert r.output_tokens == 8 and r.chunks == 8 and r.usage
    assert r.prompt_tokens == 4  # the server's count (it adds one), not the 3 words sent
    assert len(r.itl) == 7 and all(g > 0 for g in r.itl)
    assert 0 < r.ttft < r.e2el
    assert r.tpot == pytest.approx((r.e2el - r.ttft) / 7)
    sent = server.requests[-1]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["max_tokens"] == 8 and sent["ignore_eos"] is True and sent["model"] == "m"


async def test_chat_endpoint_sends_messages_and_skips_the_role_chunk(server):
    r = await one(server, "hello there", endpoint="chat", max_tokens=5)
    assert r.success and r.chunks == 5 and len(r.itl) == 4
    assert server.requests[-1]["messages"] == [{"role": "user", "content": "hello there"}]


@pytest.mark.parametrize("word,error", [("fail500", "HTTP 500: "), ("errevent", "error event: KV transfer failed"),
                                        ("cut", "ClientPayloadError")])
async def test_failures_become_records_with_their_text(server, word, error):
    r = await one(server, f"please {word} now")
    assert not r.success and r.error.startswith(error), r.error
    if word == "fail500":
        assert "the engine fell over" in r.error


async def test_short_output_and_missing_usage_are_visible(server):
    r = await one(server, "short one", max_tokens=10)
    assert r.success and r.short and r.output_tokens == 5
    r = await one(server, "nousage here", max_tokens=6)
    assert r.success and not r.usage and r.output_tokens == 6 and r.prompt_tokens == 2  # the words sent


async def test_sweep_keeps_concurrency_excludes_warmup_and_counts_every_request(server):
    server.gap = 0.001
    w = Workload(isl=20, osl=4, concurrencies=[1, 3], num_prompts=7, warmup=2, seed=5)
    progress = []
    steps = await sweep(server.url, "m", w, on_record=lambda p, r: progress.append((p.concurrency, p.done)))
    assert len(server.requests) == 2 + 7 + 7  # warm-up went out but is not in the figures
    assert [s.summary["completed"] for s in steps] == [7, 7]
    assert [s.summary["max_concurrency"] for s in steps] == [1, 3]
    assert server.max_in_flight <= 3
    assert progress[-1] == (3, 7) and len(progress) == 14
    assert all(s.summary["total_output_tokens"] == 28 for s in steps)
    # seeded: the same workload sends the same prompts again
    first = [r["prompt"] for r in server.requests]
    server.requests.clear()
    await sweep(server.url, "m", w)
    assert [r["prompt"] for r in server.requests] == first


async def test_sweep_counts_failed_and_short_requests_of_a_dataset(server, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": p}) for p in ["fine", "fail500 a", "short b", "fine c"]) + "\n")
    w = Workload(osl=6, concurrencies=[2], num_prompts=4, warmup=0, dataset=str(data))
    (step,) = await sweep(server.url, "m", w)
    s = step.summary
    assert (s["completed"], s["failed"], s["short"]) == (3, 1, 1)
    assert list(s["errors"]) == ['HTTP 500: {"detail": "the engine fell over"}']
    assert len(step.records) == 4


async def test_request_rate_spaces_arrivals(server):
    w = Workload(isl=5, osl=2, concurrencies=[4], num_prompts=6, warmup=0, request_rate=200.0)
    (step,) = await sweep(server.url, "m", w)
    starts = [r.start for r in step.records]
    assert step.summary["completed"] == 6 and starts == sorted(starts) and starts[-1] > starts[0]


async def test_unreachable_server_is_a_failed_record_not_an_exception():
    async with aiohttp.ClientSession() as s:
        r = await stream_request(s, "http://127.0.0.1:9", "m", Prompt("x"), 4, "completions", 0, 0.0)
    assert not r.success and "ClientConnector" in r.error


def test_random_prompts_have_isl_words_within_the_range_ratio():
    ps = random_prompts(200, 100, 0.8, random.Random(1))
    lens = [len(p.text.split()) for p in ps]
    assert all(80 <= n <= 100 for n in lens) and min(lens) < 85 and max(lens) > 95
    assert all(p.words == len(p.text.split()) for p in ps)
    assert set(w for p in ps for w in p.text.split()) <= set(WORDS)
    assert [len(p.text.split()) for p in random_prompts(5, 64, 1.0, random.Random(2))] == [64] * 5
    assert random_prompts(3, 50, 0.5, random.Random(7)) == random_prompts(3, 50, 0.5, random.Random(7))


def test_dataset_round_trips_and_bad_files_are_named(tmp_path):
    p = tmp_path / "d.jsonl"
    write_dataset(p, [Prompt("a b c"), Prompt("d e")], osl=16)
    assert [(x.text, x.max_tokens) for x in load_dataset(str(p))] == [("a b c", 16), ("d e", 16)]
    with pytest.raises(MeasureInputError, match="no such file"):
        load_dataset(str(tmp_path / "missing.jsonl"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\nnot json\n')
    with pytest.raises(MeasureInputError, match="line 2 is not JSON"):
        load_dataset(str(bad))
    bad.write_text('{"nope": 1}\n')
    with pytest.raises(MeasureInputError, match='line 1 has no "prompt"'):
        load_dataset(str(bad))


@pytest.mark.parametrize("text", ["1,0", "a", "1,,4", "-1", "2.5", ""])
def test_concurrency_lists_must_be_positive_integers(text):
    with pytest.raises(MeasureInputError, match="positive integers"):
        parse_concurrencies(text)


def test_concurrency_list_parses():
    assert parse_concurrencies("1, 4,16,64") == [1, 4, 16, 64]
