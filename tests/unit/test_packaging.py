"""Packaging: every package of the source tree is listed, so `pip install .` (not only -e) works."""

from __future__ import annotations

import tomllib

from tests.conftest import ROOT

MAP = {"core": "atomdeck.core", "tui": "atomdeck.tui", "sim": "atomdeck.sim", "recipes": "atomdeck.recipes"}


def test_every_package_is_listed_in_pyproject():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(conf["packages"])
    found = set()
    for top, pkg in MAP.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            if "shim" in rel.parts:  # the simulator's shims are data on PATH/PYTHONPATH, not packages
                continue
            found.add(".".join([pkg, *rel.parts]))
    assert found == listed


def test_shims_are_package_data_and_executable():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "shim/**/*" in data["atomdeck.sim"]
    atomesh = ROOT / "sim" / "shim" / "bin" / "atomesh"
    assert atomesh.stat().st_mode & 0o111
    assert (ROOT / "sim" / "shim" / "atom" / "entrypoints" / "openai_server.py").is_file()
