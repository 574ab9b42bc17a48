"""The dependency rule of docs/architecture.md, read from the code with `ast` (every import,
also the ones inside functions), and no import cycle inside core/."""

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


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every module the file imports (absolute names without the `atomdeck.` prefix), with the line."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path)
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


def test_no_import_cycle_inside_core():
    mods = {module_name(p): p for p in sources("core")}
    graph: dict[str, set[str]] = {}
    for m, p in mods.items():
        deps = set()
        for name, _ in imports_of(p):
            # the longest real module the name points to (a name may be an attribute of a module)
            parts = name.split(".")
            while parts and ".".join(parts) not in mods:
                parts.pop()
            target = ".".join(parts)
            if target and target != m and not m.startswith(target + ".") and target.startswith("core"):
                # a package's __init__ is imported on the way to its submodules; count only real edges
                if mods[target].name == "__init__.py" and mods[target].read_text().strip().startswith('"""') \
                        and len(mods[target].read_text().splitlines()) < 12:
                    continue
                deps.add(target)
        graph[m] = deps
    # Tarjan's strongly connected components
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles inside core/: {cycles}"


@pytest.mark.parametrize("top", ["core", "tui", "sim"])
def test_long_source_files_say_why(top):
    long = []
    for p in sources(top):
        lines = p.read_text().splitlines()
        if len(lines) > MAX_LINES and not any(line.startswith("# Long file:") for line in lines[:5]):
            long.append(f"{p.relative_to(ROOT)} ({len(lines)} lines)")
    assert not long, f"over {MAX_LINES} lines without a '# Long file: <reason>' first comment: {long}"
