"""How AToMesh's worker API reads what a client sends: the worker id in the path and the JSON body.

- The id: ``Uuid::parse_str`` of the ``uuid`` crate (worker_service.rs ``parse_worker_id``), with that
  crate's error text (uuid 1.x ``InvalidUuid::into_err`` and ``Display for Error``).
- The body: axum 0.8's ``Json`` extractor over serde (server.rs ``create_worker``/``update_worker``):
  415 ``Expected request with `Content-Type: application/json```, 400 ``Failed to parse the request
  body as JSON: <serde_json syntax error>``, 422 ``Failed to deserialize the JSON body into the target
  type: [<field>: ]<serde error> at line L column C`` (text/plain). The structs and their defaults are
  openai-protocol 1.0.0's ``worker_spec.rs`` (lightseekorg/smg ``protocols/`` at e8482961f, the crate
  version both ROCm/ATOM revisions pin with ``=1.0.0``).

Where this is an approximation: serde_json's syntax-error wording is mapped from Python's json module
(the common cases); a JSON array body is read as serde reads one only when it is empty.
"""

from __future__ import annotations

import json
from typing import Any

# WorkerConfigRequest: field -> (type, default); "required" has no default
CONFIG_FIELDS: dict[str, tuple[str, Any]] = {
    "url": ("string", "required"), "api_key": ("opt_string", None), "model_id": ("opt_string", None),
    "priority": ("opt_u32", None), "cost": ("opt_f32", None), "worker_type": ("opt_string", None),
    "bootstrap_port": ("opt_u16", None), "runtime": ("opt_string", None), "tokenizer_path": ("opt_string", None),
    "reasoning_parser": ("opt_string", None), "tool_parser": ("opt_string", None),
    "chat_template": ("opt_string", None), "labels": ("map", {}), "health_check_timeout_secs": ("u64", 30),
    "health_check_interval_secs": ("u64", 60), "health_success_threshold": ("u32", 2),
    "health_failure_threshold": ("u32", 3), "disable_health_check": ("bool", False),
    "max_connection_attempts": ("u32", 20), "dp_aware": ("bool", False),
}
# WorkerUpdateRequest: every field optional, no default but None
UPDATE_FIELDS: dict[str, tuple[str, Any]] = {
    "priority": ("opt_u32", None), "cost": ("opt_f32", None), "labels": ("opt_map", None),
    "api_key": ("opt_string", None), "health_check_timeout_secs": ("opt_u64", None),
    "health_check_interval_secs": ("opt_u64", None), "health_success_threshold": ("opt_u32", None),
    "health_failure_threshold": ("opt_u32", None), "disable_health_check": ("opt_bool", None),
}
_RANGE = {"u16": 0xFFFF, "u32": 0xFFFFFFFF, "u64": 0xFFFFFFFFFFFFFFFF}
_EXPECTED = {"string": "a string", "bool": "a boolean", "map": "a map", "f32": "f32", **{k: k for k in _RANGE}}


class BodyError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status, self.text = status, text


def parse_uuid_error(raw: str) -> str | None:
    """None when ``Uuid::parse_str`` accepts ``raw``; else the uuid crate's error text."""
    data = raw.encode()
    hexdigits = set(b"0123456789abcdefABCDEF")

    def hyphenated(s: bytes) -> bool:
        return len(s) == 36 and all(s[i] == 0x2D if i in (8, 13, 18, 23) else s[i] in hexdigits for i in range(36))

    if len(data) == 32 and all(c in hexdigits for c in data):
        return None
    if hyphenated(data) or (len(data) == 38 and data[:1] == b"{" and data[-1:] == b"}" and hyphenated(data[1:-1])) \
            or (len(data) == 45 and data.startswith(b"urn:uuid:") and hyphenated(data[9:])):
        return None
    if data[:1] == b"{" and data[-1:] == b"}" and len(data) >= 2:
        body, offset, simple = raw[1:-1], 1, False
    elif data.startswith(b"urn:uuid:"):
        body, offset, simple = raw[9:], 9, False
    else:
        body, offset, simple = raw, 0, True
    hyphens, bounds, index = 0, [0, 0, 0, 0], 0
    for ch in body:  # char_indices: byte offsets
        if ord(ch) > 0x7F or (ch != "-" and ch not in "0123456789abcdefABCDEF"):
            return ("invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], "
                    f"found `{ch}` at {index + offset + 1}")
        if ch == "-":
            if hyphens < 4:
                bounds[hyphens] = index
            hyphens += 1
        index += len(ch.encode())
    if hyphens == 0 and simple:
        return f"invalid length: expected length 32 for simple format, found {len(data)}"
    if hyphens != 4:
        return f"invalid group count: expected 5, found {hyphens + 1}"
    starts = [0, 9, 14, 19, 24]
    for i in range(4):
        if bounds[i] != starts[i + 1] - 1:
            return f"invalid group length in group {i}: expected {[8, 4, 4, 4, 12][i]}, found {bounds[i] - starts[i]}"
    return f"invalid group length in group 4: expected 12, found {len(data) - starts[4]}"


