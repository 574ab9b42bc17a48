"""Findings: problems found before anything runs, each naming the key to change."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    rule: str  # stable id, e.g. "barrier-role-port"
    severity: Severity
    message: str  # what is wrong, concretely
    key: str  # the recipe or cluster key (or CLI option) to change
    fix: str  # what to change it to
    node: str | None = None

    def __str__(self) -> str:
        where = f" [{self.node}]" if self.node else ""
        return f"{self.severity}: {self.rule}{where}: {self.message} -> change {self.key}: {self.fix}"

    def to_json(self) -> dict:
        return asdict(self)


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)
