"""Errors that reach the user: each says what is wrong and what to change."""

from __future__ import annotations

from dataclasses import dataclass


class AtomdeckError(Exception):
    """A user-facing error. The CLI prints it without a traceback and exits 2."""


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a recipe or cluster file, located by key path (and line, when known)."""

    source: str  # file name or "<recipe>"
    path: str  # dotted key path, e.g. "prefill.tp"
    message: str  # what is wrong and what to change
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.path or '(top level)'}: {self.message}"


class ConfigError(AtomdeckError):
    """A recipe or cluster file that cannot be used. Holds every issue found, not just the first."""

    def __init__(self, issues: list[ConfigIssue]):
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


class PlanError(AtomdeckError):
    """A plan that cannot be built from the given recipe, cluster and nodes."""


class PreflightError(AtomdeckError):
    """Pre-flight found problems on the nodes: nothing was launched. `findings` name each node."""

    def __init__(self, findings: list):
        self.findings = findings
        super().__init__("pre-flight failed, nothing was launched: " +
                         "; ".join(f"{f.node}: {f.message}" for f in findings))
