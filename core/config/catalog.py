"""The model catalog: per-model ATOM flags and env, like InferenceX's models_atom.yaml.

Values may be written as YAML lists or, as InferenceX writes them, as space-separated strings.
"""

from __future__ import annotations

import fnmatch
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import ConfigError, ConfigIssue
from .recipe import Recipe, _env_check
from .yamlio import read_yaml


def _flags(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return shlex.split(v)
    if isinstance(v, list) and all(isinstance(x, (str, int, float)) for x in v):
        return [str(x) for x in v]
    raise ValueError("must be a list of flags or a space-separated string of flags")


def _env(v: Any) -> dict[str, str]:
    if v is None:
        return {}
    if isinstance(v, str):
        pairs = {}
        for item in shlex.split(v):
            if "=" not in item:
                raise ValueError(f"{item!r} is not KEY=VALUE")
            k, val = item.split("=", 1)
            pairs[k] = val
        v = pairs
    if not isinstance(v, dict):
        raise ValueError("must be a mapping or a space-separated string of KEY=VALUE")
    return _env_check(v)


class ModelEntry(BaseModel):
    """One model's settings. Role-specific flag lists override the shared ones."""

    model_config = ConfigDict(extra="forbid")

    match: list[str] = Field(default_factory=list, description="globs on model.path")
    env: dict[str, str] = Field(default_factory=dict)
    kv_cache_flags: list[str] = Field(default_factory=list)
    tp_dp_flags: list[str] = Field(default_factory=list)
    prefill_tp_dp_flags: list[str] | None = None
    decode_tp_dp_flags: list[str] | None = None
    tp_dp_env: dict[str, str] = Field(default_factory=dict)
    ep_dp_flags: list[str] = Field(default_factory=list)
    prefill_ep_dp_flags: list[str] | None = None
    decode_ep_dp_flags: list[str] | None = None
    ep_dp_env: dict[str, str] = Field(default_factory=dict)
    mtp_flags: list[str] = Field(default_factory=list)
    online_quant_config: str | None = None
    online_quant_dpa_config: str | None = None
    block_size: int = 16
    mem_frac_static: float = 0.85
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    extra_flags: list[str] = Field(default_factory=list)

    @field_validator("env", "tp_dp_env", "ep_dp_env", mode="before")
    @classmethod
    def _envs(cls, v: Any) -> dict[str, str]:
        return _env(v)

    @field_validator("kv_cache_flags", "tp_dp_flags", "prefill_tp_dp_flags", "decode_tp_dp_flags", "ep_dp_flags",
                     "prefill_ep_dp_flags", "decode_ep_dp_flags", "mtp_flags", "extra_flags", mode="before")
    @classmethod
    def _flag_lists(cls, v: Any) -> list[str] | None:
        return None if v is None else _flags(v)

    def parallel_flags(self, role: str, dp_attention: bool, expert_parallel: bool) -> list[str]:
        """The DP-attention / EP flags for a role (as server_atom.sh picks them)."""
        if expert_parallel:
            specific = self.prefill_ep_dp_flags if role == "prefill" else self.decode_ep_dp_flags
            return list(specific if specific is not None else self.ep_dp_flags)
        if dp_attention:
            specific = self.prefill_tp_dp_flags if role == "prefill" else self.decode_tp_dp_flags
            return list(specific if specific is not None else self.tp_dp_flags)
        return []

    def parallel_env(self, dp_attention: bool, expert_parallel: bool) -> dict[str, str]:
        if expert_parallel:
            return dict(self.ep_dp_env)
        if dp_attention:
            return dict(self.tp_dp_env)
        return {}


GENERIC = ModelEntry()  # used when the catalog has no entry: ATOM's defaults as server_atom.sh sets them


class Catalog(BaseModel):
    model_config = ConfigDict(extra="forbid")
    models: dict[str, ModelEntry] = Field(default_factory=dict)
    source: str = ""

    def lookup(self, recipe: Recipe) -> tuple[str | None, ModelEntry]:
        """(catalog key, entry) for a recipe: model.catalog if set, else the first entry whose globs match."""
        if recipe.model.catalog:
            if recipe.model.catalog not in self.models:
                raise ConfigError([ConfigIssue(
                    "<recipe>", "model.catalog",
                    f"'{recipe.model.catalog}' is not in the model catalog ({self.source}); "
                    f"use one of: {', '.join(sorted(self.models)) or '(empty)'}")])
            return recipe.model.catalog, self.models[recipe.model.catalog]
        path = recipe.model.path
        base = path.rstrip("/").rsplit("/", 1)[-1]
        for key, entry in self.models.items():
            if key == base or any(fnmatch.fnmatchcase(path, g) for g in entry.match):
                return key, entry
        return None, GENERIC


def parse_catalog(data: Any, source: str) -> Catalog:
    from .yamlio import YamlDoc, validate

    if isinstance(data, dict) and "models" not in data:
        data = {"models": data}
    cat = validate(Catalog, YamlDoc(data, None, source))
    cat.source = source
    return cat


@lru_cache(maxsize=8)
def load_catalog(path: Path) -> Catalog:
    doc = read_yaml(path)
    return parse_catalog(doc.data, str(path))
