"""The run view's last lines of a process come from the watcher only after it is shown (the watcher sends
a shown process's every line from an offset it names, the others' last lines only). Until enough new lines
arrived, the panel's other lines are the log's lines before that offset, read from disk: moving the cursor
to a busy process showed one or two fresh lines in an otherwise empty panel."""

from __future__ import annotations

from atomdeck.tui.live import LiveRun

from .fakerun import fake_run


def test_a_newly_shown_process_has_its_earlier_lines_from_disk_then_the_new_ones():
    run = fake_run("serving")
    live = LiveRun(run)
    path = live.log_path("decode-0")
    assert path is not None
    path.write_text("".join(f"decode line {i}\n" for i in range(100)))
    asked: list[set[str]] = []
    live.use_watcher(asked.append)
    live.want_lines("the run view", ["decode-0"])
    assert asked[-1] == {"decode-0"}
    live._on_from("decode-0", path.stat().st_size)  # the watcher: every line after the file's end comes now
    assert live.streams("decode-0")
    assert live.tail("decode-0", 5) == [f"decode line {i}" for i in range(95, 100)]
    live._on_line("decode-0", "a new line")
    live._on_line("decode-0", "another")
    assert live.tail("decode-0", 5) == ["decode line 97", "decode line 98", "decode line 99", "a new line",
                                        "another"]
    for i in range(5):
        live._on_line("decode-0", f"fresh {i}")
    assert live.tail("decode-0", 5) == [f"fresh {i}" for i in range(5)]  # the buffer alone


def test_the_file_is_read_once_per_offset_not_at_every_redraw(monkeypatch):
    run = fake_run("serving")
    live = LiveRun(run)
    path = live.log_path("decode-0")
    assert path is not None
    path.write_text("".join(f"decode line {i}\n" for i in range(50)))
    live.use_watcher(lambda names: None)
    live.want_lines("the run view", ["decode-0"])
    live._on_from("decode-0", path.stat().st_size)
    reads = []
    history = live.history
    monkeypatch.setattr(live, "history", lambda name, n, to_end=False: reads.append(name) or history(name, n))
    for _ in range(10):
        assert live.tail("decode-0", 20)[-1] == "decode line 49"
    assert reads == ["decode-0"]
    live.want_lines("the run view", ["prefill-0"])
    live.want_lines("the run view", ["decode-0"])
    with path.open("a") as f:
        f.write("decode line 50\n")
    live._on_from("decode-0", path.stat().st_size)  # shown again: a new offset, read again
    assert live.tail("decode-0", 20)[-1] == "decode line 50" and reads == ["decode-0", "decode-0"]
