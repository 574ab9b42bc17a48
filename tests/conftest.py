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
    _reap_local_runs(base / "state")


def _reap_local_runs(state: Path) -> None:
    """A test that failed or timed out half-way (pytest-timeout interrupts it before its own teardown) may
    leave a local run's simulators serving on the demo ports, and every later test that launches the demo
    would then fail on a port in use. Tear down whatever local run of this test still has a live process,
    and say so."""
    runs = state / "atomdeck" / "runs"
    if not runs.is_dir():
        return
    import asyncio
    import warnings
    from concurrent.futures import ThreadPoolExecutor

    from atomdeck.core.launch.procfs import is_ours
    from atomdeck.core.run.run import Run

    for d in sorted(runs.iterdir()):
        try:
            run = Run.open(d.name)
        except Exception:
            continue
        if run.cluster.launcher != "local":
            continue
        # by the run's marker in the process's environment: a fake run's made-up PIDs may be anyone's
        live = [h.name for h in run.handles.values() if h.pid and is_ours(h.pid, run.id, h.name)]
        if live:
            warnings.warn(f"run {d.name} was still running after the test ({', '.join(live)}): torn down",
                          stacklevel=1)
            with ThreadPoolExecutor(1) as ex:  # its own loop, whatever loop this thread may have running
                ex.submit(asyncio.run, run.teardown(grace=1)).result()


def pytest_report_header(config):
    return f"atomdeck tests; CI={os.environ.get('CI', '')}; uid={os.getuid()}"
