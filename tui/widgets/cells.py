"""One table cell laid out as one line, without Rich's layout machinery (the virtual table's fast path)."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from rich.text import Text

_NULL = Style()
_NEWLINE = Text("\n")


def cell_line(text: Text, width: int, pad: int, console) -> list[Segment] | None:
    """The one line Rich draws for `Padding(text, (0, pad))` at `width` with no_wrap, for the plain
    case (one line that fits, left/right/default justified), without Rich's layout machinery
    (measure, wrap, split and crop: ~0.3 ms a cell, ~100 ms for a screenful of never-drawn rows at
    2,000 nodes). None when the text is not the plain case; the caller then asks Rich.
    tests/tui/test_node_table.py checks it against Rich segment for segment."""
    inner = width - 2 * pad
    plain = text.plain
    justify = text.justify or "default"
    length = text.cell_len
    if inner < 0 or length > inner or "\n" in plain or "\t" in plain or justify not in ("default", "left", "right"):
        return None
    if justify == "right" and plain != plain.rstrip():  # Rich strips before it right-justifies
        return None
    excess = inner - length
    if justify == "default" or not excess:
        padded = text
    else:
        padded = text.copy()
        if justify == "right":
            padded.pad_left(excess)
        else:
            padded.pad_right(excess)
        excess = 0
    # as Text.__rich_console__ does: joining makes the text's own style a span that render applies
    segments = [s for s in _NEWLINE.join([padded]).render(console, end="") if s.text]
    if excess:
        segments.append(Segment(" " * excess, _NULL))
    if pad:
        return [Segment(" " * pad, _NULL), *segments, Segment(" " * pad, _NULL)]
    return segments
