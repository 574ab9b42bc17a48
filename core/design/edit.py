"""Editing a recipe by key path, as the console does: every edit is validated like a loaded file."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..config.errors import ConfigError, ConfigIssue
from ..config.recipe import Recipe, check_recipe


def get_field(recipe: Recipe, path: str) -> Any:
    obj: Any = recipe
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part)
    return obj


def set_field(recipe: Recipe, path: str, value: Any) -> Recipe:
    """A new recipe with `path` (e.g. "prefill.workers") set to value; raises ConfigError naming the key."""
    parts = path.split(".")
    data = recipe.model_dump()
    cur = data
    for part in parts[:-1]:
        if not isinstance(cur.get(part), dict):
            cur[part] = {}
        cur = cur[part]
    cur[parts[-1]] = value.model_dump() if isinstance(value, BaseModel) else value
    try:
        return check_recipe(Recipe.model_validate(data))
    except ConfigError:
        raise
    except Exception as e:  # pydantic ValidationError: reuse the file loader's wording
        from ..config.yamlio import YamlDoc, validate

        try:
            validate(Recipe, YamlDoc(data, None, "<edit>"))
        except ConfigError as ce:
            raise ce from None
        raise ConfigError([ConfigIssue("<edit>", path, str(e))]) from None
