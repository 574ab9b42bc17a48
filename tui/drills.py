"""Drills in the console: the palette's "Drill: NAME" arms one simulator fault on the design."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.config.drills import Drill
from ..core.config.errors import AtomdeckError
from ..core.design.drills import aim, drilled, refuse_without_simulator

if TYPE_CHECKING:
    from .protocols import DrillHost


def start_drill(app: DrillHost, drill: Drill) -> None:
    """Put one simulator fault on the process it is about, say what to look for, then launch (asks)."""
    a = app.assessment
    try:
        refuse_without_simulator(app.workspace.cluster)
        if a.plan is None:
            raise AtomdeckError("no plan yet: the findings say what to change first")
        target = aim(drill, a.plan)
        recipe = drilled(app.design.recipe, target)
    except AtomdeckError as e:
        app.notify(str(e), title=f"Drill {drill.name}", severity="error")
        return
    app.set_design(replace(app.design, recipe=recipe))
    app.notify(f"{target.process} on {target.node} {drill.what}. Look for: " + "; ".join(drill.look_for),
               title=f"Drill {drill.name} (set in {target.key})", timeout=20)
    app.action_launch()
