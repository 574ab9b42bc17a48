"""A dead process's last known line is followed by what it means, where the line names only the symptom: the
operator is told where to look (a port taken, the GPUs' memory, the model path)."""

from __future__ import annotations

import pytest
from atomdeck.core.run.diagnose import describe_proc
from atomdeck.core.run.events import ProcState


def dead(last: str, alive: bool | None = False) -> ProcState:
    p = ProcState("prefill-0", "prefill", "n01", stage="failed" if alive is False else "loading", alive=alive,
                  exit_code=1 if alive is False else None)
    p.errors.append(last)
    return p


@pytest.mark.parametrize("last,means", [
    ("zmq.error.ZMQError: Address already in use (addr='tcp://*:6301')", "a Mooncake engine's random port"),
    ("OSError: [Errno 98] Address already in use", "a port it binds was taken on its node"),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 7.00 GiB.", "rocm-smi --showpids"),
    ("RuntimeError: HIP error: hipErrorOutOfMemory", "--gpu-memory-utilization"),
    ("OSError: Can't load tokenizer for '/models/x'. Make sure '/models/x' is the correct path", "not mounted"),
])
def test_a_known_last_line_says_where_to_look(last, means):
    text = describe_proc(dead(last), now=0.0)
    assert text.startswith(f"prefill-0 on n01 exit 1; last: {last} (") and means in text, text


def test_other_lines_and_live_processes_get_no_meaning():
    assert describe_proc(dead("RuntimeError: boom"), now=0.0) == "prefill-0 on n01 exit 1; last: RuntimeError: boom"
    alive = describe_proc(dead("torch.OutOfMemoryError: HIP out of memory", alive=True), now=0.0)
    assert "rocm-smi" not in alive  # still running: the line may be a warning it survived
