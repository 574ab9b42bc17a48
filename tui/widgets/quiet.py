"""Updating a Static without costing a frame: only when what it shows changed, and without a layout
pass when only its digits changed.

`Static.update` re-lays the whole screen out by default (its size may have changed). The run view's
clock changes little each second (12s -> 13s): re-laying out every panel for that was most of the
console's CPU while a run merely served (py-spy: the compositor's reflow and full render). Here an
update that changes nothing is skipped, and one whose text has the same shape (the same lines with
the same lengths and the same word breaks: only digits differ) is drawn in place (layout=False).
"""

from __future__ import annotations

import re
from typing import Any

from rich.text import Text
from textual.geometry import Region
from textual.widget import Widget
from textual.widgets import Static

DIGIT = re.compile(r"[0-9]")
UNKNOWN = object()  # a renderable we cannot compare (a Group, a Table): always a full update


def shape_of(content: Any) -> object:
    """What decides the size of `content` on screen: its text with every digit made the same (a
    digit is one cell wide and never a word break, so the lines wrap exactly as before)."""
    if isinstance(content, Text):
        return DIGIT.sub("0", content.plain)
    if isinstance(content, str):
        return DIGIT.sub("0", content)
    return UNKNOWN


def update_quietly(widget: Static, content: Any, shape: object = None) -> bool:
    """`widget.update(content)` if it changed; with a layout pass only if its shape changed (`shape`
    overrides shape_of, e.g. the line count of a no-wrap panel). Returns whether it updated."""
    comparable = isinstance(content, (Text, str))
    last = getattr(widget, "_quiet_content", UNKNOWN)
    if comparable and type(last) is type(content) and last == content:
        return False
    new_shape = shape_of(content) if shape is None else shape
    layout = new_shape is UNKNOWN or new_shape != getattr(widget, "_quiet_shape", UNKNOWN)
    widget._quiet_content = content.copy() if isinstance(content, Text) else content if comparable else UNKNOWN  # type: ignore[attr-defined]
    widget._quiet_shape = new_shape  # type: ignore[attr-defined]
    widget.update(content, layout=layout)
    return True


# the border row each title is drawn on
BORDER_ROWS = {"border_title": "top", "border_subtitle": "bottom"}


def set_if_changed(obj: Any, attr: str, value: Any) -> bool:
    """Set a widget attribute (border_title, border_subtitle) only when it differs from what was set
    here last: setting one refreshes the widget even when the value is the same (and reading it back
    gives markup, not what was set). A box's title (a str, on a box with a border on that edge) repaints only
    its border row: Textual's setter repaints the whole box, and with it every widget inside it (at 128 nodes
    the barrier box's title changes with its counts while the run comes up, the last lines box's with the
    cursor)."""
    done = obj.__dict__.setdefault("_quiet_attrs", {})
    if attr in done and done[attr] == value:
        return False
    done[attr] = value
    if not (isinstance(obj, Widget) and isinstance(value, str) and _set_border_text(obj, attr, value)):
        setattr(obj, attr, value)
    return True


def _set_border_text(widget: Widget, attr: str, value: str) -> bool:
    """Store the title as Textual's setter does (Widget's private `_border_title` / `_border_subtitle`) and
    repaint the row it is drawn on; False (nothing done) if that is not a border row of the widget now."""
    edge = BORDER_ROWS.get(attr)
    width, height = widget.outer_size
    if edge is None or not width or height < 2 or getattr(widget.styles, f"border_{edge}")[0] in ("", "none", "hidden"):
        return False
    setattr(widget, f"_{attr}", widget.render_str(value).expand_tabs(4).split()[0])
    left, top = widget.content_offset
    row = 0 if edge == "top" else height - 1
    widget.refresh(Region(-left, row - top, width, 1))  # (content coordinates: the row is above or below them)
    return True
