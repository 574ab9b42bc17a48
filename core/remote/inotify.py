"""File events for local log tails: raw inotify through ctypes, read on the event loop (add_reader).

One inotify instance per event loop and ONE watch per directory, shared by every follower of a file in
it (a run's logs/ directory holds all its logs: one watch, however many processes). A follower
subscribes to one file name and gets an asyncio.Event that is set when that file is written, created,
moved in or removed (or when the kernel's queue overflowed: then every follower re-reads). No new
dependency, and no batching: the event is set as soon as the loop reads the inotify descriptor
(`watchfiles` groups changes over >= 50 ms, too slow for a 25 ms goal).

Where inotify cannot be had (not Linux, the per-user instance limit reached, the directory missing),
`subscribe` returns None and the caller polls as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import errno
import os
import struct

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
DIR_MASK = (IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF
            | IN_MOVE_SELF)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event, then the name)

_libc: ctypes.CDLL | None = None
_tried = False


def _lib() -> ctypes.CDLL | None:
    global _libc, _tried
    if not _tried:
        _tried = True
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            lib.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            _libc = lib
        except (OSError, AttributeError):
            _libc = None
    return _libc


def parse_events(data: bytes) -> list[tuple[int, int, str]]:
    """(wd, mask, name) for each struct inotify_event in a read."""
    out, i = [], 0
    while i + _HEADER.size <= len(data):
        wd, mask, _cookie, n = _HEADER.unpack_from(data, i)
        i += _HEADER.size
        name = data[i:i + n].split(b"\0", 1)[0].decode(errors="surrogateescape")
        i += n
        out.append((wd, mask, name))
    return out


class Subscription:
    """A follower's interest in one file: `event` is set whenever the file may have changed."""

    def __init__(self, owner: DirWatcher, wd: int, name: str):
        self.owner, self.wd, self.name = owner, wd, name
        self.event = asyncio.Event()
        self.lost = False  # the directory's watch went away (directory removed): poll from now on

    def clear(self) -> None:
        self.event.clear()

    async def wait(self, timeout: float) -> None:
        """Until the file changes or `timeout` passes (the caller's safety poll). Not asyncio.wait_for: on
        Python 3.11 a write that sets the event in the same turn of the loop as the follower's task is
        cancelled made wait_for return normally, the cancellation lost, and follow() ran on for good
        (a watcher that never exited; tests/unit/test_cancel_races.py)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.event.wait()

    def close(self) -> None:
        self.owner.unsubscribe(self)


class DirWatcher:
    """One inotify descriptor on one event loop; one watch per directory; subscribers per file name."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lib: ctypes.CDLL, fd: int):
        self.loop, self.lib, self.fd = loop, lib, fd
        self.wd_of: dict[str, int] = {}  # directory -> watch descriptor
        self.subs: dict[int, dict[str, set[Subscription]]] = {}  # wd -> file name -> subscribers
        self.closed = False
        loop.add_reader(fd, self._readable)

    def subscribe(self, path: str) -> Subscription | None:
        directory, name = os.path.split(os.path.abspath(path))
        wd = self.wd_of.get(directory)
        if wd is None:
            wd = self.lib.inotify_add_watch(self.fd, os.fsencode(directory), DIR_MASK)
            if wd < 0:
                return None  # no such directory (yet), no permission, watch limit: poll
            self.wd_of[directory] = wd
        sub = Subscription(self, wd, name)
        self.subs.setdefault(wd, {}).setdefault(name, set()).add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        names = self.subs.get(sub.wd)
        if names is not None:
            names.get(sub.name, set()).discard(sub)
            if not names.get(sub.name):
                names.pop(sub.name, None)
            if not names:  # the directory's last follower left: drop its watch
                self.subs.pop(sub.wd, None)
                for d, wd in list(self.wd_of.items()):
                    if wd == sub.wd:
                        del self.wd_of[d]
                        self.lib.inotify_rm_watch(self.fd, wd)
        if not self.subs:
            self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if _watchers.get(self.loop) is self:
            del _watchers[self.loop]
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.fd)
        os.close(self.fd)

    def _readable(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 64 * 1024)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                self._wake_all(lost=True)
                self.close()
                return
            if not data:
                return
            for wd, mask, name in parse_events(data):
                if mask & IN_Q_OVERFLOW:
                    self._wake_all()
                    continue
                names = self.subs.get(wd)
                if names is None:
                    continue
                if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):  # the directory itself is gone
                    if mask & IN_IGNORED:  # the kernel dropped the watch: a new subscriber adds a new one
                        for d in [d for d, w in self.wd_of.items() if w == wd]:
                            del self.wd_of[d]
                    for subs in names.values():
                        for s in subs:
                            s.lost = True
                            s.event.set()
                    continue
                for s in names.get(name, ()):
                    s.event.set()

    def _wake_all(self, lost: bool = False) -> None:
        for names in self.subs.values():
            for subs in names.values():
                for s in subs:
                    s.lost = s.lost or lost
                    s.event.set()


_watchers: dict[asyncio.AbstractEventLoop, DirWatcher] = {}


def subscribe(path: str) -> Subscription | None:
    """Events for `path` on the running loop, or None where inotify is unavailable (then poll)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    w = _watchers.get(loop)
    if w is None or w.closed:
        lib = _lib()
        if lib is None:
            return None
        fd = lib.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return None  # e.g. fs.inotify.max_user_instances reached
        try:
            w = DirWatcher(loop, lib, fd)
        except (NotImplementedError, OSError):  # a loop without add_reader
            os.close(fd)
            return None
        _watchers[loop] = w
    sub = w.subscribe(path)
    if sub is None and not w.subs:
        w.close()
    return sub
