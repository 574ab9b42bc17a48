"""The watcher's stream to the console is shorter since issue 19 and folds into the same state: a pair's
progress is held briefly and only its newest event sent, a metrics event carries the values appended to
its history instead of the 40-value series, and the events go as objects, not JSON strings inside JSON.
The real Reporter (core/cli/watcher.py) writes, the console's real client (tui/watch_client.py) reads,
core's real fold (RunState.apply) is compared with folding every event as emitted."""

from __future__ import annotations

import io
import json
import random

from atomdeck.core.cli.watcher import Reporter
from atomdeck.core.run.events import Event, RunState, new_state
from atomdeck.core.run.watchers.metrics import MetricsWatcher
from atomdeck.tui.watch_client import WatchProcess

PAIRS = [(f"prefill-{p}", f"decode-{d}") for p in range(8) for d in range(8)]


class _Dir:
    def event_lines(self) -> list[str]:
        return []


class ConsoleRun:
    """What WatchProcess reads and writes of the console's Run."""

    def __init__(self, state: RunState) -> None:
        self.state = state
        self.rd = _Dir()
        self.listeners: list = []
        self.line_listeners: list = []


def fresh() -> RunState:
    procs = [(n, n.split("-")[0], "here") for n in {x for pr in PAIRS for x in pr}]
    return new_state("r", procs, [], PAIRS)


def replay(out: io.BytesIO, console: WatchProcess) -> list[dict]:
    msgs = [json.loads(line) for line in out.getvalue().splitlines()]
    for m in msgs:
        console.handle(m)
    return msgs


def test_pair_progress_is_coalesced_and_folds_into_the_same_pairs():
    direct, rep, out = fresh(), None, io.BytesIO()
    rep = Reporter(out)
    console = WatchProcess(ConsoleRun(fresh()))  # type: ignore[arg-type]
    seen: list[Event] = []
    console.run.listeners.append(seen.append)
    t, emitted = 1000.0, 0
    for stage in ("both_registered", "ports_reachable", "transferred"):
        for p, d in PAIRS:
            t += 0.001
            e = Event("pair", f"{p}>{d}", stage, f"{p} -> {d} {stage}", t=t)
            if direct.apply(e):  # as Run.emit: only changes reach the listeners
                rep.on_event(e)
                emitted += 1
        rep.flush()  # within PAIRS_S: progress is held
    assert b'"pair"' not in out.getvalue()
    rep.flush(quiet=True)
    msgs = replay(out, console)
    sent = sum(1 for m in msgs for e in m["e"] if e["kind"] == "pair")
    assert emitted == 3 * len(PAIRS) and sent == len(PAIRS)  # one per pair: its newest
    assert all(isinstance(e, dict) for m in msgs for e in m["e"])  # objects, not strings
    assert all("detail" not in e for m in msgs for e in m["e"])  # progress goes without its words
    for key, pr in direct.pairs.items():
        got = console.run.state.pairs[key]
        assert (got.stage, got.since, got.failed) == (pr.stage, pr.since, pr.failed)
    assert len(seen) == len(PAIRS)  # the console's listeners (LiveRun counts pair changes) heard each pair


def test_a_failed_pair_goes_at_once_with_what_was_held():
    rep, out = Reporter(io.BytesIO()), None
    out = rep.out
    rep.on_event(Event("pair", "prefill-0>decode-0", "both_registered", "both", t=1.0))
    rep.on_event(Event("pair", "prefill-1>decode-0", "failed", "decode-0 cannot reach prefill-1", t=2.0))
    rep.on_event(Event("run", value="degraded", detail="KV transfer prefill-1 -> decode-0 failed", t=2.0))
    rep.flush()
    (msg,) = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["kind"], e["name"]) for e in msg["e"]] == [("pair", "prefill-0>decode-0"),
                                                          ("pair", "prefill-1>decode-0"), ("run", "")]
    assert msg["e"][1]["detail"] == "decode-0 cannot reach prefill-1"  # a failure goes whole: the console shows it


