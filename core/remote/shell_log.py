"""A remote log's end read through a node's persistent shell (core/remote/node_shell.py) instead of a
new SSH command: a new command starts the node's login shell (~0.1-0.6 s: .bashrc, pyenv, conda), which
is what a process's death waited for before it was reported (its last lines are read first).

The shell's output is text, so the bytes come base64-encoded and offsets stay exact."""

from __future__ import annotations

import base64
import binascii
import shlex
from collections.abc import AsyncIterator

from .loglines import LineSplitter
from .node_shell import NodeShell
from .shell import CommandError

MAX_BYTES = 8 * 1024 * 1024  # more unread than this (a flood) goes the streaming way


async def shell_read_log(shell: NodeShell, path: str, offset: int,
                         partial: bool = False) -> AsyncIterator[tuple[int, str]]:
    """`path` on the node from byte `offset` to its end now, as (next offset, line); raises LookupError
    when the unread part is larger than MAX_BYTES, CommandError when the shell could not read it. A log
    that is not there has no lines."""
    q = shlex.quote(path)
    script = (f"[ -e {q} ] || exit 3; n=$(wc -c < {q}); [ \"$n\" -le {offset + MAX_BYTES} ] || exit 4; "
              f"tail -c +{offset + 1} -- {q} | base64")
    res = await shell.run(["sh", "-c", script], timeout=30)
    if res.rc == 3:
        return
    if res.rc == 4:
        raise LookupError(f"{path}: more than {MAX_BYTES} bytes unread")
    if not res.ok:
        raise CommandError(res, f"reading {path}")
    try:
        data = base64.b64decode("".join(res.stdout.split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise CommandError(res, f"reading {path}: {e}") from e
    lines = LineSplitter(offset)
    for item in lines.feed(data):
        yield item
    if partial:
        for item in lines.flush():
            yield item
