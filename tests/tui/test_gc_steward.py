"""The GC steward (tui/gc_steward.py, issue 19): once a minute, when nobody has typed for 2 s, a full pass over
everything whose survivors are frozen (so the automatic full passes stay small); cyclic garbage among frozen
objects waits only for the next such pass; a closing console thaws everything. Counted, not timed."""

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


def test_a_quiet_full_pass_frees_cycles_and_freezes_the_survivors(thawed):
    """Once a minute and 2 s without a key: everything thawed and collected, the survivors frozen (the automatic
    full passes then do not traverse them); a cycle that dies among frozen objects waits for the next such pass."""
    clock = Clock()
    steward = GcSteward(clock=clock, full_every=60, quiet=2)
    try:
        keep = [Node() for _ in range(2_000)]  # long-lived
        garbage = cycle()
        clock.t += 30
        assert steward.tick() == ""  # not due
        clock.t += 30
        steward.key()  # the operator is typing: the due pass waits
        clock.t += 1
        assert steward.tick() == "" and steward.postponed == 1
        clock.t += 2  # two seconds without a key
        assert steward.tick() == "full" and steward.full_passes == 1 and not steward.full_due()
        assert garbage() is None
        in_gen2 = {id(o) for o in gc.get_objects(generation=2)}
        assert not any(id(o) in in_gen2 for o in keep)  # frozen
        assert gc.get_freeze_count() >= len(keep)
        frozen_garbage = cycle()
        held = frozen_garbage()
        clock.t += 60
        assert steward.tick() == "full"  # the cycle is alive now: frozen with everything else
        del held
        gc.collect()  # an automatic full pass skips frozen objects
        assert frozen_garbage() is not None
        young_garbage = cycle()  # made after the freeze: an automatic pass finds it
        gc.collect()
        assert young_garbage() is None
        clock.t += 60
        assert steward.tick() == "full"
        assert frozen_garbage() is None  # freed by the next quiet full pass
    finally:
        steward.close()


def test_keys_all_along_delay_a_full_pass_five_minutes_at_most(thawed):
    clock = Clock()
    steward = GcSteward(clock=clock, full_every=60, quiet=2, latest=300)
    try:
        clock.t += 60
        for _ in range(60):  # a key every 5 s for 5 minutes: the pass waits
            steward.key()
            assert steward.tick() == ""
            clock.t += 5
        steward.key()
        assert steward.tick() == "full"  # 6 minutes since the last one: it runs though keys come
        steward.due()  # (a launch) due now, but it waits for a quiet moment again
        steward.key()
        assert steward.tick() == ""
        clock.t += 2
        assert steward.tick() == "full"
    finally:
        steward.close()


def test_python_makes_no_full_pass_of_its_own_while_the_steward_owns_them(thawed):
    """Objects that survive the young passes pile up in generation 2: Python would traverse all of them every few
    seconds (a key waited 0.2-0.7 s at 128 nodes); with the steward owning the full passes it does not, and
    close gives them back."""
    before = gc.get_threshold()
    steward = GcSteward()
    full: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    gc.callbacks.append(seen)
    try:
        steward.own_full_passes()
        assert gc.get_threshold()[:2] == before[:2]
        keep = []
        for _ in range(300):  # many young passes whose survivors reach generation 2
            keep.append([Node() for _ in range(1_000)])
            cycle()
        assert not full
        steward.close()
        assert gc.get_threshold() == before
        gc.disable()
        gc.enable()
        for _ in range(300):  # Python's own full passes again
            keep.append([Node() for _ in range(1_000)])
        assert full
    finally:
        gc.callbacks.remove(seen)
        steward.close()


def test_close_thaws_everything(thawed):
    clock = Clock()
    steward = GcSteward(clock=clock)
    clock.t += 60
    steward.tick()
    assert gc.get_freeze_count() > 0
    steward.close()
    assert gc.get_freeze_count() == 0


async def test_console_runs_the_steward_and_tells_it_of_keys(thawed):
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        timers = [t for t in app._timers if t.name == "gc-steward"]
        assert len(timers) == 1
        assert app.gc_steward.last_key == float("-inf")
        await pilot.press("down")
        assert app.gc_steward.last_key > float("-inf")
        app.gc_steward.last_full -= 60
        app.gc_steward.last_key -= 2
        assert app.gc_steward.tick() == "full" and gc.get_freeze_count() > 0
        assert gc.get_threshold()[2] > 1_000_000  # Python's own full passes stopped while it runs
    assert gc.get_freeze_count() == 0  # the console closed: thawed
    assert gc.get_threshold()[2] < 1_000_000
