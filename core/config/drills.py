"""Drills: the simulator's faults as a list a user can pick from (read from sim/drills.yaml).

The list is the simulator's own package data (core reads the file, never imports sim/): every fault
the simulator can inject, the environment that turns it on, which process reads it, and what an
operator sees.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .errors import AtomdeckError
from .paths import sim_drills_path

Applies = Literal["worker", "prefill", "router", "worker+router"]


class Drill(BaseModel):
    name: str
    env: dict[str, str]
    applies: Applies
    what: str
    look_for: list[str] = Field(default_factory=list)
    exit: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "what": self.what, "look_for": self.look_for, "applies": self.applies,
                "env": self.env, "exit": self.exit}


def load_drills(path: Path | None = None) -> list[Drill]:
    import yaml

    path = path or sim_drills_path()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise AtomdeckError(f"the simulator's drill list {path} cannot be read: {e}") from None
    return [Drill.model_validate({**d, "env": {k: str(v) for k, v in (d.get("env") or {}).items()}})
            for d in data.get("drills", [])]


def find_drill(name: str, drills: list[Drill] | None = None) -> Drill:
    import difflib

    drills = load_drills() if drills is None else drills
    for d in drills:
        if d.name == name:
            return d
    names = [d.name for d in drills]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    raise AtomdeckError(f"no drill named '{name}'" + (f"; did you mean {close[0]}?" if close else "")
                        + "; `atomdeck drill list` shows them all")
