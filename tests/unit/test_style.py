"""The house rules that a machine can check: ruff clean and mypy clean on core/ (the import rules are
in test_layers.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys

from tests.conftest import ROOT


def test_ruff_is_clean():
    ruff = shutil.which("ruff", path=str(ROOT / ".venv" / "bin")) or shutil.which("ruff")
    if ruff is None:
        ruff_cmd = [sys.executable, "-m", "ruff"]
    else:
        ruff_cmd = [ruff]
    p = subprocess.run([*ruff_cmd, "check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-1000:]


def test_mypy_is_clean_on_core():
    """The config is [tool.mypy] in pyproject.toml (files = core/, the pydantic plugin)."""
    mypy = shutil.which("mypy", path=str(ROOT / ".venv" / "bin")) or shutil.which("mypy")
    cmd = [mypy] if mypy else [sys.executable, "-m", "mypy"]
    p = subprocess.run([*cmd, "--no-incremental", "--cache-dir=/dev/null"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and "Success" in p.stdout, p.stdout[-4000:] + p.stderr[-1000:]


