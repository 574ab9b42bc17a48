"""Colours for roles and severities, taken from the current Textual theme (readable on any theme)."""

from __future__ import annotations

from textual.app import App

ROLE_VARS = {"prefill": "text-accent", "decode": "text-primary", "worker": "text-primary",
             "router": "text-success"}
SEVERITY_VARS = {"error": "text-error", "warning": "text-warning", "ok": "text-success"}
# Glyphs every terminal font (and Fira Code, for the screenshots) has.
ICONS = {"error": "×", "warning": "▲", "ok": "✓"}


def role_color(app: App, role: str) -> str:
    """A Rich colour for a role ('' for none, so the default text colour is used)."""
    var = ROLE_VARS.get(role)
    return app.theme_variables.get(var, "") if var else ""


def severity_color(app: App, severity: str) -> str:
    return app.theme_variables.get(SEVERITY_VARS.get(severity, ""), "")
