"""The Snapshot view (issue 39): S on the Run view and the palette open it and a snapshot is taken as a worker;
the groups with the odd ones first, each rank's stack on enter, c compares (stuck / moved / idle per group), the
bundle's path. The snapshots shown are core's, of a real hung run (fakesnap.py); the run is a fake one
(fakerun.py: nothing started)."""

from __future__ import annotations

from atomdeck.core.run.run import make_launcher
from atomdeck.tui.screens.snapshot import SnapshotScreen
from atomdeck.tui.widgets.vtable import VirtualTable

from .conftest import FIXED_TIME, make_app, ready
from .fakerun import fake_run
from .fakesnap import fake_snapshots
from .runhelpers import BIG, text_of, until


async def attached(pilot, scenario: str = "hung"):
    app = pilot.app
    await ready(pilot)
    run = fake_run(scenario)
    app.runs.attach(run, watch=False)
    app.switch_mode("run")
    await pilot.pause()
    return run


def rows(screen: SnapshotScreen) -> list[str]:
    table = screen.query_one(VirtualTable)
    return [" ".join(" ".join(c.plain for c in table.get_row_at(i)).split()) for i in range(table.row_count)]


async def test_groups_odd_first_stacks_on_enter_and_the_comparison():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run = await attached(pilot)
        shots = fake_snapshots(run.id, FIXED_TIME.timestamp() - 2, str(run.rd.path))
        app.push_screen(SnapshotScreen(app.live, shots[:1]))
        await until(pilot, lambda: isinstance(app.screen, SnapshotScreen) and app.screen.query(VirtualTable),
                    what="the snapshot view")
        screen = app.screen
        await pilot.pause()
        got = rows(screen)
        assert got[0] == "odd decode-0 TP7 recv_from_peer <- all_reduce <- execute_model", got
        assert "decode-0 TP0–TP6 wait_forever <- wait_for_peers <- all_reduce" in got
        head = text_of(screen.query_one("#snap-head"))
        assert "3 processes, 21 python processes and ranks on 2 node(s)" in head and "c: take another" in head
        assert text_of(screen.query_one("#snap-foot")).startswith(f"bundle: {run.rd.path}/snapshots/")

        detail = text_of(screen.query_one("#snap-detail"))  # the cursor's group: its first rank
        assert "ATOM::TP7" in detail and "recv_from_peer" in detail and "syscall recvfrom" in detail
        await pilot.press("down", "down", "down", "down", "down", "down")
        assert rows(screen)[screen.query_one(VirtualTable).cursor_row].endswith("TP0–TP6 wait_forever <- "
                                                                                "wait_for_peers <- all_reduce")
        assert "… and 6 more with the same stack (enter shows each)" in text_of(screen.query_one("#snap-detail"))
        await pilot.press("enter")
        detail = text_of(screen.query_one("#snap-detail"))
        assert all(f"ATOM::TP{i}" in detail for i in range(7)) and detail.count("wait_for_peers") == 7

        screen.shots = shots  # (as c leaves them: the one before and the new one)
        screen._draw()
        await pilot.pause()
        got = rows(screen)
        assert got[0].startswith("odd stuck decode-0 TP7")
        assert any(r.startswith("stuck decode-0 TP0–TP6") for r in got)
        assert any(r.startswith("idle prefill-0 TP0–TP7") for r in got)
        assert "stuck decode-0 TP0–TP7, server, EngineCore" in text_of(screen.query_one("#snap-head"))
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SnapshotScreen)


async def test_S_on_the_run_view_takes_a_snapshot_as_a_worker_and_says_what_it_found():
    """A fake run's processes were never started here (no pids): core's snapshot says so for each, the view
    shows it, and c takes the second one."""
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        run = await attached(pilot)
        run.launcher = make_launcher(run.cluster, run.id, str(run.rd.path))  # (a fake run has none)
        for h in run.handles.values():
            h.pid = 0
        await pilot.press("S")
        await until(pilot, lambda: isinstance(app.screen, SnapshotScreen), what="the snapshot view")
        screen = app.screen
        await until(pilot, lambda: screen.taking or screen.shots, what="the snapshot to start")
        await until(pilot, lambda: screen.shots and not screen.taking, what="the snapshot")
        snap = screen.shots[0]
        assert {p.name: p.error for p in snap.procs} == {n: "never started (no handle)" for n in run.processes}
        assert snap.bundle and (run.rd.path / "snapshots").is_dir()
        await pilot.press("c")
        await until(pilot, lambda: len(screen.shots) == 2 and not screen.taking, what="the second snapshot")
        assert "compared with the snapshot" in text_of(screen.query_one("#snap-head"))


async def test_the_palette_offers_it_with_a_run_attached_only():
    app = make_app()
    async with app.run_test(size=BIG) as pilot:
        await ready(pilot)
        names = [c.title for c in app.get_system_commands(app.screen)]
        assert "Snapshot: where every rank is" not in names
        await attached(pilot)
        names = [c.title for c in app.get_system_commands(app.screen)]
        assert "Snapshot: where every rank is" in names