def test_metrics_history_goes_as_what_was_appended_and_is_made_whole_again():
    rng = random.Random(7)
    names = ["prefill-0", "decode-0", "router"]

    class Host:
        state = fresh()

    mw = MetricsWatcher(Host(), None)  # type: ignore[arg-type]  # derive() keeps the rates and histories
    direct, out = fresh(), io.BytesIO()
    rep = Reporter(out)
    console = WatchProcess(ConsoleRun(fresh()))  # type: ignore[arg-type]
    full = 0
    totals = {n: 0.0 for n in names}
    for i in range(60):  # past HISTORY (40): the series are full and shift
        if i == 40:
            rep.flush(quiet=True)
            mark, full_mark = len(out.getvalue()), full
        now = 1000.0 + 2 * i
        for n in names:
            totals[n] += rng.choice([0, 0, 3, 17.5])
            vals = {"generation_tokens": totals[n], "requests_finished": totals[n] // 7, "prompt_tokens": 2 * i,
                    "requests_running": rng.choice([0, 1])}
            e = Event("metrics", n, "atom", data={**mw.derive(n, vals, now), "t": now, "source": "atom"}, t=now)
            full += len(e.to_json()) + 1
            direct.apply(e)
            rep.on_event(e)
        if i % 3 == 0:
            rep.flush()
    rep.flush(quiet=True)
    msgs = replay(out, console)
    assert any("history+" in e["data"] for m in msgs for e in m["e"])
    for n in names:
        assert console.run.state.metrics[n] == direct.metrics[n]
        assert len(direct.metrics[n]["history"]["gen_tok_s"]) == 40
    # once the series are full (a run watched for more than 80 s), they were most of the bytes
    sent, whole = len(out.getvalue()) - mark, full - full_mark
    assert sent < whole / 2, (sent, whole)  # (~40 %: the values, names and times are left)


def test_a_watcher_that_sends_event_strings_is_still_read():
    """The stream's earlier form (each event a JSON string), as a watcher of an older checkout writes it."""
    console = WatchProcess(ConsoleRun(fresh()))  # type: ignore[arg-type]
    e = Event("pair", "prefill-0>decode-0", "both_registered", "both", t=5.0)
    console.handle({"e": [e.to_json()], "l": [], "t": 5.0})
    assert console.run.state.pairs["prefill-0>decode-0"].stage == "both_registered"


async def test_a_big_report_is_folded_in_slices_with_the_loop_free_between(monkeypatch):
    """A report of many events (the pairs of a 64P64D run move 4,096 at a time) is folded a slice at a time, and
    other tasks (a key press) run between slices; the state at the end is the one `handle` makes, and the
    report's flags come after its last event."""
    import asyncio

    from atomdeck.tui import watch_client

    monkeypatch.setattr(watch_client, "FOLD_SLICE", 16)
    events = [json.loads(Event("pair", f"{p}>{d}", stage, "", t=5.0 + i * 0.001).to_json())
              for i, (stage, (p, d)) in enumerate((s, pr) for s in ("both_registered", "ports_reachable")
                                                  for pr in PAIRS)]
    msg = {"e": events, "l": [], "t": 6.0, "stopping": True}
    whole = WatchProcess(ConsoleRun(fresh()))  # type: ignore[arg-type]
    whole.handle(msg)
    sliced = WatchProcess(ConsoleRun(fresh()))  # type: ignore[arg-type]
    seen: list[Event] = []
    sliced.run.listeners.append(seen.append)
    between: list[tuple[int, bool]] = []  # (events folded, stopping told) each time the other task ran
    done = False

    async def other() -> None:
        while not done:
            between.append((len(seen), sliced.stopping.is_set()))
            await asyncio.sleep(0)

    task = asyncio.create_task(other())
    await asyncio.sleep(0)
    await sliced.handle_sliced(msg)
    done = True
    await task
    assert len(seen) == len(events) == 128
    partial = [b for b in between if 0 < b[0] < len(events)]
    assert len(partial) >= 7 and sliced.slices == 7  # 128 events in slices of 16: the loop let go 7 times
    assert not any(told for _, told in partial)  # "stopping" after the last event, as handle tells it
    assert sliced.stopping.is_set()
    for key, pr in whole.run.state.pairs.items():
        assert sliced.run.state.pairs[key].stage == pr.stage == "ports_reachable"
