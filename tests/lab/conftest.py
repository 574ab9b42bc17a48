"""Makes `pytest tests/lab` work on its own: puts the repository root on sys.path and loads the
lab plugin (tests.cluster.fixtures) unless the top-level conftest already did."""

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

_PLUGIN = "tests.cluster.fixtures"


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_PLUGIN):
        config.pluginmanager.import_plugin(_PLUGIN)


@pytest.fixture(autouse=True)
def _no_run_left_behind():
    """A lab test whose assertion fails inside its run (before it reaches its own teardown) would leave the
    run's job and ports to fail the next tests: after each test, every run it started (its own state
    directory lists only its runs) that is not stopped is torn down."""
    yield
    import asyncio

    from atomdeck.core.run.run import Run

    for meta in Run.list():
        if meta.get("status") == "stopped" or meta.get("fake"):
            continue
        try:
            asyncio.run(Run.open(meta["id"]).teardown(grace=3))
        except Exception as e:  # report, and keep tearing the others down
            print(f"leftover run {meta.get('id')}: teardown failed: {e}")
