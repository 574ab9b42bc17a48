"""The glyphs of severities. Colours come from the widgets' COMPONENT_CLASSES, styled with theme variables."""

from __future__ import annotations

# Glyphs every terminal font (and Fira Code, for the screenshots) has.
ICONS = {"error": "×", "warning": "▲", "ok": "✓"}
