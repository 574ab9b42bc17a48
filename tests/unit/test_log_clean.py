"""logtext.clean's plain-line shortcut (a printable ASCII line is returned as is, issue 19: the general
path's translate cost ~6 us a flood line) answers what the general path answers."""

from __future__ import annotations

from atomdeck.tui import logtext
from atomdeck.tui.logtext import MAX_CELLS, clean


def general(line: str, limit: int = MAX_CELLS) -> str:
    """clean without its shortcut (the code before it, kept here as the reference)."""
    if len(line) > limit * 4:
        line = line[:limit * 4]
    if "\x1b" in line:
        line = logtext._CSI.sub("", line)
    line = line.translate(logtext._CONTROL)
    if "\t" in line:
        line = line.expandtabs(4)
    if len(line) > limit:
        line = f"{line[:limit]} … [line cut at {limit} characters; the file on disk has all of it]"
    return line


CORPUS = [
    "", " ", "plain ascii line", "[atom 12:00:00] Engine Core: running=0 reqs (status #1)",
    "tab\tseparated\tcolumns", "\x1b[31mred\x1b[0m text", "bell\x07 and nul\x00", "del \x7f char",
    "carriage\rreturn", "form\x0cfeed", "vertical\x0btab", "escape alone \x1b", "ünïcödé", "宽字符 wide",
    "emoji 🚀 launch", "a" * MAX_CELLS, "a" * (MAX_CELLS + 1), "b" * (MAX_CELLS * 4 + 7),
    "\t" * 10, "x" * (MAX_CELLS - 1) + "\t", "~!@#$%^&*()_+{}|:\"<>?`-=[]\\;',./",
]


def test_clean_answers_as_the_general_path():
    for line in CORPUS + [chr(c) * 3 for c in range(0, 256)]:
        assert clean(line) == general(line), repr(line)
    for limit in (1, 5, 40):
        for line in CORPUS:
            assert clean(line, limit) == general(line, limit), (limit, repr(line))
