"""The watcher handles the lines one read of a log hands over together (issue 19: redacting and
classifying each of 16,000 lines a second was most of the watcher's CPU under bench/console.py's flood):
one look for anything to mask or classify in the whole batch, each line handled in order with its offset
stored first. These tests hold the batch path to the per-line answers, over the documented log lines and
the hand-made tricky ones of test_line_filters, and follow a real log file (the local launcher's tail)
through a cancel without losing or repeating a line."""

from __future__ import annotations

import asyncio
import random

from atomdeck.core.config.secrets import nothing_to_mask
from atomdeck.core.launch.local import LocalLauncher
from atomdeck.core.run.classify import classify

from tests.tui.fakerun import fake_run

from .test_line_filters import corpus

FLOOD = ("[atom 12:00:01] Engine Core: running=0 reqs, waiting=0 reqs, KV cache usage=0.0%, prefix cache hit "
         "rate=0.0%, prompt throughput=0.0 tokens/s, generation throughput=0.0 tokens/s (status #{})")


def batches(lines: list[str], seed: int = 7) -> list[list[str]]:
    """The corpus cut into batches of 1-40 lines, each between runs of flood lines (the common case)."""
    rnd = random.Random(seed)
    out, i = [], 0
    while i < len(lines):
        n = rnd.randint(1, 40)
        out.append([FLOOD.format(k) for k in range(rnd.randint(0, 30))] + lines[i:i + n])
        out.append([FLOOD.format(k) for k in range(rnd.randint(1, 60))])
        i += n
    return out


def test_a_batch_said_to_have_nothing_to_mask_or_classify_has_none_in_any_line():
    run = fake_run("serving")
    run._secrets = {"HF_TOKEN": "hf-known-value-1234", "DB_PASSWORD": "swordfish"}
    lines = corpus() + ["a line with hf-known-value-1234 in it", "swordfish", "no secret here: swordfis h"]
    from atomdeck.core.run.classify import _ROUTER_NEEDLES, _WORKER_NEEDLES, _says_nothing

    plain_batches = quiet_batches = 0
    for batch in batches(lines):
        text = "\n".join(batch)
        if nothing_to_mask(text, run._secrets):
            plain_batches += 1
            assert all(run.redact(x) == x for x in batch)
        for role, needles in (("decode", _WORKER_NEEDLES), ("router", _ROUTER_NEEDLES)):
            if _says_nothing(text, needles):
                quiet_batches += 1
                assert all(classify(x, role) is None for x in batch)
    assert plain_batches and quiet_batches  # (the flood-only batches at least)
    assert not nothing_to_mask("x\nexport HF_TOKEN=abc\ny", run._secrets)
    assert not nothing_to_mask("x\nhf-known-value-1234\ny", run._secrets)


def test_on_lines_does_what_on_line_does_for_each_line():
    """Same lines kept, same lines sent to listeners (masked), same events, the offset of each line stored
    before its listeners see it."""
    seq = batches(corpus() + ["HF_TOKEN known: hf-known-value-1234"], seed=3)
    seen = {}
    for how in ("each", "batched"):
        run = fake_run("serving", run_id=f"20250101-115845-demo-1p1d-{how}")
        run._secrets = {"HF_TOKEN": "hf-known-value-1234"}
        name = "decode-0"
        got: list[tuple[str, str, int]] = []
        run.line_listeners.append(lambda n, x, got=got, run=run: got.append((n, x, run.offsets.get(n, -1))))
        events = []
        run.listeners.append(events.append)
        logs = run.watchers.logs
        run.state.procs[name].last_lines.clear()
        k = 0
        for batch in seq:
            if how == "each":
                for x in batch:
                    k += 1
                    run.offsets[name] = k
                    logs.on_line(name, x)
            else:
                logs.on_lines(name, [(k + i, x) for i, x in enumerate(batch, 1)])
                k += len(batch)
        seen[how] = (got, [(e.kind, e.name, e.value, e.detail) for e in events],
                     list(run.state.procs[name].last_lines), run.offsets[name])
    each, batched = seen["each"], seen["batched"]
    assert batched[0] == each[0] and len(each[0]) == sum(map(len, seq))
    assert any("***" in x for _, x, _ in each[0])  # something was masked
    assert batched[1] == each[1] and any(e[0] == "proc.error" for e in each[1])  # something was classified
    assert batched[2] == each[2] and batched[3] == each[3] == k


