"""A deployment being designed in the console: the recipe as edited, the nodes picked by hand
(in rank order) and the unhealthy nodes the operator overrode on purpose.

Pure and small: it records choices and hands them to `Workspace.assess`, exactly as the CLI does
with --nodes/--override, so the console and `atomdeck plan` always agree. Never imports Textual.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..config.errors import ConfigError, ConfigIssue
from ..config.recipe import Recipe
from .edit import set_field
from .lint import Assessment
from .plan import Selection, nodes_needed
from .workspace import Workspace


@dataclass(frozen=True)
class Design:
    recipe: Recipe
    nodes: tuple[str, ...] = ()  # picked by hand, rank order (prefill first); () = let core pick
    overrides: frozenset[str] = frozenset()  # unhealthy/excluded nodes allowed anyway

    @property
    def auto(self) -> bool:
        return not self.nodes

    def assess(self, ws: Workspace) -> Assessment:
        """The same call `atomdeck plan --nodes N --override O` makes."""
        return replace(ws, recipe=self.recipe).assess(list(self.nodes) or None, self.overrides)

    def toggle(self, node: str) -> Design:
        """Pick or unpick a node; a pick goes to the end of the rank order."""
        if node in self.nodes:
            return replace(self, nodes=tuple(n for n in self.nodes if n != node))
        return replace(self, nodes=(*self.nodes, node))

    def auto_pick(self) -> Design:
        """Forget the hand-picked nodes so core chooses usable nodes for the layout."""
        return replace(self, nodes=())

    def override(self, node: str, on: bool = True) -> Design:
        """Allow (and pick) an unhealthy node, or withdraw that (and unpick it)."""
        if on:
            nodes = self.nodes if node in self.nodes else (*self.nodes, node)
            return replace(self, overrides=self.overrides | {node}, nodes=nodes)
        return replace(self, overrides=self.overrides - {node},
                       nodes=tuple(n for n in self.nodes if n != node))

    def assign(self, node: str, role: str, selection: Selection | None) -> Design:
        """Move a chosen node into `role` by swapping it with that role's first node.

        Core gives the first nodes_needed['prefill'] nodes of the rank order to prefill and the
        next ones to decode, so a swap keeps every role's count. An auto pick becomes explicit.
        """
        order = list(self.nodes) or list(selection.all() if selection else ())
        need = nodes_needed(self.recipe)
        if role not in need:
            raise ValueError(f"this layout has no {role} role (roles: {', '.join(need)})")
        if node not in order:
            raise ValueError(f"{node} is not chosen; pick it first")
        start = 0
        for r, n in need.items():
            if r == role:
                break
            start += n
        i = order.index(node)
        if not start <= i < start + need[role]:
            if start < len(order):
                order[i], order[start] = order[start], order[i]
            else:  # that role has no node yet: this one becomes its first
                order.append(order.pop(i))
        return replace(self, nodes=tuple(order))


def apply_edits(recipe: Recipe, edits: Mapping[str, Any]) -> tuple[Recipe, dict[str, list[ConfigIssue]]]:
    """Apply key-path edits; one that is refused is retried after the others succeed.

    So "mode: aggregate" refused for "aggregate.workers is 0" goes through once the operator sets
    aggregate.workers. Returns the recipe with every edit that could be made, and the issues of
    the edits that could not (by key path); the recipe is always a valid one.
    """
    pending = dict(edits)
    issues: dict[str, list[ConfigIssue]] = {}
    progress = True
    while pending and progress:
        progress = False
        for path, value in list(pending.items()):
            try:
                recipe = set_field(recipe, path, value)
            except ConfigError as e:
                issues[path] = list(e.issues)
                continue
            del pending[path]
            issues.pop(path, None)
            progress = True
    return recipe, {p: issues[p] for p in pending}
