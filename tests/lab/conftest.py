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
