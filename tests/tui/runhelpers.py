"""Helpers for console tests that start real runs on the demo cluster (the simulator, no root)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import pytest
from textual.pilot import Pilot

from .conftest import make_app

BIG = (160, 50)


@pytest.fixture
def sim_speed(monkeypatch):
    """Bring-up in about half a second, every stage still visited."""
    monkeypatch.setenv("ATOMDECK_SIM_SPEED", "20")


def live_app(**kw):
    """An app on the real clock (times in stage are real), no timed inventory refresh."""
    kw.setdefault("clock", datetime.now)
    return make_app(**kw)


async def until(pilot: Pilot, cond: Callable[[], object], timeout: float = 30.0, step: float = 0.05,
                what: str = "") -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what or cond}")
        await pilot.pause(step)


async def settle(pilot: Pilot) -> None:
    """Like conftest.ready, for an app that watches a run: its watch worker never completes."""
    app = pilot.app
    inventory = [w for w in app.workers if w.group == "inventory"]
    if inventory:  # (an empty list would mean every worker)
        await app.workers.wait_for_complete(inventory)
    await pilot.pause()
    await pilot.pause()


def text_of(widget) -> str:
    """The plain text a Static shows (Text, markup or any Rich renderable such as a table)."""
    from rich.console import Console
    from rich.text import Text

    content = getattr(widget, "content", None)
    if content is None or isinstance(content, (str, Text)):
        return str(widget.render())
    console = Console(width=400, record=True, color_system=None)
    with console.capture() as cap:
        console.print(content)
    return cap.get()


async def attached_scale(pilot: Pilot, redraw: bool = False):
    """The deterministic 128-node run (fakescale.py) attached without a watch, on the run view: (run, screen).
    `redraw`: draw it once more now (a redraw right after the attach may still wait behind the first one's
    cost)."""
    from atomdeck.tui.screens.run import RunScreen

    from .fakescale import fake_scale_run

    app = pilot.app
    await app.workers.wait_for_complete()
    run = fake_scale_run()
    app.runs.attach(run, watch=False)
    app.switch_mode("run")
    await pilot.pause()
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, RunScreen)
    if redraw:
        screen.redraw()
    return run, screen


async def pulse(screen, pilot: Pilot) -> None:
    """The pulse after a state change, not deferred behind the previous redraw's cost, and until it is drawn: a
    run of SPREAD_FROM processes or more draws a change over a few frames (screens/run_pacing.py _spread)."""
    screen.next_redraw_at = 0.0
    screen.run_updated()
    live = pilot.app.live
    for _ in range(300):
        if screen.drawn_version == live.version and not screen._clock_busy:
            return
        await pilot.pause(0.01)
    raise AssertionError(f"the change was not drawn in 3 s: version {screen.drawn_version} of {live.version}")


def count_layouts(monkeypatch) -> list[int]:
    """From now on, [how many layout passes of any screen] (Screen._refresh_layout: a reflow of the whole screen)."""
    from textual.screen import Screen

    passes = [0]
    real = Screen._refresh_layout

    def counted(self, *args, **kwargs):
        passes[0] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Screen, "_refresh_layout", counted)
    return passes
