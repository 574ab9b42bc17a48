"""The cyclic garbage collector, kept off the key path (issue 19).

Python's cyclic GC runs a full pass over every object it tracks whenever enough objects have survived its
younger passes. A console attached to a 128-node run holds a few hundred thousand such objects (the run's state,
Textual's widgets, strips and caches); a full pass over them takes 40-200 ms on this machine, and a key pressed
during one waits that long. `settle_gc` (tui/live.py) freezes what exists at attach, but a run that comes up or
serves keeps making long-lived objects after it, and the full passes grow back.

The steward freezes what survives at a steady pace instead: right after an automatic pass over the younger
generations (the young generations are empty then: no garbage is frozen, and no pass of its own is run), at most
every few seconds, it moves the survivors into the permanent generation, which the automatic passes never
traverse, so those stay small. Reference counting still frees frozen objects as usual; only *cyclic* garbage
among them waits. That is collected by a full pass over everything (thaw, collect, freeze) every ten minutes,
run only when nobody has pressed a key for a while (the operator is reading, not typing), so the memory such
garbage holds stays bounded and a key does not meet the pass. When the console closes, everything is thawed.
(A first version ran a young pass of its own every 5 s: under a log flood that pass met a key press now and
then, and the flood's key p95 rose by ~10 ms.)"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

FREEZE_EVERY_S = 5.0  # freeze the survivors of an automatic young pass at most this often
THAW_EVERY_S = 600.0  # a full pass over everything (frozen included) at most this far apart ...
QUIET_S = 2.0  # ... and only after this long without a key press


class GcSteward:
    """`install()` when the console starts, `tick()` from a timer every FREEZE_EVERY_S, `key()` on every key
    press, `close()` when the console ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, thaw_every: float = THAW_EVERY_S,
                 quiet: float = QUIET_S, freeze_every: float = FREEZE_EVERY_S) -> None:
        self.clock = clock
        self.thaw_every = thaw_every
        self.quiet = quiet
        self.freeze_every = freeze_every
        self.last_key = float("-inf")
        self.last_full = clock()
        self.last_freeze = float("-inf")
        self.freezes = 0  # automatic young passes whose survivors were frozen
        self.full_passes = 0  # full passes over everything (thawed first)
        self.postponed = 0  # ticks a due full pass waited for a quiet moment
        self.installed = False

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self._after_pass)
            self.installed = True

    def _after_pass(self, phase: str, info: dict) -> None:
        # after an automatic (or explicit) pass over generation 1 or 2: the younger generations are empty, what
        # is left in the collector's lists survived; frozen, the next full passes do not traverse it
        if phase != "stop" or info.get("generation", 0) < 1:
            return
        now = self.clock()
        if now - self.last_freeze >= self.freeze_every:
            self.last_freeze = now
            gc.freeze()
            self.freezes += 1

    def key(self) -> None:
        self.last_key = self.clock()

    def full_due(self) -> bool:
        return self.clock() - self.last_full >= self.thaw_every

    def tick(self) -> str:
        """"full" if the due full pass ran now (thawed, collected everything, froze the survivors), else ""."""
        now = self.clock()
        if now - self.last_full < self.thaw_every:
            return ""
        if now - self.last_key < self.quiet:
            self.postponed += 1
            return ""
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.last_full = now
        self.full_passes += 1
        return "full"

    def close(self) -> None:
        """Give everything frozen back to the collector (a closed console's objects become collectable)."""
        if self.installed:
            gc.callbacks.remove(self._after_pass)
            self.installed = False
        gc.unfreeze()
