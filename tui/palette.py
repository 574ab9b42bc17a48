"""Colours of the run view's panels (roles, barrier cells, statuses) from the current Textual theme; the glyphs
of severities. The other views colour through their widgets' COMPONENT_CLASSES, styled with theme variables."""

from __future__ import annotations

from textual.app import App

ROLE_VARS = {"prefill": "text-accent", "decode": "text-primary", "worker": "text-primary",
             "router": "text-success"}
# Glyphs every terminal font (and Fira Code, for the screenshots) has.
ICONS = {"error": "×", "warning": "▲", "ok": "✓"}


def role_color(app: App, role: str) -> str:
    """A Rich colour for a role ('' for none, so the default text colour is used)."""
    var = ROLE_VARS.get(role)
    return app.theme_variables.get(var, "") if var else ""


# Run view: barrier cells, the status badge.
CELL_STYLE = {"open": ("●", "text-success"), "waiting": ("○", "text-muted"), "refused": ("○", "text-muted"),
              "timeout": ("◐", "text-warning"), "closed": ("×", "text-error")}
STATUS_BG = {"launching": "accent", "starting": "accent", "serving": "success", "degraded": "warning",
             "failed": "error",
             "stopping": "warning", "stopped": "panel", "dirty": "error"}


def var_color(app: App, var: str, fallback: str = "") -> str:
    """A theme variable as a colour Rich can parse (8-digit hex loses its alpha; 'auto' falls back)."""
    value = app.theme_variables.get(var, "") or fallback
    if value.startswith("#") and len(value) == 9:
        value = value[:7]
    if value.startswith("auto") or " " in value:
        return fallback
    return value
