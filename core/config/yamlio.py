"""YAML loading and pydantic validation that report problems by key path and line."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError, ConfigIssue

M = TypeVar("M", bound=BaseModel)


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (a silent override is a classic recipe bug)."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode):  # `? [a, b]`: a Python dict cannot hold it
            kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a name, not a {kind}; write it as `name: value`", key_node.start_mark)
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None,
                f"key {key!r} appears twice (first on line {seen[key] + 1}); keep one",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


class YamlDoc:
    """A parsed YAML document plus its node tree, for line lookups."""

    def __init__(self, data: Any, root: yaml.Node | None, source: str):
        self.data = data
        self.root = root
        self.source = source

    def line_of(self, path: tuple) -> int | None:
        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for part in path:
            if isinstance(node, yaml.MappingNode):
                for k, v in node.value:
                    if isinstance(k, yaml.ScalarNode) and k.value == str(part):
                        line, node = k.start_mark.line + 1, v
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        return line


def parse_yaml(text: str, source: str) -> YamlDoc:
    """Parse YAML text; syntax errors become a ConfigError that names the line."""
    if "\x00" in text:
        raise ConfigError([ConfigIssue(source, "", "is not a text file (contains NUL bytes); give a YAML file")])
    try:
        root = yaml.compose(text, Loader=_Loader)
        data = yaml.load(text, Loader=_Loader)
    except yaml.constructor.ConstructorError as e:  # our duplicate-key message is already plain
        mark = e.problem_mark or e.context_mark
        raise ConfigError([ConfigIssue(source, "", f"is not valid YAML: {e.problem}",
                                       mark.line + 1 if mark else None)]) from None
    except yaml.MarkedYAMLError as e:
        from .yamlerrors import explain

        line, plain = explain(text, e)
        raise ConfigError([ConfigIssue(source, "", f"is not valid YAML: {plain}", line)]) from None
    except yaml.YAMLError as e:
        raise ConfigError([ConfigIssue(source, "", f"is not valid YAML: {e}")]) from None
    return YamlDoc(data, root, source)


def read_yaml(path: Path) -> YamlDoc:
    """Read and parse a YAML file; unreadable files become a ConfigError."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise ConfigError([ConfigIssue(str(path), "", f"cannot be read: {e.strerror or e}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError([ConfigIssue(str(path), "", "is not UTF-8 text; give a YAML file")]) from None
    return parse_yaml(text, str(path))


def _fmt_path(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _explain(err: Mapping[str, Any], model: type[BaseModel]) -> str:
    """Turn one pydantic error into a sentence that says what to change."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == "extra_forbidden":
        known = _known_keys(model, err["loc"][:-1])
        hint = ""
        if known:
            # only a really close name is a suggestion ('polcy' -> 'policy'; 'nodes' is not 'mode')
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1, cutoff=0.75)
            hint = f"; did you mean '{close[0]}'?" if close else f"; known keys: {', '.join(sorted(known))}"
            if err["loc"] == ("nodes",) and "placement" in known:  # the most common recipe mistake
                hint = ("; a recipe names no nodes (they are picked when you plan, from the cluster); "
                        "placement.prefill / placement.decode pin roles to nodes")
        return f"unknown key; remove it{hint}"
    if kind == "missing":
        return "is required; add it"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be a whole number, got {_short(got)}"
    if kind in ("float_parsing", "float_type"):
        return f"must be a number, got {_short(got)}"
    if kind in ("bool_parsing", "bool_type"):
        return f"must be true or false, got {_short(got)}"
    if kind in ("string_type",):
        return f"must be a text value, got {_short(got)}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys to values, got {_short(got)}"
    if kind in ("list_type",):
        return f"must be a list, got {_short(got)}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {_short(got)}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}, got {_short(got)}"
    if kind == "greater_than":
        return f"must be greater than {ctx.get('gt')}, got {_short(got)}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}, got {_short(got)}"
    if kind == "string_pattern_mismatch":
        return f"has an invalid form {_short(got)}; it must match {ctx.get('pattern')}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "value_error":
        return str(ctx.get("error", err["msg"]))
    return f"{err['msg']} (got {_short(got)})"


def _known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the sub-model at loc, when it can be found."""
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            return [] if not (isinstance(current, type) and issubclass(current, BaseModel)) else \
                _known_keys(current, ())
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        current = _model_in(field.annotation)
        if current is None:
            return []
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def validate(model: type[M], doc: YamlDoc, checks: Callable[[M, str, YamlDoc], list[ConfigIssue]] | None = None) -> M:
    """Validate a parsed document against a pydantic model, then with `checks` (the rules across keys),
    reporting every issue by key path, all in one pass: keys with a wrong shape are set aside so the
    rules across keys still run on the rest."""
    obj, issues = _validate_shape(model, doc)
    if obj is not None and checks:
        reported = {i.path for i in issues}
        issues += [i for i in checks(obj, doc.source, doc)
                   if not any(i.path == p or i.path.startswith(p + ".") for p in reported)]
    if issues:
        raise ConfigError(sorted(issues, key=lambda i: i.line or 0))
    assert obj is not None
    return obj


def _validate_shape(model: type[M], doc: YamlDoc) -> tuple[M | None, list[ConfigIssue]]:
    """(the model built from the keys that are right, or None; every shape issue)."""
    data = doc.data
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([ConfigIssue(doc.source, "", f"must be a mapping of keys to values, got {_short(data)}")])
    issues: list[ConfigIssue] = []
    seen: set[str] = set()
    for _ in range(8):  # each round sets aside the keys pydantic refused; a handful of rounds is plenty
        try:
            return model.model_validate(data), issues
        except ValidationError as e:
            locs = []
            for err in e.errors(include_url=False):
                loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
                if _fmt_path(loc) not in seen:
                    seen.add(_fmt_path(loc))
                    issues.append(ConfigIssue(doc.source, _fmt_path(loc), _explain(err, model), doc.line_of(loc)))
                locs.append((loc, err["type"]))
            data = _without(data, locs)
            if data is None:
                break
    return None, issues


def _without(data: dict, locs: list[tuple[tuple, str]]) -> dict | None:
    """A copy of data without the values at locs (so the model's defaults stand in; a missing required
    key gets a stand-in text); None when a location cannot be changed (nothing more can be learnt)."""
    import copy

    out = copy.deepcopy(data)
    for loc, kind in reversed(locs):  # from the end, so removing list items keeps earlier indices right
        if not loc:
            return None
        parent: Any = out
        for part in loc[:-1]:
            try:
                parent = parent[part]
            except (KeyError, IndexError, TypeError):
                return None
        try:
            if kind == "missing":
                parent[loc[-1]] = "?"
            else:
                del parent[loc[-1]]
        except (KeyError, IndexError, TypeError):
            return None
    return out
