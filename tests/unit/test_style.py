"""The house rules that a machine can check: ruff clean, mypy clean on core/, and core never imports Textual."""

from __future__ import annotations

import re
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


def test_core_never_imports_textual_and_tui_never_talks_to_nodes():
    for f in (ROOT / "core").rglob("*.py"):
        assert not re.search(r"^\s*(from|import) textual", f.read_text(), re.M), f
    for f in (ROOT / "tui").rglob("*.py"):
        text = f.read_text()
        for forbidden in ("core.launch", "core.shell", "core.sshconn", "core.remote_"):
            assert forbidden not in text, f"{f} uses {forbidden}"


def test_sim_imports_nothing_from_core():
    for f in (ROOT / "sim").rglob("*.py"):
        assert not re.search(r"(from|import) (atomdeck\.core|\.\.core)", f.read_text()), f
