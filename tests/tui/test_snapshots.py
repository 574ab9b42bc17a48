"""Looks: SVG snapshots of every view (fixed size, frozen clock, no machine paths on screen).

Regenerate after an intended change with
    .venv/bin/python -m pytest tests/tui/test_snapshots.py --snapshot-update
and review the SVG diff.
"""

from __future__ import annotations

import pytest
from atomdeck.core.config.paths import recipes_dir
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.tui.screens.start import StartScreen

from .conftest import SIZE, make_app, ready

MIA1_NODES = ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03"]


@pytest.fixture(autouse=True)
def _fixed_config_dir(monkeypatch):
    """The help screen shows the keymap path: keep it the same on every machine."""
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent/xdg-config")


async def _offline(cluster, offline):
    return await fetch_inventory(cluster, offline=True)


def _then(*keys: str):
    async def run_before(pilot):
        await ready(pilot)
        await pilot.press(*keys)
        await ready(pilot)
    return run_before


def test_nodes_view(snap_compare):
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_then())


def test_nodes_view_with_override_and_refusal(snap_compare):
    app = make_app(nodes=["demo-n01", "demo-n05"], overrides=["demo-n05"])
    assert snap_compare(app, terminal_size=SIZE, run_before=_then("down", "down", "down", "down", "down", "space"))


def test_layout_view_2p1d(snap_compare):
    assert snap_compare(make_app(recipe="demo-2p1d"), terminal_size=SIZE, run_before=_then("2"))


def test_layout_view_with_errors(snap_compare):
    app = make_app(nodes=["demo-n01"])
    assert snap_compare(app, terminal_size=SIZE, run_before=_then("2"))


def test_preview_view_mia1_offline(snap_compare):
    app = make_app(recipe="dsv4-fp4-mi355x-2p1d-dpa", cluster="mia1", offline=True, named_nodes=MIA1_NODES,
                   fetch=_offline)
    assert snap_compare(app, terminal_size=SIZE, run_before=_then("3"))


def test_launch_blocked_dialog(snap_compare):
    app = make_app(nodes=["demo-n01"])
    assert snap_compare(app, terminal_size=SIZE, run_before=_then("L"))


def test_help_screen(snap_compare):
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=_then("question_mark"))


def test_open_screen(snap_compare):
    """Lists a fixed set of files, so recipes added to recipes/ later do not change the picture."""
    shipped = recipes_dir()

    async def run_before(pilot):
        await ready(pilot)
        pilot.app.push_screen(StartScreen("local", "demo-1p1d", clusters=[shipped / "clusters" / "local.yaml"],
                                          recipes=[shipped / f"demo-{n}.yaml" for n in ("1p1d", "2p1d", "agg")]))
        await ready(pilot)

    assert snap_compare(make_app(), terminal_size=SIZE, run_before=run_before)


def test_layout_view_small_terminal(snap_compare):
    assert snap_compare(make_app(recipe="demo-2p1d"), terminal_size=(100, 30), run_before=_then("2"))


def test_screenshot_script_writes_svg_and_png(tmp_path):
    """tests/tui/make_screenshots.py (which fills screenshots/) keeps working."""
    from .make_screenshots import main

    files = main(tmp_path, ["01-nodes"], png=True)
    assert [f.name for f in files] == ["01-nodes.svg", "01-nodes.png"]
    assert files[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
