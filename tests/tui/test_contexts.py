"""Several clusters in one console (tui/contexts.py, screens/contexts.py): the context is in every header, `:ctx`
lists and switches, switching keeps every cluster's watcher process alive, the Runs view lists every cluster's
runs each with its cluster, and a cluster that does not answer is marked and never holds up the others.

Two real runs at once on two local clusters (the simulator, real processes and ports): the demo's nodes and a
second cluster's on other loopback addresses. Run under `flock /tmp/atomdeck-demo.lock`."""

from __future__ import annotations

import os
import socket

import pytest
from atomdeck.core.config.paths import config_dir
from atomdeck.core.run.run import Run
from atomdeck.tui.screens.contexts import CommandPrompt, ContextScreen
from atomdeck.tui.screens.dialogs import ConfirmDialog
from atomdeck.tui.screens.run import RunScreen
from atomdeck.tui.screens.runs import RunsScreen
from atomdeck.tui.widgets.context_bar import ContextBar
from textual.widgets import DataTable

from tests.leftovers import gone

from .conftest import make_app, ready
from .runhelpers import BIG, live_app, settle, sim_speed, text_of, until  # noqa: F401

SECOND = """\
current: local
clusters:
  second:
    description: a second demo cluster, on other loopback addresses
    launcher: local
    node_ip: {method: static}
    simulator: {enabled: true}
    nodes:
      - {name: two-n01, addr: 127.0.0.61, gpus: 8}
      - {name: two-n02, addr: 127.0.0.62, gpus: 8}
"""


def write_clusters(extra: str = "") -> None:
    path = config_dir() / "clusters.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SECOND + extra)


def header(app) -> str:
    return text_of(app.screen.query_one(ContextBar).query_one("#ctx"))


async def command(pilot, text: str) -> None:
    await pilot.press("colon")
    assert isinstance(pilot.app.screen, CommandPrompt)
    await pilot.press(*text, "enter")
    await pilot.pause()


async def launch(pilot, app) -> None:
    await pilot.press("3", "L")
    assert isinstance(app.screen, ConfirmDialog), app.screen
    await pilot.press("y")
    try:
        await until(pilot, lambda: app.live is not None and not app.launching and isinstance(app.screen, RunScreen),
                    what="the run view, its processes started")
    except AssertionError:
        body = app.screen.query(".dialog-body")
        raise AssertionError(f"{app.screen}: {[text_of(b) for b in body]} {[n.message for n in app._notifications]}")
    await until(pilot, lambda: app.live.state.status == "serving", what="serving")


async def tear_down_every_run() -> None:
    for meta in Run.list():
        run = Run.open(meta["id"])
        if meta.get("status") != "stopped" or any(p.alive is not False for p in run.state.procs.values()):
            report = await run.teardown(grace=2)
            assert report.clean and gone(run) == []


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.usefixtures("sim_speed")
async def test_two_clusters_watched_at_once_switching_keeps_both_watchers():
    write_clusters()
    app = live_app()
    try:
        async with app.run_test(size=BIG) as pilot:
            await settle(pilot)
            assert "ctx local" in header(app)
            await launch(pilot, app)
            first = app.live
            first_watcher = app.runs._watcher
            assert first_watcher is not None and first_watcher.pid

            await command(pilot, "ctx second")  # k9s: `:ctx NAME`
            await settle(pilot)
            assert app.contexts.current == "second" and app.live is None
            assert "ctx second" in header(app) and "+1" in header(app)
            assert app.workspace.cluster.nodes[0].addr == "127.0.0.61"
            await pilot.press("1")  # the design views show the other cluster's nodes
            await launch(pilot, app)
            second = app.live
            assert second is not first and second.run.cluster.name == "second"

            # both watched at once: two watcher processes alive, each folding its run's events
            parked = app.contexts.parked["local"].runs
            assert parked.live is first and parked._watcher is first_watcher and first.watching
            pids = {first_watcher.pid, app.runs._watcher.pid}
            assert len(pids) == 2 and all(os.path.exists(f"/proc/{p}") for p in pids)
            seen = first.metrics_version  # (a serving run's news: its metrics, scraped every few seconds)
            await until(pilot, lambda: first.metrics_version > seen + 1, what="the parked run's events still folded")

            # Runs: every cluster's runs, each with its cluster; ● watched here, ○ watched in the other context
            await pilot.press("5")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, RunsScreen)
            rows = {str(r.value): screen.query_one(DataTable).get_row(r.value)
                    for r in screen.query_one(DataTable).rows}
            assert str(rows[first.id][4]) == "local" and str(rows[second.id][4]) == "second"
            assert str(rows[second.id][0]) == "●" and str(rows[first.id][0]) == "○"
            assert "2 run(s) on 2 cluster(s)" in text_of(screen.query_one("#runs-summary"))

            # Enter on the other cluster's run shows its context, the very same watched run (not reopened)
            table = screen.query_one(DataTable)
            table.move_cursor(row=[str(r.value) for r in table.rows].index(first.id))
            await pilot.press("enter")
            await until(pilot, lambda: app.contexts.current == "local" and isinstance(app.screen, RunScreen),
                        what="the local context's run view")
            assert app.live is first and app.runs._watcher is first_watcher
            assert app.contexts.parked["second"].runs.live is second and second.watching

            # :ctx lists the contexts; Enter on one switches back
            await command(pilot, "ctx")
            assert isinstance(app.screen, ContextScreen)
            names = [r["name"] for r in app.screen.rows]
            assert names[:2] == ["local", "second"]
            ctx_table = app.screen.query_one(DataTable)
            ctx_table.move_cursor(row=1)
            await pilot.press("enter")
            await until(pilot, lambda: app.contexts.current == "second", what="switched back")
            assert app.live is second

            await pilot.press("q")  # quitting says that both runs go on
            await pilot.pause()
        assert second.id in str(app.runs.quit_message) and first.id in " ".join(map(str, app.contexts.left))
        assert not os.path.exists(f"/proc/{first_watcher.pid}") or _zombie(first_watcher.pid)
    finally:
        await tear_down_every_run()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.fixture
