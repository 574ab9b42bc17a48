"""Lint findings as core reports them: what is wrong, and which key to change to what."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...core.design.findings import Finding
from ..hints import in_console
from ..palette import ICONS, severity_color


def summary(findings: list[Finding]) -> tuple[str, str]:
    """(severity, text) for a one-line status, e.g. ('error', '2 errors, 1 warning')."""
    errors = sum(1 for f in findings if f.severity == "error")
    warnings = len(findings) - errors
    if not findings:
        return "ok", "no findings"
    parts = [f"{errors} error{'s' * (errors != 1)}"] if errors else []
    if warnings:
        parts.append(f"{warnings} warning{'s' * (warnings != 1)}")
    return ("error" if errors else "warning"), ", ".join(parts)


class FindingsView(Static):
    """Errors first, then warnings; each with its `change KEY: FIX` line."""

    DEFAULT_CLASSES = "findings"

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("", id=id, classes=classes)
        self.findings: list[Finding] = []

    def show(self, findings: list[Finding], blocked_note: str = "errors block launch") -> None:
        self.findings = sorted(findings, key=lambda f: f.severity != "error")
        self.update(self._render_findings(blocked_note))

    def _render_findings(self, blocked_note: str) -> Text:
        app = self.app
        sev, head = summary(self.findings)
        out = Text()
        out.append(f"{ICONS[sev]} {head}", style=f"bold {severity_color(app, sev)}")
        if sev == "error":
            out.append(f" — {blocked_note}", style="bold")
        elif sev == "ok":
            out.append(" — ready to launch", style="bold")
        for f in self.findings:
            color = severity_color(app, f.severity)
            out.append("\n")
            out.append(f"{ICONS[f.severity]} {f.rule}", style=f"bold {color}")
            if f.node:
                out.append(f" [{f.node}]", style=color)
            out.append(f"  {f.message}")
            where, fix = in_console(f)
            out.append("\n    → change ", style="dim")
            out.append(where, style="bold")
            out.append(f": {fix}", style="dim")
        return out
