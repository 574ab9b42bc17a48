"""pytest plugin for tests that need the real Slurm + SSH lab.

Load it once, from the top-level conftest (``tests/conftest.py``)::

    pytest_plugins = ["tests.cluster.fixtures"]

(with the repository root on ``sys.path``, e.g. ``pythonpath = ["."]`` under
``[tool.pytest.ini_options]``). It provides:

- the marker ``lab``: a test marked ``@pytest.mark.lab`` (or using the fixture, which marks it)
  runs only when the lab is usable;
- the session fixture ``lab`` -> ``tests.cluster.lab.Lab``. If the lab is not up and we are
  root, it runs ``tests/cluster/up.sh`` itself and runs ``down.sh`` at the end of the session
  (``ATOMDECK_LAB_KEEP=1`` keeps it up; ``ATOMDECK_LAB_AUTOSTART=0`` never starts it), unless
  another session still uses it (shared flock on ``$LAB/users.lock``). If the
  lab cannot be had, the test is skipped with the reason, except under ``CI=true``, where that
  is a failure.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile

import pytest

from .lab import Lab, LabStatus

_STATE: dict[str, object] = {"status": None, "started": False, "lock": None}


def _hold_shared(lab: Lab) -> None:
    """Hold a shared flock on $LAB/users.lock for the whole session: whoever wants to take the
    lab down (a session that started it, the lifecycle test, with-lab.sh) must get it exclusive,
    so a concurrent session's lab is never pulled from under it."""
    if _STATE["lock"] is None:
        lab.root.mkdir(parents=True, exist_ok=True)
        fh = open(lab.root / "users.lock", "a")
        fcntl.flock(fh, fcntl.LOCK_SH)
        _STATE["lock"] = fh


def lab_exclusive() -> bool:
    """Try to become the lab's only user (non-blocking). True: nobody else holds it; call
    ``lab_shared()`` when done. False: another session uses the lab, leave it alone."""
    fh = _STATE["lock"]
    if fh is None:
        return True
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fcntl.flock(fh, fcntl.LOCK_SH)  # a failed upgrade may have dropped the shared lock
        return False
    return True


def lab_shared() -> None:
    fh = _STATE["lock"]
    if fh is not None:
        fcntl.flock(fh, fcntl.LOCK_SH)


def lab_required_outcome(reason: str) -> None:
    """Skip with the reason, or fail under CI=true (CI must run the lab tests)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the Slurm lab is required under CI=true but unavailable: {reason}", pytrace=False)
    pytest.skip(f"Slurm lab unavailable: {reason}")


def _acquire() -> LabStatus:
    status = _STATE["status"]
    if isinstance(status, LabStatus):
        return status
    status = Lab.detect()
    if os.geteuid() == 0:
        _hold_shared(status.lab)
    if not status.ok and os.geteuid() == 0 and os.environ.get("ATOMDECK_LAB_AUTOSTART", "1") != "0":
        fd, log = tempfile.mkstemp(prefix="atomdeck-lab-up-", suffix=".log")
        try:
            proc = status.lab.up()
            out = proc.stdout + proc.stderr
            rc = proc.returncode
        except subprocess.TimeoutExpired as exc:
            out, rc = f"{exc}", -1
        with os.fdopen(fd, "w") as fh:
            fh.write(out)
        if rc == 0:
            _STATE["started"] = "already up" not in out
            status = Lab.detect()
        if not status.ok:
            tail = " | ".join(out.strip().splitlines()[-6:])
            status = LabStatus(status.lab, False, f"{status.reason}; up.sh exited {rc} (log {log}): {tail}")
    _STATE["status"] = status
    return status


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "lab: needs the real Slurm + SSH lab (tests/cluster/up.sh); skipped without it, "
        "a failure under CI=true",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # using the fixture marks the test, so `-m "not lab"` deselects it
        if "lab" in getattr(item, "fixturenames", ()) and item.get_closest_marker("lab") is None:
            item.add_marker(pytest.mark.lab)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("lab") is not None:
        status = _acquire()
        if not status.ok:
            lab_required_outcome(status.reason)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    status = _STATE["status"]
    if _STATE["started"] and isinstance(status, LabStatus) and os.environ.get("ATOMDECK_LAB_KEEP") != "1":
        if lab_exclusive():
            status.lab.down()
        _STATE["started"] = False
    fh = _STATE["lock"]
    if fh is not None:
        fh.close()
        _STATE["lock"] = None


@pytest.fixture(scope="session")
def lab() -> Lab:
    """The running lab (brought up if needed and possible; else skip, or fail under CI=true)."""
    status = _acquire()
    if not status.ok:
        lab_required_outcome(status.reason)
    return status.lab
