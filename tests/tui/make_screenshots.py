"""Screenshots of every console view: SVG via App.save_screenshot, PNG via cairosvg (Fira Code).

    .venv/bin/python tests/tui/make_screenshots.py            # all, into screenshots/
    .venv/bin/python tests/tui/make_screenshots.py OUT nodes  # some, elsewhere

The mia1 shot plans offline by node name: it never contacts the cluster.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIG, SMALL = (160, 50), (100, 30)
CLOCK = datetime(2025, 1, 1, 12, 0, 0)
MIA1 = ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03"]


async def _offline(cluster, offline):
    from atomdeck.core.session import fetch_inventory

    return await fetch_inventory(cluster, offline=True)


async def _type(pilot, field_id: str, text: str) -> None:
    box = pilot.app.screen.query_one(f"#{field_id}")
    box.focus()
    await pilot.pause()
    await pilot.press("end", *["backspace"] * len(box.value), *text, "escape")


async def _goto_node(pilot, node: str) -> None:
    table = pilot.app.screen.query_one("#node-table")
    table.move_cursor(row=table.shown.index(node))
    await pilot.pause()


# name -> (app arguments, size, what to do before the shot)
Step = Callable[[object], Awaitable[None]]


async def _nodes_refusal(pilot) -> None:
    await _goto_node(pilot, "demo-n06")
    await pilot.press("space")


async def _override(pilot) -> None:
    await _goto_node(pilot, "demo-n01")
    await pilot.press("space")
    await _goto_node(pilot, "demo-n05")
    await pilot.press("o", "y")


async def _layout_errors(pilot) -> None:
    await pilot.press("2")
    await _type(pilot, "f-prefill-tp", "16")
    await _type(pilot, "f-ports-router", "99999")


def _keys(*keys: str) -> Step:
    async def step(pilot) -> None:
        await pilot.press(*keys)
    return step


SHOTS: dict[str, tuple[dict, tuple[int, int], Step]] = {
    "01-nodes": ({}, BIG, _keys()),
    "02-nodes-refused": ({}, BIG, _nodes_refusal),
    "03-nodes-override": ({}, BIG, _override),
    "04-layout-2p1d": ({"recipe": "demo-2p1d"}, BIG, _keys("2")),
    "05-layout-errors": ({}, BIG, _layout_errors),
    "06-preview-demo": ({}, BIG, _keys("3")),
    "07-preview-mia1-offline": ({"recipe": "dsv4-fp4-mi355x-2p1d-dpa", "cluster": "mia1", "offline": True,
                                 "named_nodes": MIA1, "fetch": _offline}, BIG, _keys("3", "down", "down")),
    "08-launch-confirm": ({}, BIG, _keys("3", "L")),
    "09-launch-blocked": ({"nodes": ["demo-n01"]}, BIG, _keys("L")),
    "10-help": ({}, BIG, _keys("question_mark")),
    "11-open": ({}, BIG, _keys("ctrl+o")),
    "12-nodes-100x30": ({}, SMALL, _keys()),
    "13-layout-100x30": ({"recipe": "demo-2p1d"}, SMALL, _keys("2")),
    "14-preview-100x30": ({}, SMALL, _keys("3")),
    "15-layout-light-theme": ({"recipe": "demo-2p1d", "theme": "textual-light"}, BIG, _keys("2")),
}


async def shoot(name: str, out: Path) -> Path:
    from atomdeck.tui.app import ConsoleApp

    kw, size, step = SHOTS[name]
    app = ConsoleApp(**{"refresh_s": None, "clock": lambda: CLOCK, **kw})
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await step(pilot)
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.pause()
        path = app.save_screenshot(f"{name}.svg", str(out))
    return Path(path)


def to_png(svg: Path) -> Path:
    import cairosvg

    png = svg.with_suffix(".png")
    cairosvg.svg2png(url=str(svg), write_to=str(png))
    return png


def main(out: Path = ROOT / "screenshots", names: list[str] | None = None, png: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    saved = os.environ.get("XDG_CONFIG_HOME")
    with tempfile.TemporaryDirectory() as cfg:
        os.environ["XDG_CONFIG_HOME"] = cfg  # the user's keymap and theme stay out of the pictures
        try:
            for name in names or list(SHOTS):
                svg = asyncio.run(shoot(name, out))
                written.append(svg)
                if png:
                    written.append(to_png(svg))
        finally:
            if saved is None:
                os.environ.pop("XDG_CONFIG_HOME", None)
            else:
                os.environ["XDG_CONFIG_HOME"] = saved
    return written


if __name__ == "__main__":
    args = sys.argv[1:]
    target = Path(args[0]) if args else ROOT / "screenshots"
    chosen = [n for n in SHOTS if any(a in n for a in args[1:])] if len(args) > 1 else None
    for p in main(target, chosen):
        print(p)
