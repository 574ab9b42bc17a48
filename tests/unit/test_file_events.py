"""Local log tails wake on file events (inotify), not on a poll: issue 19's ~250 ms tail floor.

Each follower here polls once an hour, so a line that arrives without an event would not be seen
while the test waits; a follower still reads what it is given. No timing is asserted."""

from __future__ import annotations

import asyncio
import os

from atomdeck.core.remote import inotify
from atomdeck.core.remote.filetail import follow

HOUR = 3600.0
WAIT = 60.0  # a condition wait: without events the follower would sleep for HOUR


async def idle() -> None:
    """Let the follower run until it waits: it reads, finds nothing new and sleeps (a few loop turns)."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_follower_wakes_on_a_write_even_with_an_hourly_poll(tmp_path):
    log = tmp_path / "worker-0.log"
    log.write_text("[atom] loading\n")

    async def main():
        lines = follow(str(log), interval=HOUR, max_interval=HOUR)
        assert (await lines.__anext__())[1] == "[atom] loading"
        nxt = asyncio.ensure_future(lines.__anext__())
        await idle()  # the follower is now waiting (on the event, or on its hour)
        with open(log, "a") as f:
            f.write("Starting server on 127.0.0.1:8000 (loop=uvloop)...\n")
        off, line = await asyncio.wait_for(nxt, WAIT)
        await lines.aclose()
        return off, line

    off, line = asyncio.run(main())
    assert line.startswith("Starting server on") and off == log.stat().st_size


def test_a_file_created_later_and_a_replaced_file_are_seen_by_events(tmp_path):
    log = tmp_path / "router.log"

    async def main():
        got: list[str] = []
        lines = follow(str(log), interval=HOUR, max_interval=HOUR)
        first = asyncio.ensure_future(lines.__anext__())
        await idle()
        log.write_text("one\n")  # created after the follower started
        got.append((await asyncio.wait_for(first, WAIT))[1])
        nxt = asyncio.ensure_future(lines.__anext__())
        await idle()
        tmp = tmp_path / "router.log.new"
        tmp.write_text("x\n")  # shorter than what was read: replaced, so read from the start
        os.replace(tmp, log)
        got.append((await asyncio.wait_for(nxt, WAIT))[1])
        await lines.aclose()
        return got

    assert asyncio.run(main()) == ["one", "x"]


def test_every_follower_of_a_directory_shares_one_watch_and_it_goes_with_the_last(tmp_path):
    names = [f"p{i}.log" for i in range(5)]
    for n in names:
        (tmp_path / n).write_text("")
    other = tmp_path / "other"
    other.mkdir()
    (other / "x.log").write_text("")

    async def main():
        subs = [inotify.subscribe(str(tmp_path / n)) for n in names]
        subs.append(inotify.subscribe(str(other / "x.log")))
        assert all(s is not None for s in subs)
        w = inotify._watchers[asyncio.get_running_loop()]
        shared = (len(w.wd_of), len({s.wd for s in subs[:5]}))
        (tmp_path / "p3.log").write_text("hello\n")
        await asyncio.wait_for(subs[3].event.wait(), WAIT)
        woken = [s.event.is_set() for s in subs]
        for s in subs:
            s.close()
        return shared, woken, w.closed, asyncio.get_running_loop() in inotify._watchers

    (dirs, wds), woken, closed, registered = asyncio.run(main())
    assert dirs == 2 and wds == 1  # two directories, two watches; five files of one directory, one watch
    assert woken == [False, False, False, True, False, False]  # only p3's follower
    assert closed and not registered  # the descriptor is closed with the last follower


def test_without_a_directory_the_follower_polls_and_then_watches(tmp_path):
    logs = tmp_path / "logs"
    log = logs / "w.log"

    async def main():
        lines = follow(str(log), interval=0.01, max_interval=0.05)
        first = asyncio.ensure_future(lines.__anext__())
        await asyncio.sleep(0)
        logs.mkdir()
        log.write_text("up\n")
        got = (await asyncio.wait_for(first, WAIT))[1]
        await lines.aclose()
        return got

    assert asyncio.run(main()) == "up"


def test_parse_events_reads_names_and_masks():
    import struct

    raw = struct.pack("iIII", 1, inotify.IN_MODIFY, 0, 16) + b"worker-0.log\0\0\0\0"
    raw += struct.pack("iIII", 1, inotify.IN_Q_OVERFLOW, 0, 0)
    assert inotify.parse_events(raw) == [(1, inotify.IN_MODIFY, "worker-0.log"), (1, inotify.IN_Q_OVERFLOW, "")]
