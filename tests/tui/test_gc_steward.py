"""The GC steward (tui/gc_steward.py, issue 19): survivors of the young passes are frozen at a steady pace
(so the automatic full passes stay small), cyclic garbage among them is collected by a full pass that waits for
a moment without keys, and a closing console thaws everything. Counted, not timed."""

from __future__ import annotations

import gc
import weakref

import pytest
from atomdeck.tui.gc_steward import GcSteward

from .conftest import make_app, ready


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref:
    """A reference cycle only the cyclic GC can free; the weak reference tells when it is gone."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def thawed():
    gc.collect()
    yield
    gc.unfreeze()
    gc.collect()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_survivors_of_a_young_pass_are_frozen_out_of_the_full_passes(thawed):
    clock = Clock()
    steward = GcSteward(clock=clock, freeze_every=5)
    steward.install()
    try:
        keep = [Node() for _ in range(2_000)]  # long-lived: survives the young pass
        gc.collect(1)  # (an automatic pass over generation 1 calls the same hook)
        assert steward.freezes == 1
        in_gen2 = {id(o) for o in gc.get_objects(generation=2)}
        assert not any(id(o) in in_gen2 for o in keep)  # frozen: the automatic full passes do not traverse them
        assert gc.get_freeze_count() >= len(keep)
        garbage = cycle()  # made after the freeze: a young pass still finds it
        gc.collect(1)
        assert garbage() is None
        assert steward.freezes == 1  # (at most every 5 s)
        clock.t += 5
        gc.collect(0)  # a pass over generation 0 alone: its survivors are in generation 1, nothing frozen
        assert steward.freezes == 1
        gc.collect(1)
        assert steward.freezes == 2
    finally:
        steward.close()


def test_full_pass_waits_for_a_quiet_moment_and_frees_frozen_cycles(thawed):
    clock = Clock()
    steward = GcSteward(clock=clock, thaw_every=600, quiet=2)
    steward.install()
    try:
        frozen_garbage = cycle()
        held = frozen_garbage()
        gc.collect(1)  # the cycle is alive now: frozen with everything else
        del held
        assert frozen_garbage() is not None
        clock.t += 30
        assert steward.tick() == ""  # not due: a frozen cycle waits (reference counting cannot free it)
        gc.collect()  # an automatic full pass skips frozen objects as well
        assert frozen_garbage() is not None
        clock.t += 600
        steward.key()  # the operator is typing: the due pass waits
        clock.t += 1
        assert steward.tick() == ""
        assert steward.postponed == 1 and frozen_garbage() is not None
        clock.t += 2  # two seconds without a key
        assert steward.tick() == "full"
        assert frozen_garbage() is None
        assert steward.full_passes == 1 and not steward.full_due()
    finally:
        steward.close()


def test_close_thaws_everything_and_unhooks(thawed):
    steward = GcSteward(clock=Clock())
    steward.install()
    gc.collect(1)
    assert gc.get_freeze_count() > 0
    steward.close()
    assert gc.get_freeze_count() == 0 and steward._after_pass not in gc.callbacks


async def test_console_runs_the_steward_and_tells_it_of_keys(thawed):
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        timers = [t for t in app._timers if t.name == "gc-steward"]
        assert len(timers) == 1
        assert app.gc_steward.last_key == float("-inf")
        await pilot.press("down")
        assert app.gc_steward.last_key > float("-inf")
        gc.collect(1)
        assert app.gc_steward.freezes >= 1 and gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0  # the console closed: thawed
    assert app.gc_steward._after_pass not in gc.callbacks
