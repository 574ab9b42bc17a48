"""Preview view: exactly the commands `atomdeck plan --json` gives; copy, export, save."""

from __future__ import annotations

import asyncio
import io
import json
import shlex
import stat
import subprocess
import sys
from pathlib import Path

from atomdeck.core.cli.design_verbs import plan_json
from atomdeck.core.config.paths import recipes_dir
from atomdeck.core.config.recipe import load_recipe
from atomdeck.core.design.export import export_script
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.tui.formatting import argv_lines, kv_transfer_config
from atomdeck.tui.screens.dialogs import ConfirmDialog, InputDialog
from atomdeck.tui.widgets.command_view import CommandView, command_text
from rich.console import Console
from textual.widgets import OptionList, Static

from .conftest import SIZE, make_app, ready

ATOMDECK = str(Path(sys.executable).parent / "atomdeck")


def body_text(app) -> str:
    console = Console(width=2000, record=True, color_system=None, file=io.StringIO())
    console.print(app.screen.query_one("#command-body", Static).content)
    return console.export_text()


def cli_plan(*args: str) -> dict:
    out = subprocess.run([ATOMDECK, "plan", *args, "--json"], capture_output=True, text=True, timeout=60,
                         check=False)
    return json.loads(out.stdout)


async def shown_processes(pilot) -> list[dict]:
    """Walk the process list; for each process, what the view shows."""
    app = pilot.app
    procs = app.screen.query_one("#procs", OptionList)
    shown = []
    for i in range(procs.option_count):
        opt = procs.get_option_at_index(i)
        if opt.disabled:
            continue
        procs.highlighted = i
        await pilot.pause()
        p = app.screen.query_one(CommandView).process
        text = body_text(app)
        # the screen shows each command as one exact shell command (continuation lines)
        assert command_text(p.argv).replace(" \\\n    ", " ") in text.replace(" \\\n    ", " ")
        assert shlex.split(command_text(p.argv).replace("\\\n", " ")) == p.argv
        assert shlex.split(command_text(p.launch_argv).replace("\\\n", " ")) == p.launch_argv
        shown.append({"name": p.name, "role": p.role, "node": p.node, "host": p.host, "argv": p.argv,
                      "env": p.all_env(), "launch_argv": p.launch_argv, "ports": p.ports, "text": text})
    return shown


def _strip(shown: list[dict]) -> list[dict]:
    """Without the screen text, in core's order (the screen groups processes per node)."""
    return sorted(({k: v for k, v in s.items() if k != "text"} for s in shown), key=lambda p: p["name"])


def _by_name(procs: list[dict]) -> list[dict]:
    return sorted(procs, key=lambda p: p["name"])


async def test_preview_shows_exactly_what_plan_json_gives():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("3")
        shown = await shown_processes(pilot)
        same_assessment = plan_json(app.assessment)["processes"]
        assert _strip(shown) == _by_name(same_assessment)
        assert _strip(shown) == _by_name(cli_plan("demo-1p1d")["processes"])
        assert [s["name"] for s in shown] == ["prefill-0", "router", "decode-0"]  # grouped per node


async def test_preview_matches_cli_for_edited_choices():
    """2P1D with nodes picked by hand: the console and `atomdeck plan --nodes` agree."""
    app = make_app(recipe="demo-2p1d", nodes=["demo-n04", "demo-n02", "demo-n03"])
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("3")
        shown = _strip(await shown_processes(pilot))
        cli = cli_plan("demo-2p1d", "--nodes", "demo-n04,demo-n02,demo-n03")["processes"]
        assert shown == _by_name(cli)