def _position(text: str, end: int) -> str:
    line = text.count("\n", 0, end) + 1
    return f"at line {line} column {end - (text.rfind(chr(10), 0, end) + 1)}"


def _unexpected(value: Any) -> str:
    """serde_json's ``JsonUnexpected`` Display."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return "string " + json.dumps(value, ensure_ascii=False)
    return "sequence" if isinstance(value, list) else "map"


def _check(kind: str, value: Any) -> str | None:
    """serde's error for ``value`` read as ``kind``, or None."""
    if kind.startswith("opt_"):
        if value is None:
            return None
        kind = kind[4:]
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "f32":
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind == "map":
        ok = isinstance(value, dict)
    else:  # unsigned integers
        if isinstance(value, int) and not isinstance(value, bool):
            if 0 <= value <= _RANGE[kind]:
                return None
            return f"invalid value: integer `{value}`, expected {kind}"
        ok = False
    return None if ok else f"invalid type: {_unexpected(value)}, expected {_EXPECTED[kind]}"


def _syntax(e: json.JSONDecodeError, text: str) -> str:
    msg = e.msg
    if msg == "Expecting value":
        what = "EOF while parsing a value" if not text[e.pos:].strip() else "expected value"
    elif msg.startswith("Expecting property name"):
        what = "trailing comma" if text[:e.pos].rstrip().endswith(",") else "key must be a string"
    else:
        what = {"Expecting ':' delimiter": "expected `:`", "Expecting ',' delimiter": "expected `,` or `}`",
                "Extra data": "trailing characters"}.get(msg, "")
        if not what:
            what = "EOF while parsing a string" if msg.startswith("Unterminated string") else msg[:1].lower() + msg[1:]
    return f"{what} {_position(text, min(len(text), e.pos + 1) if text else 0)}"


def read_body(content_type: str, body: bytes, struct: str) -> dict[str, Any]:
    """The request's body as ``struct`` (WorkerConfigRequest or WorkerUpdateRequest), defaults filled in;
    raises BodyError with axum's status and text."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if not (mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))):
        raise BodyError(415, "Expected request with `Content-Type: application/json`")
    text = body.decode("utf-8", "replace")
    prefix = "Failed to deserialize the JSON body into the target type: "
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as e:
        raise BodyError(400, f"Failed to parse the request body as JSON: {_syntax(e, text)}") from None
    fields = CONFIG_FIELDS if struct == "WorkerConfigRequest" else UPDATE_FIELDS
    end = len(text.rstrip())
    if not isinstance(whole, dict):
        if isinstance(whole, list) and not whole:
            raise BodyError(422, f"{prefix}invalid length 0, expected struct {struct} with {len(fields)} elements "
                                 f"{_position(text, end)}")
        raise BodyError(422, f"{prefix}invalid type: {_unexpected(whole)}, expected struct {struct} "
                             f"{_position(text, end)}")
    out: dict[str, Any] = {}
    decoder = json.JSONDecoder()
    i = text.index("{") + 1
    while True:  # walk the object member by member: serde reports the first bad field, at its value's end
        while text[i] in " \t\r\n,":
            i += 1
        if text[i] == "}":
            break
        key, key_end = decoder.raw_decode(text, i)
        i = key_end
        while text[i] in " \t\r\n:":
            i += 1
        value, i = decoder.raw_decode(text, i)
        if key not in fields:
            continue
        if key in out:
            raise BodyError(422, f"{prefix}duplicate field `{key}` {_position(text, key_end)}")
        kind = fields[key][0]
        problem, path = _check(kind, value), key
        if problem is None and kind.endswith("map") and value is not None:
            for k, v in value.items():
                if not isinstance(v, str):  # the path serde_path_to_error gives a map entry (the outer
                    problem, path = f"invalid type: {_unexpected(v)}, expected a string", f"{key}.{k}"
                    break  # value's end stands in for the entry's position)
        if problem is not None:
            raise BodyError(422, f"{prefix}{path}: {problem} {_position(text, i)}")
        out[key] = value
    for key, (_kind, default) in fields.items():
        if key not in out:
            if default == "required":
                raise BodyError(422, f"{prefix}missing field `{key}` {_position(text, i + 1)}")
            out[key] = dict(default) if isinstance(default, dict) else default
    return out
