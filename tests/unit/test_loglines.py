"""Log lines look the same however they arrive (issue 17.9): a local follow, the last lines of a file, and a
`tail` stream (what the SSH and login-host readers use) all split and decode through one module."""

from __future__ import annotations

import asyncio

from atomdeck.core.remote.filetail import follow, read_last_lines
from atomdeck.core.remote.shell import LocalRunner
from atomdeck.core.remote.ssh.tail import tail

RAW = (b"plain line\n\x1b[31mERROR\x1b[0m engine died\r\n\x1b]0;title\x07titled\n"
       b"caf\xc3\xa9 \xff bad byte\n\x1b[1;32mINFO\x1b[0m ready\n")
WANT = ["plain line", "ERROR engine died", "titled", "caf\u00e9 \ufffd bad byte", "INFO ready"]


async def _follow(path: str) -> list[tuple[int, str]]:
    stop = asyncio.Event()
    out = []
    async for item in follow(path, 0, stop=stop):
        out.append(item)
        if len(out) == len(WANT):
            stop.set()
    return out


def test_every_reader_gives_the_same_lines_and_offsets(tmp_path):
    log = tmp_path / "decode-0.log"
    log.write_bytes(RAW)
    followed = asyncio.run(_follow(str(log)))
    assert [line for _, line in followed] == WANT
    assert read_last_lines(str(log), 10) == WANT

    async def streamed():
        return [x async for x in tail(LocalRunner(), str(log), 0, follow=False)]

    assert asyncio.run(streamed()) == followed
    assert followed[-1][0] == len(RAW)


def test_last_lines_of_a_big_file_skip_the_cut_first_line(tmp_path):
    log = tmp_path / "big.log"
    log.write_bytes(b"".join(b"line %06d \x1b[33mWARN\x1b[0m\n" % i for i in range(20_000)))
    last = read_last_lines(str(log), 3, max_bytes=1000)
    assert last == [f"line {i:06d} WARN" for i in (19_997, 19_998, 19_999)]
    few = read_last_lines(str(log), 1000, max_bytes=1000)
    assert all(x.startswith("line ") and x.endswith(" WARN") for x in few)  # no cut first line
