"""Lint findings as core reports them: what is wrong, and which key to change to what."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.widgets import Static

from ...core.design.findings import Finding
from ..hints import in_console
from ..palette import ICONS

BOLD = Style(bold=True)


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
    COMPONENT_CLASSES = {"findings--error", "findings--warning", "findings--ok"}
    DEFAULT_CSS = """
    FindingsView > .findings--error { color: $text-error; }
    FindingsView > .findings--warning { color: $text-warning; }
    FindingsView > .findings--ok { color: $text-success; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__("", id=id, classes=classes)
        self.findings: list[Finding] = []

    def show(self, findings: list[Finding], blocked_note: str = "errors block launch") -> None:
        self.findings = sorted(findings, key=lambda f: f.severity != "error")
        self.update(self._render_findings(blocked_note))

    def _render_findings(self, blocked_note: str) -> Text:
        sev, head = summary(self.findings)
        out = Text()
        out.append(f"{ICONS[sev]} {head}", style=BOLD + self._severity(sev))
        if sev == "error":
            out.append(f" — {blocked_note}", style="bold")
        elif sev == "ok":
            out.append(" — ready to launch", style="bold")
        for f in self.findings:
            color = self._severity(f.severity)
            out.append("\n")
            out.append(f"{ICONS[f.severity]} {f.rule}", style=BOLD + color)
            if f.node:
                out.append(f" [{f.node}]", style=color)
            out.append(f"  {f.message}")
            where, fix = in_console(f)
            out.append("\n    → change ", style="dim")
            out.append(where, style="bold")
            out.append(f": {fix}", style="dim")
        return out

    def _severity(self, severity: str) -> Style:
        return self.get_component_rich_style(f"findings--{severity}", partial=True, default=Style())