def silent_port():
    """A loopback port that accepts and never answers (a login host whose sshd hangs)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    yield srv.getsockname()[1]
    srv.close()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def ssh_cluster(name: str, port: int) -> str:
    return f"""\
  {name}:
    launcher: ssh
    login: {{host: 127.0.0.1, port: {port}, known_hosts: /dev/null}}
    ssh: {{connect_timeout_s: 60}}
    nodes: [{{name: far-n01, addr: 127.0.0.1}}]
"""


async def test_a_cluster_that_does_not_answer_is_marked_and_never_holds_up_the_others(silent_port):
    write_clusters(ssh_cluster("gone", closed_port()) + ssh_cluster("hung", silent_port))
    app = make_app(ask_clusters=True)
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        assert app.contexts.reach["local"].answers and "●" in header(app)
        assert app.switch_context("gone")
        await until(pilot, lambda: "gone" in app.contexts.reach, what="gone asked")
        await pilot.pause()
        assert not app.contexts.reach["gone"].answers
        assert "ctx gone × no answer" in header(app)

        assert app.switch_context("hung")  # its check hangs (up to its timeout): nothing waits for it
        await pilot.pause()
        assert "hung" in app.contexts.asking and "hung" not in app.contexts.reach
        assert "ctx hung" in header(app) and "×1" in header(app)  # the other context that does not answer
        await pilot.press("5")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)  # keys go on while the cluster is asked
        assert app.switch_context("local")
        await pilot.pause()
        assert "ctx local ●" in header(app) and "hung" in app.contexts.asking

        await command(pilot, "ctx")
        rows = {r["name"]: r for r in app.screen.rows}
        assert rows["gone"]["answers"] is False and rows["local"]["answers"] is True
        assert rows["hung"]["answers"] is None and rows["second"]["open"] is False
        await pilot.press("escape")


async def test_runs_of_a_cluster_that_does_not_answer_are_marked_on_the_runs_view():
    write_clusters(ssh_cluster("gone", closed_port()))
    from tests.tui.fakerun import fake_run

    rd = fake_run("serving").rd
    rd.write_json("run.json", {**rd.meta(), "cluster": "gone"})  # a run recorded on the cluster that is gone
    app = make_app(ask_clusters=True)
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        await pilot.press("5")
        await settle(pilot)
        screen = app.screen
        assert "NO ANSWER" not in text_of(screen.query_one("#runs-summary"))  # not asked yet: not marked
        app.switch_context("gone")
        await until(pilot, lambda: "gone" in app.contexts.reach, what="gone asked")
        await pilot.pause()
        row = screen.query_one(DataTable).get_row_at(0)
        assert str(row[4]) == "gone ×"
        assert "gone: NO ANSWER" in text_of(screen.query_one("#runs-summary"))
        assert "does not answer" in text_of(screen.query_one("#runs-detail"))


async def test_an_unknown_context_is_said_and_nothing_changes():
    write_clusters()
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        await command(pilot, "ctx nowhere")
        assert app.contexts.current == "local" and app.contexts.names() == ["local"]
        assert any("no cluster named 'nowhere'" in n.message for n in app._notifications)
        await command(pilot, "runs")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)


async def test_opening_another_cluster_opens_its_context_and_keeps_this_ones_run():
    write_clusters()
    from tests.tui.fakerun import fake_run

    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        live = app.runs.attach(fake_run("serving"), watch=False)
        app.open_workspace("demo-2p1d", "second")  # the Open screen's choice
        await pilot.pause()
        assert app.contexts.current == "second" and app.live is None
        assert app.design.recipe.name == "demo-2p1d" and app.contexts.parked["local"].runs.live is live
        app.open_workspace("demo-1p1d", "local")  # back: the same context, its run, the recipe chosen
        await pilot.pause()
        assert app.contexts.names() == ["local", "second"] and app.live is live
        assert app.design.recipe.name == "demo-1p1d"
