"""The Bench view shows the servers' own live rates (the metrics the watcher scrapes) beside the
client's figures (issue 15 item 6)."""

from __future__ import annotations

from atomdeck.tui.screens.bench import BenchScreen
from textual.widgets import Static

from tests.tui.conftest import make_app
from tests.tui.fakerun import fake_run
from tests.tui.runhelpers import until


async def test_bench_view_shows_the_servers_live_rates():
    app = make_app()
    async with app.run_test(size=(160, 50)) as pilot:
        await app.workers.wait_for_complete()
        run = fake_run("degraded")  # serving, with scraped metrics for the workers and the router
        app.runs.attach(run, watch=False)
        await pilot.press("6")
        await until(pilot, lambda: isinstance(app.screen, BenchScreen), what="the bench view")
        box = app.screen.query_one("#bench-server", Static)

        def shown() -> str:
            return str(box.render())

        await until(pilot, lambda: "prefill-0" in shown() and "router" in shown(), timeout=10,
                    what="the servers' rates")
        m = run.state.metrics
        assert f"{m['prefill-0']['prompt_tok_s']:,.0f} prompt tok/s" in shown()
        assert "req/s" in shown() and "err" in shown()
