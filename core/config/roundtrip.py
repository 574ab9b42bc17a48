"""Write an edited recipe back over its file, keeping the user's comments, key order and quoting.

Only values that changed are replaced (ruamel.yaml's round-trip mode keeps everything else as written);
keys the edit added go at the end of their section, keys it removed go away.
"""

from __future__ import annotations

import io
from typing import Any

from .recipe import Recipe


def _same(old: Any, new: Any) -> bool:
    if old == new:
        return True
    # env values are text in the model: `N: 1` in the file and "1" in the model are the same setting
    return not isinstance(old, (dict, list, bool)) and not isinstance(new, (dict, list)) and str(old) == str(new)


def _merge(node: Any, full: dict, changed: dict) -> None:
    for key in list(node.keys()):
        if key not in full:
            del node[key]
        elif isinstance(node[key], dict) and isinstance(full[key], dict):
            _merge(node[key], full[key], changed.get(key) or {})
        elif not _same(node[key], full[key]):
            node[key] = full[key]
    for key, value in changed.items():
        if key not in node:
            node[key] = value


def recipe_yaml(recipe: Recipe, original: str | None = None) -> str:
    """The recipe as YAML: `original` (the file it came from) with only the changes applied, or a fresh
    rendering without keys left at their defaults when there is no original."""
    if not original or not original.strip():
        return recipe.to_yaml()
    from ruamel.yaml import YAML

    yaml = YAML()  # round-trip: comments, order, quotes and flow style survive
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap the user's long lines
    doc = yaml.load(original)
    if not isinstance(doc, dict):
        return recipe.to_yaml()
    _merge(doc, recipe.model_dump(mode="json"), recipe.model_dump(mode="json", exclude_defaults=True))
    out = io.StringIO()
    yaml.dump(doc, out)
    return out.getvalue()
