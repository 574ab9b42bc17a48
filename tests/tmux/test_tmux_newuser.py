"""Issue 16 in a real terminal: typing in the Open screen stays there, and `atomdeck tui --cluster
local --run RUN` opens that run, not the Open screen."""

from __future__ import annotations

from tests.tui.fakerun import fake_run

from .test_tmux import ATOMDECK, pytestmark, tmux  # noqa: F401  (the fixture and the marks)


def test_typing_in_the_open_screen_types_there(tmux):  # noqa: F811
    tmux.start(str(ATOMDECK))
    tmux.wait_for("demo-n01")
    tmux.keys("C-o")
    tmux.wait_for("open a deployment design")
    for ch in "demo-2p1d":
        tmux.keys(ch)
    shown = tmux.wait_for("demo-2p1d")
    assert "open a deployment design" in shown  # still the Open screen: no view switched by "2"
    tmux.keys("Enter")
    shown = tmux.wait_for("demo-2p1d on local")
    assert "1 Nodes" in shown  # opened on the recipe typed, on the view it was on


def test_tui_run_wins_over_cluster(tmux):  # noqa: F811
    run = fake_run("serving")
    tmux.start(f"{ATOMDECK} tui --cluster local --run {run.id}")
    shown = tmux.wait_for(run.id)
    assert "open a deployment design" not in shown and "4 Run" in shown
    tmux.keys("q")
