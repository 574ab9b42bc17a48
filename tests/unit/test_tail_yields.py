"""Following a log with a big backlog lets the event loop run between lines: the watcher's probes and
other tails share that loop, and a 1 s probe timeout must not expire while one tail chews 4 MB."""

from __future__ import annotations

import asyncio

from atomdeck.core.remote.filetail import follow


def test_a_backlog_is_read_without_starving_the_loop(tmp_path):
    log = tmp_path / "flood.log"
    log.write_text("".join(f"[atom 12:00:00] Engine Core: line {i}\n" for i in range(10_000)))

    async def main():
        ticks = 0
        seen_at: list[int] = []

        async def other_task():  # stands for a probe or another process's tail
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_task())
        await asyncio.sleep(0)
        n = 0
        async for _, _line in follow(str(log)):
            n += 1
            if n % 1000 == 0:
                seen_at.append(ticks)
            if n == 10_000:
                break
        other.cancel()
        return seen_at

    seen_at = asyncio.run(main())
    # the other task kept running while the 10,000 lines (one read) were handed out
    assert seen_at[-1] - seen_at[0] >= 30, seen_at
