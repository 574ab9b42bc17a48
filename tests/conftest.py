"""Shared fixtures. The lab fixtures (real Slurm + sshd in network namespaces) live in tests/cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["tests.cluster.fixtures"]

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """Every test gets its own XDG dirs, so run directories and keymaps never leak between tests."""
    base = tmp_path_factory.mktemp("xdg")
    monkeypatch.setenv("XDG_STATE_HOME", str(base / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(base / "config"))
    monkeypatch.chdir(base)  # recipes/ in the cwd would shadow the shipped ones
    yield


def pytest_report_header(config):
    return f"atomdeck tests; CI={os.environ.get('CI', '')}; uid={os.getuid()}"
