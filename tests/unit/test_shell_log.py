"""A remote log's end read through a node's shell, base64-encoded so offsets stay exact bytes (the ssh
launcher reads a dead process's last lines this way: no login shell before its death is reported).
Here the shell is a LocalRunner, which fits the NodeShell interface."""

from __future__ import annotations

import asyncio

import pytest
from atomdeck.core.remote import shell_log
from atomdeck.core.remote.loglines import read_lines
from atomdeck.core.remote.shell import LocalRunner


async def collect(path, offset=0, partial=False):
    return [x async for x in shell_log.shell_read_log(LocalRunner(), str(path), offset, partial)]


def test_lines_and_offsets_match_the_local_reader_even_for_invalid_utf8(tmp_path):
    log = tmp_path / "decode-0.log"
    log.write_bytes(b"[atom] ok\n\xff\xfe broken \xe2\x82\n" + "caf\u00e9\n".encode() + b"partial")
    for offset in (0, 10):
        assert asyncio.run(collect(log, offset)) == read_lines(str(log), offset)
        assert asyncio.run(collect(log, offset, True)) == read_lines(str(log), offset, partial=True)


def test_a_missing_log_has_no_lines_and_a_flood_goes_the_other_way(tmp_path, monkeypatch):
    assert asyncio.run(collect(tmp_path / "nope.log")) == []
    log = tmp_path / "flood.log"
    log.write_text("x\n" * 100)
    monkeypatch.setattr(shell_log, "MAX_BYTES", 50)
    with pytest.raises(LookupError):
        asyncio.run(collect(log))
    assert len(asyncio.run(collect(log, 180))) == 10  # 20 bytes unread: fine
