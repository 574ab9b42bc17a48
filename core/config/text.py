"""Plain wording shared by every layer."""

from __future__ import annotations

from collections.abc import Sequence


def listed(items: Sequence[str], first: int) -> str:
    """The first `first` items joined by commas, and how many more: "a, b, c and 4 more"."""
    shown = ", ".join(items[:first])
    return shown + (f" and {len(items) - first} more" if len(items) > first else "")
