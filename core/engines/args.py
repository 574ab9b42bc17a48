"""An ordered list of command-line options where a later setting of a flag replaces the earlier one.

Flags the orchestrator owns cannot be replaced by any other source (catalog, recipe, cluster);
such attempts are recorded as conflicts, which lint reports.
"""

from __future__ import annotations

import re
from typing import Any

from ..config.recipe import flag_of, normalize_flag

_NUMBER = re.compile(r"^-\d")
ALIASES = {"tp": "tensor-parallel-size"}
ORCHESTRATOR = "atomdeck"


def canonical(flag: str) -> str:
    key = normalize_flag(flag)
    return ALIASES.get(key, key)


def is_flag(token: str) -> bool:
    return token.startswith("-") and not _NUMBER.match(token) and token not in ("-", "--")


class Options:
    """Groups of [flag, values...], keyed by the flag's canonical spelling."""

    def __init__(self, owned: frozenset[str] = frozenset()) -> None:
        self._groups: list[tuple[list[str], str]] = []  # (tokens, source)
        self.owned = owned
        self.conflicts: list[tuple[str, str]] = []  # (flag as written, source that tried to set it)

    def _find(self, flag: str) -> int | None:
        key = canonical(flag)
        for i, (g, _) in enumerate(self._groups):
            if canonical(g[0]) == key:
                return i
        return None

    def set(self, flag: str, *values: Any, source: str = ORCHESTRATOR) -> None:
        """Set a flag (with its values), replacing an earlier setting in place."""
        if source != ORCHESTRATOR and canonical(flag) in self.owned:
            self.conflicts.append((flag, source))
            return
        group = [flag, *(str(v) for v in values)]
        i = self._find(flag)
        if i is None:
            self._groups.append((group, source))
        else:
            self._groups[i] = (group, source)

    def append(self, flag: str, *values: Any) -> None:
        """Add another occurrence of a repeatable flag (e.g. --prefill URL); orchestrator only."""
        self._groups.append(([flag, *(str(v) for v in values)], ORCHESTRATOR))

    def drop(self, flag: str, source: str = ORCHESTRATOR) -> None:
        if source != ORCHESTRATOR and canonical(flag) in self.owned:
            self.conflicts.append((flag, source))
            return
        i = self._find(flag)
        if i is not None:
            del self._groups[i]

    def add_tokens(self, tokens: list[str], source: str) -> None:
        """Add raw tokens such as ['--enable-dp-attention', '--kv_cache_dtype', 'fp8']."""
        current: list[str] | None = None
        for t in tokens:
            if is_flag(t):
                if current is not None:
                    self.set(*current, source=source)
                current = [t]
            elif current is None:
                raise ValueError(f"value {t!r} in {source} has no flag before it")
            else:
                current.append(t)
        if current is not None:
            self.set(*current, source=source)

    def add_recipe_args(self, args: dict[str, Any], source: str) -> None:
        """Recipe args: true -> bare flag, false -> remove the flag, list -> flag v1 v2, else flag value."""
        for key, value in args.items():
            flag = flag_of(key)
            if value is False:
                self.drop(flag, source)
            elif value is True:
                self.set(flag, source=source)
            elif isinstance(value, list):
                self.set(flag, *value, source=source)
            else:
                self.set(flag, value, source=source)

    def value(self, flag: str) -> list[str] | None:
        i = self._find(flag)
        return None if i is None else self._groups[i][0][1:]

    def tokens(self) -> list[str]:
        return [t for g, _ in self._groups for t in g]
