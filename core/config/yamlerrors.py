"""YAML syntax errors in plain words: what is wrong, on which line, and what to do.

PyYAML says "expected <block end>, but found '<block mapping start>'"; a person needs "line 6:
`decode:` is indented by 1 space more than `prefill:`; keys at the same level must line up".
"""

from __future__ import annotations

import yaml

_MIXED = "line {line} mixes list items (`- ...`) and keys at the same indentation; use one or the other"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _key(line: str) -> str:
    text = line.strip().removeprefix("- ")
    return f"`{text.split(':', 1)[0].strip()}:`" if ":" in text else f"`{text[:30]}`"


def _spaces(n: int) -> str:
    return f"{n} space{'s' if n != 1 else ''}"


def _content(lines: list[str], before: int) -> list[tuple[int, str]]:
    """(index, line) of the lines above `before` that hold YAML (not blank, not comments), nearest first."""
    return [(i, lines[i]) for i in range(before - 1, -1, -1)
            if lines[i].strip() and not lines[i].lstrip().startswith("#")]


def _indentation(lines: list[str], at: int) -> str | None:
    """Explain a line whose indentation fits no level of the lines above it."""
    if at >= len(lines) or not lines[at].strip():
        return None
    here = _indent(lines[at])
    above = _content(lines, at)
    if not above:
        return None
    prev_i, prev = above[0]
    outer = next(((i, line) for i, line in above if _indent(line) < here), None)
    what = f"{_key(lines[at])} (line {at + 1}) is indented by {_spaces(here)}"
    if _indent(prev) > here and outer is not None:
        return (f"{what}: more than {_key(outer[1])} (line {outer[0] + 1}, {_spaces(_indent(outer[1]))}) but less "
                f"than {_key(prev)} (line {prev_i + 1}, {_spaces(_indent(prev))}); keys at the same level must "
                "line up")
    if _indent(prev) > here:
        return (f"{what}, {_spaces(_indent(prev) - here)} less than {_key(prev)} (line {prev_i + 1}); keys at the "
                "same level must line up")
    if _indent(prev) < here:
        sibling = next(((i, line) for i, line in above if _indent(line) <= _indent(prev)), (prev_i, prev))
        has_value = ":" in prev and prev.split(":", 1)[1].strip() not in ("", "|", ">")
        if has_value or sibling[0] == prev_i:
            return (f"{_key(lines[at])} (line {at + 1}) is indented by {_spaces(here - _indent(prev))} more than "
                    f"{_key(prev)} (line {prev_i + 1}); keys at the same level must line up"
                    + (f" ({_key(prev)} already has a value, so nothing can be nested under it)" if has_value else ""))
    return None


def explain(text: str, e: yaml.MarkedYAMLError) -> tuple[int | None, str]:
    """(line, a sentence a person understands, then the parser's own words to search for)."""
    line, plain = _explain(text, e)
    jargon = (e.problem or "").strip()
    return line, plain if not jargon or jargon in plain else f"{plain} (parser: {jargon})"


def _explain(text: str, e: yaml.MarkedYAMLError) -> tuple[int | None, str]:
    mark = e.problem_mark or e.context_mark
    line = mark.line + 1 if mark else None
    problem = (e.problem or "").strip()
    context = (e.context or "").strip()
    lines = text.splitlines()
    at = mark.line if mark else 0
    if "'\\t'" in problem or "\t" in problem:
        return line, "a tab is used for indenting; YAML allows only spaces (replace the tab with spaces)"
    if context.startswith("while scanning a quoted scalar") and e.context_mark:
        start = e.context_mark.line + 1
        return start, f"a quoted text starting on line {start} is never closed; add the closing quote"
    for opener, closer, name in (("flow mapping", "}", "{"), ("flow sequence", "]", "[")):
        if context.startswith(f"while parsing a {opener}") and e.context_mark:
            start = e.context_mark.line + 1
            return line, (f"the `{name}` opened on line {start} is not closed with `{closer}` (or an item lacks "
                           f"a comma) before line {line}")
    if problem.startswith("expected <block end>") or problem == "mapping values are not allowed here":
        plain = _indentation(lines, at)
        if plain:
            return line, plain
        if problem == "mapping values are not allowed here" and at < len(lines):
            return line, (f"line {line} has a second `key:` after a value ({lines[at].strip()!r}); put the inner "
                          "key on its own line, indented under the outer one, or quote a value that has ': ' in it")
        if "'?'" in problem or "'-'" in problem:
            return line, _MIXED.format(line=line)
    if context.startswith("while parsing a block collection"):
        return line, _MIXED.format(line=line)
    return line, problem or str(e)
