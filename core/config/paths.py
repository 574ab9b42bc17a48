"""Where things live: shipped recipes and clusters, the model catalog, the simulator, run directories."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import AtomdeckError

_PKG = Path(__file__).resolve().parents[2]  # the directory holding core/, sim/, recipes/ (or atomdeck/)


def recipes_dir() -> Path:
    """The shipped recipes (recipes/ in a checkout, atomdeck/recipes when installed)."""
    return _PKG / "recipes"


def catalog_path() -> Path:
    return Path(os.environ.get("ATOMDECK_MODELS", recipes_dir() / "models.yaml"))


def sim_shim_dir() -> Path:
    """The simulator's shim directory (never imported by core; only put on PATH/PYTHONPATH)."""
    return _PKG / "sim" / "shim"


def sim_drills_path() -> Path:
    """The simulator's list of faults (package data of sim/, read as a file)."""
    return _PKG / "sim" / "drills.yaml"


def config_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "atomdeck"


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "atomdeck"


def runs_dir() -> Path:
    return state_dir() / "runs"


def _search(kind: str, name: str, dirs: list[Path]) -> Path:
    p = Path(name).expanduser()
    if p.suffix in (".yaml", ".yml") or os.sep in name:
        if p.is_file():
            return p
        raise AtomdeckError(f"{kind} file {name} does not exist; give a path to a .yaml file or a {kind} name")
    for d in dirs:
        for ext in (".yaml", ".yml"):
            cand = d / f"{name}{ext}"
            if cand.is_file():
                return cand
    known = sorted({f.stem for d in dirs if d.is_dir() for f in d.glob("*.y*ml") if f.stem != "models"})
    raise AtomdeckError(f"no {kind} named '{name}'; known {kind}s: {', '.join(known) or '(none)'} "
                        f"(searched {', '.join(str(d) for d in dirs)})")


def find_recipe(name: str) -> Path:
    return _search("recipe", name, [Path.cwd() / "recipes", config_dir() / "recipes", recipes_dir()])


def find_cluster(name: str) -> Path:
    return _search("cluster", name, [Path.cwd() / "recipes" / "clusters", config_dir() / "clusters",
                                      recipes_dir() / "clusters"])


def shipped_recipes() -> list[Path]:
    return sorted(p for p in recipes_dir().glob("*.yaml") if p.stem != "models")


def shipped_clusters() -> list[Path]:
    return sorted((recipes_dir() / "clusters").glob("*.yaml"))
