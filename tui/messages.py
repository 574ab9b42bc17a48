"""The console's messages: small dataclasses (toolong's habit)."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from ..core.design.lint import Assessment


@dataclass
class LaunchRequested(Message):
    """The operator asked to launch this assessment (it had no errors and was confirmed).

    The App hands it to `app.launch_handler`: by default the run controller's launch_run (core's
    Run.launch, then the run view); tests give their own.
    """

    assessment: Assessment


@dataclass
class InventoryUpdated(Message):
    """A refresh of the node inventory finished (whether or not anything changed)."""

    changed: bool
    note: str


@dataclass
class RunUpdated(Message):
    """The attached run's state or logs changed since the last pulse (at most ten a second)."""

    version: int

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, RunUpdated)
