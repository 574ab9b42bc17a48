"""The dependency rule of docs/architecture.md, read from the code with `ast` (every import: at module level,
inside functions and under `if TYPE_CHECKING:`), and no import cycle inside core/ or tui/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PURE = ("core.config", "core.design", "core.engines")
# package -> the core packages it must never import
FORBIDDEN = {
    "core.config": ("core.remote", "core.launch", "core.run", "core.measure", "core.cli"),
    "core.design": ("core.remote", "core.launch", "core.run", "core.measure", "core.cli"),
    "core.engines": ("core.remote", "core.launch", "core.run", "core.measure", "core.cli"),
    "core.remote": ("core.launch", "core.run", "core.measure", "core.cli"),
    "core.launch": ("core.run", "core.measure", "core.cli"),
    "core.run": ("core.measure", "core.cli"),
    "core.measure": ("core.launch", "core.remote", "core.cli"),
    "core.cli": ("core.launch", "core.remote"),
    "tui": ("core.launch", "core.remote"),
}
MAX_LINES = 450  # a longer source file says why in its first comment: "# Long file: <reason>"


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path = ROOT) -> list[tuple[str, int]]:
    """Every module the file imports (absolute names without the `atomdeck.` prefix), with the line."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path, root)
    package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
            # `from . import x` may import the submodule x
            found += [(f"{target}.{a.name}", node.lineno) for a in node.names]
    out = []
    for name, line in found:
        if name.startswith("atomdeck."):
            name = name[len("atomdeck."):]
        out.append((name, line))
    return out


def sources(*tops: str) -> list[Path]:
    return sorted(p for t in tops for p in (ROOT / t).rglob("*.py"))


def inside(name: str, pkg: str) -> bool:
    return name == pkg or name.startswith(pkg + ".")


def real_modules() -> set[str]:
    return {module_name(p) for p in sources("core", "tui", "sim")}


def test_every_import_follows_the_dependency_rule():
    bad = []
    for path in sources("core", "tui", "sim"):
        me = module_name(path)
        for name, line in imports_of(path):
            where = f"{path.relative_to(ROOT)}:{line} imports {name}"
            if me.startswith("core") and (name.startswith("textual") or inside(name, "tui")):
                if not ((me == "core.cli.main" and name == "tui.app.run_console") or (name == "tui.app"
                        and me == "core.cli.main")):
                    bad.append(where + " (core never imports Textual or tui/)")
            if me.startswith("core") and inside(name, "sim"):
                bad.append(where + " (core only knows the simulator's directory)")
            if me.startswith("sim") and inside(name, "core"):
                bad.append(where + " (sim/ imports nothing from core/)")
            if inside(me, "core.config") or inside(me, "core.design") or inside(me, "core.engines"):
                if name.split(".")[0] == "asyncio":
                    bad.append(where + " (pure packages do no I/O and no asyncio)")
            for pkg, banned in FORBIDDEN.items():
                if inside(me, pkg):
                    bad += [where + f" ({pkg} must not import {b})" for b in banned if inside(name, b)]
    assert not bad, "\n".join(bad)


def test_the_rule_catches_what_the_old_substring_test_let_through(tmp_path):
    """The check reads imports, not substrings: `from ..core import sshconn`-style imports count."""
    f = ROOT / "tui" / "_layer_probe_tmp.py"
    f.write_text("from ..core import remote\nfrom ..core.remote import probes\n")
    try:
        names = [n for n, _ in imports_of(f)]
    finally:
        f.unlink()
    assert "core.remote" in names and "core.remote.probes" in names


def import_graph(tops: tuple[str, ...], root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of `tops` it imports, by exact name: `from .x import y` is an edge to x (and to x.y
    if that is a module), `from . import y` an edge to the package (its `__init__`) and to y. A package's
    `__init__` is a module like any other: importing its children is an edge to each of them, and a child that
    imports a name from its package (`from . import Base`) is an edge back to it."""
    mods = {module_name(p, root): p for t in tops if (root / t).is_dir() for p in (root / t).rglob("*.py")}
    return {m: {name for name, _ in imports_of(p, root) if name in mods and name != m} for m, p in mods.items()}


def cycles_of(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("top", ["core", "tui"])
def test_no_import_cycle(top):
    """New keys and views land in a house without circles: no module of core/ or tui/ reaches itself again
    through its imports, whether at module level, inside a function or for type checking only."""
    found = [c for c in cycles_of(import_graph(("core", "tui"))) if c[0].split(".")[0] == top]
    assert not found, f"import cycles inside {top}/: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_sees_every_kind_of_import(tmp_path):
    """The check is not blind to the imports a circle hides in: a package's `__init__` importing its child
    inside a function, the child importing its package only under TYPE_CHECKING; and one across packages."""
    pkg = tmp_path / "core" / "reg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("class Base: ...\n\ndef known():\n    from . import child  # noqa\n")
    (pkg / "child.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import Base\n")
    (pkg / "leaf.py").write_text("from .child import x\n")  # a sibling import is no edge to the package
    views = tmp_path / "tui" / "screens"
    views.mkdir(parents=True)
    (views / "__init__.py").write_text("")
    (tmp_path / "tui" / "__init__.py").write_text("")
    (tmp_path / "tui" / "app.py").write_text("def show():\n    from .screens.view import View\n")
    (views / "view.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..app import App\n")
    graph = import_graph(("core", "tui"), tmp_path)
    assert graph["core.reg.leaf"] == {"core.reg.child"}
    assert cycles_of(graph) == [["core.reg", "core.reg.child"], ["tui.app", "tui.screens.view"]]


# tui/ is layered top-down: the app (and the helpers it alone uses: the run controller, drills) -> screens ->
# widgets -> pure helpers. A screen reaches the app through the protocols it is handed (tui/protocols.py) or
# messages it posts, never by importing it.
TUI_ABOVE = {
    "tui.screens": ("tui.app", "tui.run_control", "tui.drills"),
    "tui.widgets": ("tui.app", "tui.run_control", "tui.drills", "tui.screens"),
}


def test_tui_screens_never_import_the_app_and_widgets_never_import_screens():
    bad = []
    for path in sources("tui"):
        me = module_name(path)
        for pkg, above in TUI_ABOVE.items():
            if inside(me, pkg):
                bad += sorted({f"{path.relative_to(ROOT)}:{line} imports {a} ({pkg} must not)"
                               for name, line in imports_of(path) for a in above if inside(name, a)})
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("top", ["core", "tui", "sim"])
def test_long_source_files_say_why(top):
    long = []
    for p in sources(top):
        lines = p.read_text().splitlines()
        if len(lines) > MAX_LINES and not any(line.startswith("# Long file:") for line in lines[:5]):
            long.append(f"{p.relative_to(ROOT)} ({len(lines)} lines)")
    assert not long, f"over {MAX_LINES} lines without a '# Long file: <reason>' first comment: {long}"
