"""The reading side of the srt-slurm import: a parsed file that remembers which keys were read (so an
unread key is refused as unknown), and the notes an import or export reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import ConfigError, ConfigIssue
from .recipe import Recipe
from .yamlio import YamlDoc

Kind = Literal["error", "warning", "cluster"]


@dataclass(frozen=True)
class Note:
    """One finding of an import or export, located by the srt-slurm key it is about."""

    kind: Kind  # error: refused; warning: not carried or different; cluster: set in your cluster file
    key: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line else ""
        lead = {"error": "refused", "warning": "note", "cluster": "set in your cluster file"}[self.kind]
        return f"{lead}: {where}{self.key or '(top level)'}: {self.message}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "key": self.key, "line": self.line, "message": self.message}


@dataclass
class Imported:
    """The result of an import: the recipe (None when something was refused) and every note."""

    source: str
    schema: int
    recipe: Recipe | None
    notes: list[Note] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.notes.sort(key=lambda n: n.line or 0)

    @property
    def errors(self) -> list[Note]:
        return [n for n in self.notes if n.kind == "error"]

    def raise_for_errors(self) -> Recipe:
        if self.errors or self.recipe is None:
            raise ConfigError([ConfigIssue(self.source, n.key, n.message, n.line) for n in self.errors])
        return self.recipe


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


class _Reader:
    """The parsed file plus what has been read of it: a key nobody read is unknown, and refused."""

    def __init__(self, doc: YamlDoc):
        self.doc = doc
        self.notes: list[Note] = []
        self._taken: set[tuple] = set()
        self._opened: set[tuple] = {()}

    def get(self, *path: Any, default: Any = None) -> Any:
        node: Any = self.doc.data
        for p in path:
            if not isinstance(node, dict) or p not in node:
                return default
            node = node[p]
        return node

    def has(self, *path: Any) -> bool:
        sentinel = object()
        return self.get(*path, default=sentinel) is not sentinel

    def take(self, *path: Any, default: Any = None) -> Any:
        """Read a value and everything under it."""
        self._taken.add(path)
        return self.get(*path, default=default)

    def section(self, *path: Any) -> dict:
        """Open a mapping whose keys are read one by one; it must be a mapping."""
        value = self.get(*path)
        if value is None:
            self._taken.add(path)
            return {}
        if not isinstance(value, dict):
            self.error(path, f"must be a mapping of keys to values, got {value!r}")
            self._taken.add(path)
            return {}
        self._opened.add(path)
        return value

    def line(self, path: tuple) -> int | None:
        return self.doc.line_of(path)

    def note(self, kind: Kind, path: tuple, message: str) -> None:
        self.notes.append(Note(kind, _dotted(path), message, self.line(path)))

    def error(self, path: tuple, message: str) -> None:
        self.note("error", path, message)

    def warn(self, path: tuple, message: str) -> None:
        self.note("warning", path, message)

    def cluster(self, path: tuple, message: str) -> None:
        self.note("cluster", path, message)

    def unread(self) -> list[tuple]:
        """Paths of keys that no rule read, in file order."""
        out: list[tuple] = []

        def walk(node: Any, path: tuple) -> None:
            if not isinstance(node, dict):
                return
            for k, v in node.items():
                p = (*path, k)
                if p in self._taken:
                    continue
                if p in self._opened:
                    walk(v, p)
                else:
                    out.append(p)

        walk(self.doc.data, ())
        return out


def _int(r: _Reader, path: tuple, minimum: int = 0) -> int | None:
    value = r.take(*path)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        r.error(path, f"must be a whole number of at least {minimum}, got {value!r}")
        return None
    return value


def _text(value: Any) -> str:
    """A value as srt-slurm puts it on a command line or into the environment (Python's str())."""
    return str(value)
