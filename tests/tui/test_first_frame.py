"""The console's first frame (issue 19): drawn before the recipe and cluster are read and validated,
then the same Nodes view as ever. What the first frame imports is checked in fresh processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from atomdeck.core.config.errors import AtomdeckError, ConfigError
from atomdeck.tui.screens.loading import LoadingScreen
from atomdeck.tui.screens.nodes import NodesScreen

from .conftest import SIZE, make_app, ready

HEAVY = ["pydantic", "yaml", "asyncssh", "h11", "prometheus_client", "atomdeck.core.config.recipe",
         "atomdeck.core.config.cluster", "atomdeck.core.design.lint", "atomdeck.core.design.commands",
         "atomdeck.core.launch", "atomdeck.core.remote"]


def _fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_console_imports_no_model_yaml_or_ssh():
    got = _fresh(f"import sys, json; import atomdeck.tui.app; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert got == []


def test_the_command_line_imports_no_model_or_yaml_before_the_console():
    """`atomdeck` builds the parser of every verb before it opens the console (drill's imports are its own)."""
    got = _fresh("import sys, json; from atomdeck.core.cli.main import build_parser; build_parser(); "
                 f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    assert got == []


FIRST_FRAME = """
import asyncio, json, sys
from pathlib import Path
import atomdeck.tui.app as app_module
from atomdeck.tui.app import ConsoleApp
HEAVY = %r
seen = {}

class Probe(ConsoleApp):
    CSS_PATH = str(Path(app_module.__file__).with_name("atomdeck.tcss"))
    def _load_then_start(self):  # called once the first frame is drawn, before anything is read
        seen["first"] = type(self.screen).__name__
        seen["first_imports"] = [m for m in HEAVY if m in sys.modules]
        super()._load_then_start()

async def main():
    app = Probe(refresh_s=None, defer=True, **%r)
    async with app.run_test(size=(140, 45)) as pilot:
        while not app.loaded:
            await pilot.pause(0.01)
        await app.workers.wait_for_complete()
        await pilot.pause()
        seen["then"] = type(app.screen).__name__
        seen["then_imports"] = [m for m in HEAVY if m in sys.modules]
        seen["gpus"] = app.node_gpus.status(app.workspace.cluster.name)

asyncio.run(main())
print(json.dumps(seen))
"""


def test_the_first_frame_is_drawn_before_the_recipe_is_read_and_the_nodes_view_needs_no_ssh():
    got = _fresh(FIRST_FRAME % (HEAVY, {"read_gpus": False}))
    assert got["first"] == "LoadingScreen" and got["first_imports"] == []
    assert got["then"] == "NodesScreen"
    # the Nodes view reads and validates the recipe (pydantic, YAML), but launches nothing
    assert {"pydantic", "yaml", "atomdeck.core.design.lint"} <= set(got["then_imports"])
    assert not {"asyncssh", "h11", "prometheus_client", "atomdeck.core.launch",
                "atomdeck.core.remote"} & set(got["then_imports"])


def test_the_nodes_gpus_are_read_after_the_first_frame_and_a_local_cluster_needs_no_ssh_for_them():
    """The nodes' GPUs (node_gpus.py) are read in the background once the Nodes view is shown: on the local demo
    cluster by commands on this machine (core/remote's runner and amd-smi reader), never SSH or a launcher."""
    got = _fresh(FIRST_FRAME % (HEAVY, {}))
    assert got["first"] == "LoadingScreen" and got["first_imports"] == []
    assert got["then"] == "NodesScreen" and "atomdeck.core.remote" in got["then_imports"]
    assert not {"asyncssh", "h11", "prometheus_client", "atomdeck.core.launch"} & set(got["then_imports"])
    assert got["gpus"].startswith("GPUs read "), got["gpus"]


async def _loaded(pilot) -> None:
    while not pilot.app.loaded and pilot.app.is_running:
        await pilot.pause(0.01)
    await ready(pilot)


async def test_once_loaded_the_deferred_console_shows_the_same_nodes_view():
    shots = []
    for defer in (False, True):
        app = make_app(recipe="demo-2p1d", defer=defer)
        async with app.run_test(size=SIZE) as pilot:
            await _loaded(pilot)
            assert isinstance(app.screen, NodesScreen)
            shots.append(app.export_screenshot())
    assert shots[0] == shots[1]


async def test_the_first_frame_shows_the_views_and_what_is_being_read():
    import atomdeck.tui.app as app_module
    from atomdeck.tui.app import ConsoleApp

    seen = []

    class Probe(ConsoleApp):
        CSS_PATH = str(Path(app_module.__file__).with_name("atomdeck.tcss"))

        def _load_then_start(self) -> None:
            assert isinstance(self.screen, LoadingScreen)
            seen.append((str(self.screen.query_one("#tabs").render()), str(self.screen.query_one("#context").render())))
            super()._load_then_start()

    app = Probe(refresh_s=None, defer=True)
    assert not app.loaded
    async with app.run_test(size=SIZE) as pilot:
        await _loaded(pilot)
    (tabs, context), = seen
    assert tabs.split() == ["1", "Nodes", "2", "Layout", "3", "Preview", "4", "Run", "5", "Runs", "6", "Bench"]
    assert context == "demo-1p1d on local · reading …"


async def test_an_invalid_recipe_ends_the_deferred_console_with_the_error(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmode: aggregate\nno_such_key: 1\n")
    app = make_app(recipe=str(bad), defer=True)
    async with app.run_test(size=SIZE) as pilot:
        while app.is_running:
            await pilot.pause(0.01)
    assert isinstance(app.load_error, ConfigError) and app.return_code == 2


def test_an_unknown_recipe_fails_before_the_deferred_console_opens():
    try:
        make_app(recipe="no-such-recipe", defer=True)
    except AtomdeckError:
        pass
    else:
        raise AssertionError("an unknown recipe must fail at once")


def test_reading_the_design_before_the_first_frame_loads_it_at_once():
    app = make_app(defer=True)
    assert not app.loaded
    assert app.design.recipe.name == "demo-1p1d" and app.loaded


async def test_q_on_the_first_frame_closes_the_console_without_loading():
    import atomdeck.tui.app as app_module
    from atomdeck.tui.app import ConsoleApp

    class QuitFirst(ConsoleApp):
        CSS_PATH = str(Path(app_module.__file__).with_name("atomdeck.tcss"))

        def _load_then_start(self) -> None:
            self.exit()  # as q does before the recipe is read; the load scheduled already must not add a view
            super()._load_then_start()

    app = QuitFirst(refresh_s=None, defer=True)
    async with app.run_test(size=SIZE) as pilot:
        while app.is_running:
            await pilot.pause(0.01)
    assert not app.loaded and app.return_code == 0