async def test_tail_handles_a_read_together_and_a_cancel_loses_no_line(tmp_path):
    """A real log file followed by the local launcher's tail: every line reaches the listeners once and
    in order, in fewer turns than lines (one look per read), the stored offset is the end of what was
    handled; lines written after a cancel are read from that offset, none twice."""
    run = fake_run("serving")
    name = "decode-0"
    h = run.handles[name]
    path = tmp_path / "decode-0.log"
    h.log_path = str(path)
    path.write_bytes(b"")
    run.offsets[name] = 0
    run.launcher = LocalLauncher(run.id, str(run.rd.path))
    got: list[str] = []
    run.line_listeners.append(lambda n, x: got.append(x))
    calls = []
    logs = run.watchers.logs
    original = logs.on_lines

    def counted(n, batch):
        calls.append(len(batch))
        return original(n, batch)

    logs.on_lines = counted
    task = asyncio.create_task(logs.tail(name, h))
    with path.open("ab") as f:
        for k in range(5):
            f.write("".join(FLOOD.format(k * 1000 + i) + "\n" for i in range(1000)).encode())
            f.flush()
            await asyncio.sleep(0.02)
    for _ in range(500):
        if len(got) == 5000:
            break
        await asyncio.sleep(0.01)
    assert [int(x.rsplit("#", 1)[1][:-1]) for x in got] == list(range(5000))
    assert len(calls) < 5000 / 10  # batches, not lines one by one
    assert run.offsets[name] == path.stat().st_size
    # a burst, then cancel while lines may be waiting for the end of the loop's turn
    with path.open("ab") as f:
        f.write("".join(FLOOD.format(5000 + i) + "\n" for i in range(3000)).encode())
    await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    handled = len(got)
    assert run.offsets[name] == sum(len(FLOOD.format(i)) + 1 for i in range(handled))
    # resume from the stored offset, as keep_going and drain do
    async for _off, line in run.launcher.read_log(h, run.offsets[name]):
        logs.on_line(name, line)
    assert [int(x.rsplit("#", 1)[1][:-1]) for x in got] == list(range(8000))


def test_plain_lines_split_in_one_go_as_line_by_line():
    """LineSplitter takes a read's plain ASCII lines in one decode and split: the same (offset, line) pairs
    as its line-by-line loop, however the bytes are cut, with escapes, CRs, UTF-8 and over-long lines
    mixed in (those reads take the loop)."""
    from atomdeck.core.remote.loglines import LineSplitter

    pieces = [FLOOD.format(i).encode() + b"\n" for i in range(300)]
    pieces += [b"\x1b[31mred\x1b[0m\n", b"dos line\r\n", "caf\u00e9 \u2713\n".encode(), b"x" * 70 + b"\n",
               b"y" * 33, b"\n", b"\n", b"partial"]
    for seed in range(20):
        rnd = random.Random(seed)
        data = b"".join(rnd.sample(pieces, len(pieces)))
        cuts = sorted(rnd.sample(range(1, len(data)), 40))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        for max_line in (16, 64, 4096):
            fast, slow = LineSplitter(5, max_line=max_line), LineSplitter(5, max_line=max_line)
            slow._plain_lines = lambda: []  # the loop alone
            got = [x for c in chunks for x in fast.feed(c)] + fast.flush()
            want = [x for c in chunks for x in slow.feed(c)] + slow.flush()
            assert got == want and fast.offset == slow.offset == 5 + len(data)
    plain = LineSplitter(0)
    assert plain.feed(b"a\nbc\n") == [(2, "a"), (5, "bc")] and plain._plain_lines() == []
