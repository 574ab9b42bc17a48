"""Findings in the console's own words: core names CLI flags (--nodes, --override) and commands;
the console says which view and which key does the same."""

from __future__ import annotations

from ..core.design.findings import Finding

# CLI spelling -> where the console does it
_WHERE = {
    "--nodes": "the Nodes view (1): space picks a node, a auto-picks",
    "--override": "the Nodes view (1): o overrides the node under the cursor",
}
_PHRASES = [
    ("override explicitly if you know it is fine", "override it (o) if you know it is fine"),
    ("pick a healthy node,", "pick a healthy node (space),"),
    ("atomdeck nodes lists them", "the Nodes view (1) lists them"),
    ("--nodes", "the Nodes view (1)"),
    ("--override", "o on the Nodes view (1)"),
]


def console_key(key: str) -> str:
    """Where to make the change, as a console user does it."""
    if key in _WHERE:
        return _WHERE[key]
    if key.startswith(("cluster", "--")):
        return key
    return f"{key} (Layout view, 2; f for the fields)"


def console_fix(fix: str) -> str:
    for cli, console in _PHRASES:
        fix = fix.replace(cli, console)
    return fix


def in_console(f: Finding) -> tuple[str, str]:
    """(where, fix) for a finding shown in the console."""
    return console_key(f.key), console_fix(f.fix)
