"""One Backoff for every retry loop: its delays, and that the loops in core/ use it (no hand-written
`delay = min(delay * 2, ...)` left)."""

from __future__ import annotations

import itertools
import re

from atomdeck.core.launch.ssh import NODE_WAIT_RETRY
from atomdeck.core.remote.backoff import Backoff
from atomdeck.core.remote.filetail import IDLE_POLL
from atomdeck.core.remote.ssh.runner import SESSION_OPEN_RETRY
from atomdeck.core.remote.ssh.tail import TAIL_RETRY
from atomdeck.core.remote.ssh.target import SSH_RECONNECT, SshTarget
from atomdeck.core.run.barrier import PROBE_BACKOFF, BarrierProber
from atomdeck.core.run.events import CellState
from atomdeck.core.run.watchers.base import WATCHER_RETRY  # was run.watching (the RunWatching mixin)

from tests.conftest import ROOT


def first(bo: Backoff, n: int) -> list[float]:
    return [round(d, 6) for d in itertools.islice(bo.delays(), n)]


def test_delays_grow_by_the_factor_up_to_the_cap_forever():
    assert first(Backoff(first_s=1, factor=2, max_s=5), 6) == [1, 2, 4, 5, 5, 5]
    assert first(Backoff(first_s=0.3, factor=1.5, max_s=2.0), 7) == [0.3, 0.45, 0.675, 1.0125, 1.51875, 2.0, 2.0]


def test_tries_ends_the_iterator_and_a_fresh_iterator_starts_over():
    bo = Backoff(first_s=0.01, factor=3, max_s=0.3, tries=4)
    assert first(bo, 10) == [0.01, 0.03, 0.09, 0.27]
    it = bo.delays()
    next(it), next(it)
    assert next(bo.delays()) == 0.01


def test_a_first_delay_above_the_cap_is_used_once_then_capped():
    assert first(Backoff(first_s=1.0, factor=1.5, max_s=0.25), 3) == [1.0, 0.25, 0.25]


def test_each_use_names_its_constants_and_keeps_its_old_pacing():
    assert first(SSH_RECONNECT, 6) == [0.25, 0.5, 1, 2, 4, 5] and SSH_RECONNECT.give_up_s == 60
    assert SshTarget("h").backoff is SSH_RECONNECT
    assert first(TAIL_RETRY, 6) == [0.25, 0.5, 1, 2, 4, 5]
    assert first(NODE_WAIT_RETRY, 6) == [0.25, 0.5, 1, 2, 4, 5]
    assert first(WATCHER_RETRY, 6) == [1, 2, 4, 8, 15, 15]
    assert first(PROBE_BACKOFF, 3) == [0.3, 0.45, 0.675] and first(PROBE_BACKOFF, 20)[-1] == 2.0
    assert first(IDLE_POLL, 6) == [0.05, 0.075, 0.1125, 0.16875, 0.25, 0.25]
    assert len(first(SESSION_OPEN_RETRY, 99)) == 4


def test_the_barrier_backs_off_per_cell_and_starts_over_after_an_open():
    a, b = (CellState("n1", "127.0.0.1", p, "decode", "server", None) for p in (1, 2))
    prober = BarrierProber([a, b], runner_for=lambda n: None, expected_soon=lambda c: False,
                           owner_alive=lambda c: None, on_result=lambda c, r: None)
    assert [round(prober._interval(a), 4) for _ in range(3)] == [0.3, 0.45, 0.675]
    assert round(prober._interval(b), 4) == 0.3  # its own back-off
    prober._backoff.pop(a.key)  # what run_node does when the cell answered
    assert round(prober._interval(a), 4) == 0.3


def test_no_hand_written_back_off_is_left_in_core():
    grown = re.compile(r"=\s*min\([^)]*\*|\*\s*(bo\.)?factor|\(0\.01, 0\.03")
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
             for p in sorted((ROOT / "core").rglob("*.py")) if p.name != "backoff.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if grown.search(line)]
    assert not found, "\n".join(found)