async def test_mia1_offline_preview_matches_cli_and_never_asks_slurm():
    calls = []

    async def offline_only(cluster, offline):
        calls.append(offline)
        assert offline, "a test must never query mia1 live"
        return await fetch_inventory(cluster, offline=True)

    nodes = ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03"]
    app = make_app(recipe="dsv4-fp4-mi355x-2p1d-dpa", cluster="mia1", offline=True, named_nodes=nodes,
                   nodes=nodes, fetch=offline_only)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert calls == [True]
        await pilot.press("3")
        shown = await shown_processes(pilot)
        cli = cli_plan("dsv4-fp4-mi355x-2p1d-dpa", "--cluster", "mia1", "--offline", "--nodes", ",".join(nodes))
        assert _strip(shown) == _by_name(cli["processes"])
        prefill = next(s for s in shown if s["name"] == "prefill-0")
        assert prefill["launch_argv"][:2] == ["srun", "--jobid"] and "docker" in prefill["launch_argv"]
        kv = kv_transfer_config(prefill["argv"])
        assert kv == {"kv_role": "kv_producer", "kv_connector": "mooncake", "proxy_ip": "mia1-p01-g01",
                      "handshake_port": 6301, "protocol": "rdma"}
        assert '"kv_role": "kv_producer"' in prefill["text"]  # pretty-printed, not only the compact flag


async def test_secrets_are_masked_on_screen_and_in_the_copy():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        from dataclasses import replace

        from atomdeck.core.design.draft import apply_edits

        recipe, issues = apply_edits(app.design.recipe, {"env": {"HF_TOKEN": "hf_supersecret"}})
        assert not issues
        app.set_design(replace(app.design, recipe=recipe))
        await pilot.press("3")
        await pilot.pause()
        text = body_text(app)
        assert "hf_supersecret" not in text and "HF_TOKEN=***" in text
        await pilot.press("c")
        assert app.clipboard == app.screen.query_one(CommandView).launch_line
        assert "hf_supersecret" not in app.clipboard and app.clipboard.startswith("env ")
        assert any("copied the launch command of prefill-0" in n.message for n in app._notifications)


async def test_export_script_is_written_executable_and_overwrite_asks():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("3", "e")
        assert isinstance(app.screen, InputDialog)
        assert app.screen.query_one("#answer").value == "./atomdeck-demo-1p1d.sh"
        await pilot.press("enter")
        path = Path("atomdeck-demo-1p1d.sh")
        assert path.is_file() and stat.S_IMODE(path.stat().st_mode) == 0o755
        text = path.read_text()
        expected = export_script(app.assessment)
        def drop(t: str) -> list[str]:
            return [line for line in t.splitlines() if not line.startswith("# generated")]

        assert drop(text) == drop(expected)
        check = await asyncio.create_subprocess_exec("bash", "-n", str(path))
        assert await check.wait() == 0
        path.write_text("old")
        await pilot.press("e", "enter")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")
        assert path.read_text() == "old"
        await pilot.press("e", "enter", "y")
        assert path.read_text().startswith("#!/usr/bin/env bash")


async def test_save_recipe_round_trips_and_never_overwrites_a_shipped_one_silently():
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("2")
        box = app.screen.query_one("#f-prefill-workers")
        box.focus()
        await pilot.press("end", "backspace", "2", "escape")
        await pilot.press("3", "w")
        assert app.screen.query_one("#answer").value == "./demo-1p1d.yaml"
        await pilot.press("enter")
        saved = Path("demo-1p1d.yaml")
        assert load_recipe(saved) == app.design.recipe and load_recipe(saved).prefill.workers == 2
        assert app.workspace.recipe_path == Path("demo-1p1d.yaml")

        shipped = recipes_dir() / "demo-1p1d.yaml"
        original = shipped.read_text()
        await pilot.press("w")
        answer = app.screen.query_one("#answer")
        answer.value = str(shipped)
        await pilot.press("enter")
        assert isinstance(app.screen, ConfirmDialog)
        assert "shipped" in str(app.screen.query_one(".dialog-body").render())
        await pilot.press("enter")  # the focused choice is Cancel
        assert shipped.read_text() == original


def test_argv_lines_keep_every_token():
    argv = ["srun", "--jobid", "$JOBID", "--output=x.log", "docker", "run", "--rm", "-e", "A=1 2",
            "--entrypoint", "", "img", "python3", "-m", "mod", "--kv-transfer-config", '{"a": 1}', "-tp", "8"]
    assert shlex.split(" ".join(argv_lines(argv))) == argv
    assert "img python3 -m mod" in argv_lines(argv)  # image and program read as one line
