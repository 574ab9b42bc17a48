"""Resumable tails: exact byte offsets, partial and huge lines, and no loss or duplicates across drops."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest
from atomdeck.core.remote.shell import CommandError, LocalRunner
from atomdeck.core.remote.ssh import ConnState, HostKeyUnknown, SshRunner
from atomdeck.core.remote.ssh.tail import LineSplitter, tail, tail_argv

from .conftest import FAST
from .harness import processes_matching

pytestmark = pytest.mark.timeout(30)


# ------------------------------------------------------------------------------ LineSplitter


def _split_all(data: bytes, pieces: list[int], max_line: int = 64) -> tuple[list[tuple[int, str]], LineSplitter]:
    s = LineSplitter(0, max_line)
    out, pos = [], 0
    for n in pieces:
        out += s.feed(data[pos:pos + n])
        pos += n
    out += s.feed(data[pos:])
    return out, s


def test_lines_wait_for_their_newline():
    s = LineSplitter(10)
    assert s.feed(b"abc") == []
    assert s.pending == 3
    assert s.feed(b"d\nef") == [(15, "abcd")]
    assert s.feed(b"\n\n") == [(18, "ef"), (19, "")]
    assert s.flush() == []
    s.feed(b"tail without newline")
    assert s.flush() == [(39, "tail without newline")]


def test_offsets_count_bytes_not_characters():
    data = "é\n日本\n💥x\r\n".encode()
    out, _ = _split_all(data, [1, 1, 1, 3, 2])
    assert out == [(3, "é"), (10, "日本"), (17, "💥x")]  # \r\n is a line end; offsets still in bytes


def test_invalid_utf8_is_replaced_and_counted():
    out, _ = _split_all(b"ok\xff\xfe\n\xc3\n", [3, 1])
    assert out == [(5, "ok\ufffd\ufffd"), (7, "\ufffd")]


def test_huge_lines_are_cut_without_losing_bytes():
    line = ("€" * 100).encode()  # 300 bytes, 3-byte characters
    out, s = _split_all(line + b"\nnext\n", [7, 100], max_line=64)
    texts = [t for _, t in out]
    assert "".join(texts[:-1]) == "€" * 100 and texts[-1] == "next"
    assert all(len(t.encode()) <= 64 for t in texts)
    assert "\ufffd" not in "".join(texts)  # never cut inside a character
    assert out[-1][0] == len(line) + 1 + 5 == s.offset


def test_random_chunking_reassembles_exactly():
    rng = random.Random(7)
    for _ in range(200):
        lines = ["".join(rng.choice("ab é日\t") for _ in range(rng.randint(0, 90))) for _ in range(rng.randint(1, 20))]
        data = "".join(x + "\n" for x in lines).encode()
        pieces = [rng.randint(0, 40) for _ in range(rng.randint(0, 30))]
        out, s = _split_all(data, pieces, max_line=32)
        # every byte is accounted for once: the offsets walk the file exactly
        assert out[-1][0] == len(data) == s.offset and s.pending == 0
        rebuilt, prev = b"", 0
        for off, text in out:
            chunk = data[prev:off]
            assert chunk.rstrip(b"\n").decode() == text
            rebuilt += chunk
            prev = off
        assert rebuilt == data


def test_tail_argv():
    assert tail_argv("/run/x.log", 0) == ["tail", "-c", "+1", "-F", "--", "/run/x.log"]
    assert tail_argv("-odd name", 41, follow=False) == ["tail", "-c", "+42", "--", "-odd name"]


# ------------------------------------------------------------------------------ local runner


async def test_local_tail_follows_and_holds_partial_lines(tmp_path):
    path = tmp_path / "w.log"
    path.write_bytes(b"a\nb\npar")
    got: list[tuple[int, str]] = []
    it = tail(LocalRunner(), str(path)).__aiter__()
    got.append(await asyncio.wait_for(it.__anext__(), 5))
    got.append(await asyncio.wait_for(it.__anext__(), 5))
    pending = asyncio.ensure_future(it.__anext__())
    await asyncio.sleep(0.3)
    assert not pending.done()  # "par" has no newline yet
    _append(path, b"tial\n")
    got.append(await asyncio.wait_for(pending, 5))
    await it.aclose()
    assert got == [(2, "a"), (4, "b"), (12, "partial")]


async def test_local_tail_to_end_flushes_and_resumes(tmp_path):
    path = tmp_path / "done.log"
    path.write_bytes(b"one\ntwo\nlast")
    first = [x async for x in tail(LocalRunner(), str(path), follow=False)]
    assert first == [(4, "one"), (8, "two"), (12, "last")]
    assert [x async for x in tail(LocalRunner(), str(path), offset=4, follow=False)] == [(8, "two"), (12, "last")]
    with pytest.raises(CommandError):
        [x async for x in tail(LocalRunner(), str(tmp_path / "missing.log"), follow=False)]


async def test_follow_waits_for_the_file_to_appear(tmp_path):
    path = tmp_path / "later.log"
    it = tail(LocalRunner(), str(path)).__aiter__()
    nxt = asyncio.ensure_future(it.__anext__())
    await asyncio.sleep(0.3)
    path.write_bytes(b"hello\n")
    assert await asyncio.wait_for(nxt, 5) == (6, "hello")
    await it.aclose()


# ------------------------------------------------------------------------------ over SSH


async def test_ssh_tail_huge_and_binary_lines(sshd, target, tmp_path):
    path = tmp_path / "big.log"
    data = b"x" * 200_000 + b"\n" + b"\x00\xffbin\n" + "ünïcode\n".encode()
    path.write_bytes(data)
    got = [x async for x in tail(SshRunner(target(sshd)), str(path), follow=False)]
    assert got[-1] == (len(data), "ünïcode") and got[-2][1] == "\x00\ufffdbin"
    assert "".join(t for _, t in got[:-2]) == "x" * 200_000 and all(len(t) <= 64 * 1024 for _, t in got)


async def test_ssh_tail_refuses_an_untrusted_host_at_once(sshd, target, known_hosts):
    r = SshRunner(target(sshd, known_hosts=known_hosts(name="nothing_trusted")))
    states = []
    r.watch(states.append)
    with pytest.raises(HostKeyUnknown):
        async for _ in tail(r, "/dev/null"):
            pass
    assert not [s for s in states if s.state == "reconnecting"]  # at once: refused, never retried


async def test_ssh_tail_resumes_after_drops_with_every_line_once(sshd, target, tmp_path):
    """Write numbered lines while tailing; kill the sshd connection twice, once in the middle of a
    line; the tail must deliver the file exactly, line by line, offsets matching."""
    path = tmp_path / "worker.log"
    path.write_bytes(b"")
    r = SshRunner(target(sshd))
    states: list[ConnState] = []
    got: list[tuple[int, str]] = []

    async def reader() -> None:
        async for off, line in tail(r, str(path), backoff=FAST, on_state=states.append):
            got.append((off, line))
            if line == "END":
                return

    async def writer() -> None:
        for i in range(1, 601):
            if i in (200, 400):
                for _ in range(200):  # the previous drop must be over (a busy machine reconnects slower)
                    if r.state.state == "up" and sshd.connection_pids():
                        break
                    await asyncio.sleep(0.025)
                _append(path, b"half a line at the drop ")
                await asyncio.sleep(0.05)
                assert sshd.kill_connections(), "no connection to kill"
                await asyncio.sleep(0.1)
                _append(path, b"and its other half\n")
            _append(path, f"line {i:06d} {'.' * (i % 37)}\n".encode())
            if i % 5 == 0:
                await asyncio.sleep(0.005)
        _append(path, b"END\n")

    reading = asyncio.ensure_future(reader())
    await writer()
    await asyncio.wait_for(reading, 15)

    content = path.read_bytes()
    assert "".join(line + "\n" for _, line in got).encode() == content  # nothing lost, nothing twice
    offsets = [off for off, _ in got]
    assert offsets == sorted(set(offsets)) and offsets[-1] == len(content)
    assert sum(1 for _, line in got if line.startswith("half a line at the drop and its other half")) == 2
    assert r.connection.connects == 3
    seen = [s.state for s in states]
    assert seen.count("lost") == 2 and seen.count("reconnecting") >= 2 and seen[-1] == "up"
    await _no_remote_tail_left(str(path))


async def test_ssh_tail_from_a_saved_offset(sshd, target, tmp_path):
    """A later session resumes from the offset an earlier one stored."""
    path = tmp_path / "resume.log"
    path.write_bytes(b"1\n22\n333\n")
    r = SshRunner(target(sshd))
    first = []
    async for off, line in tail(r, str(path)):
        first.append((off, line))
        if line == "22":
            break
    saved = first[-1][0]
    _append(path, b"4444\n")
    rest = [x async for x in tail(r, str(path), offset=saved, follow=False)]
    assert first == [(2, "1"), (5, "22")] and rest == [(9, "333"), (14, "4444")]
    await _no_remote_tail_left(str(path))


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:  # it ended between the listing and this read
        return ""


async def _no_remote_tail_left(path: str) -> None:
    deadline = time.monotonic() + 30  # a guard for a condition, not a timing
    while [p for p in processes_matching(path) if _comm(p) == "tail"]:
        assert time.monotonic() < deadline, "a remote `tail -F` outlived its channel"
        await asyncio.sleep(0.05)
