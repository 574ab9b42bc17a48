"""The console's stream from its watcher process under a log flood (issue 19): the real watcher
(`python -m atomdeck.core.cli.watcher`) on a real run of the simulator logging 500 numbered lines a
second per worker, read by the console's own client (WatchProcess into a LiveRun).

The watcher sends every line only of the processes a view shows; the others reach the console as
counts and their last lines (core's state). Asking for a process's lines starts at an offset the
watcher names: the log file up to it plus the lines sent after it are every line, none twice."""

from __future__ import annotations

import asyncio
import re

import pytest
from atomdeck.core.run.run import Run
from atomdeck.tui.live import LiveRun
from atomdeck.tui.watch_client import WatchProcess

from .conftest import FLOOD, until, workspace

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NUMBER = re.compile(r"status #(\d+)\)")


def numbers(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for m in map(NUMBER.search, lines) if m]


def file_lines_from(live: LiveRun, name: str, offset: int) -> list[str]:
    path = live.log_path(name)
    assert path is not None
    return path.read_bytes()[offset:].decode().split("\n")


def test_the_watcher_sends_every_line_only_of_what_the_console_shows(runs):
    ws = workspace("demo-1p1d", prefill__env=FLOOD, decode__env=FLOOD)

    async def go():
        run = await Run.launch(ws, ws.assess())
        runs.append(run)
        await run.watch(until=lambda s: all(p.stage in ("http_up", "registered", "serving") or p.role == "router"
                                            for p in s.procs.values()), timeout=60)
        mine = Run.open(run.id)  # the console's session on the run, as RunController.attach makes it
        live = LiveRun(mine)
        watcher = WatchProcess(mine)
        seen: list[dict] = []
        handle = watcher.handle

        def record(msg: dict) -> None:
            seen.append(msg)
            handle(msg)

        watcher.handle = record  # type: ignore[method-assign]
        watcher.on_from, watcher.on_count = live._on_from, live._on_count
        live.use_watcher(watcher.want)
        await watcher.start()
        pump = asyncio.create_task(watcher.pump())
        try:
            await until(lambda: watcher.ready, "the watcher's ready")
            live.want_lines("a view", ["decode-0"])
            await until(lambda: live.streams("decode-0") and len(live.buffers["decode-0"]) >= 600, "decode-0's lines")
            first = (live.start_offsets["decode-0"], list(live.buffers["decode-0"]))
            from_decode = len(seen)
            live.want_lines("a view", ["prefill-0"])  # the view moves to another process
            await until(lambda: live.streams("prefill-0") and len(live.buffers["prefill-0"]) >= 600,
                        "prefill-0's lines")
            second = (live.start_offsets["prefill-0"], list(live.buffers["prefill-0"]))
            history = live.history("prefill-0", 50)
            await asyncio.sleep(0.5)  # a few more reports, none of which may carry decode-0's lines
            live.want_lines("a view", [])
            return live, seen, from_decode, first, second, history
        finally:
            await watcher.stop()
            await asyncio.wait_for(pump, 10)

    live, seen, from_decode, first, second, history = asyncio.run(go())

    # the "from" answers: decode-0 first, then prefill-0
    answers = [i for i, m in enumerate(seen) if "from" in m]
    assert [list(seen[i]["from"]) for i in answers[:2]] == [["decode-0"], ["prefill-0"]]
    a, b = answers[0], answers[1]
    sent = [(i, name) for i, m in enumerate(seen) for name, lines in m.get("l", ()) if lines]
    # once decode-0 was asked for, no line of prefill-0 came until prefill-0 was asked for, and after that none
    # of decode-0's
    assert [name for i, name in sent if a < i < b] and {name for i, name in sent if a < i < b} == {"decode-0"}
    assert {name for i, name in sent if i > b} == {"prefill-0"}
    # the processes not shown came as counts and last lines (core's state keeps them live)
    quiet = {name: n for m in seen[a + 1:b] for name, n, _ in m.get("q", ())}
    assert quiet.get("prefill-0", 0) > 0 and "decode-0" not in quiet
    assert list(live.state.procs["decode-0"].last_lines)  # folded in while decode-0 was not shown
    assert from_decode <= b

    # every line from the offset the watcher named, in order, none lost or twice: the file says the same
    for name, (offset, got) in (("decode-0", first), ("prefill-0", second)):
        assert got == file_lines_from(live, name, offset)[:len(got)], name
        nums = numbers(got)
        assert nums == list(range(nums[0], nums[0] + len(nums))), name
    # and the history up to that offset ends right before the first line sent
    nums = numbers(history)
    assert nums and nums[-1] + 1 == numbers(second[1])[0]
