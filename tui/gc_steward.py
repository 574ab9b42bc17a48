"""The cyclic garbage collector, kept off the key path (issue 19).

Python's cyclic GC runs a full pass over every object it tracks whenever enough objects have survived its
younger passes. A console attached to a 128-node run holds a few hundred thousand such objects (the run's state,
Textual's widgets, strips and caches); a full pass over them takes 40-200 ms on this machine, and a key pressed
during one waits that long. `settle_gc` (tui/live.py) freezes what exists at attach, but a run that comes up or
serves keeps making long-lived objects after it, and the full passes grow back.

The steward freezes what survives at a steady pace instead: every few seconds it collects the young generations
(a few ms) and moves the survivors into the permanent generation, which the automatic passes never traverse, so
those stay small. Reference counting still frees frozen objects as usual; only *cyclic* garbage among them waits.
That is collected by a full pass over everything (thaw, collect, freeze) every ten minutes, run only when nobody
has pressed a key for a while (the operator is reading, not typing), so the memory such garbage holds stays
bounded and a key does not meet the pass. When the console closes, everything is thawed again."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

FREEZE_EVERY_S = 5.0  # collect the young generations and freeze their survivors this often
THAW_EVERY_S = 600.0  # a full pass over everything (frozen included) at most this far apart ...
QUIET_S = 2.0  # ... and only after this long without a key press


class GcSteward:
    """`tick()` from a timer every FREEZE_EVERY_S, `key()` on every key press, `close()` when the console ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, thaw_every: float = THAW_EVERY_S,
                 quiet: float = QUIET_S) -> None:
        self.clock = clock
        self.thaw_every = thaw_every
        self.quiet = quiet
        self.last_key = float("-inf")
        self.last_full = clock()
        self.freezes = 0  # young passes whose survivors were frozen
        self.full_passes = 0  # full passes over everything (thawed first)
        self.postponed = 0  # ticks a due full pass waited for a quiet moment

    def key(self) -> None:
        self.last_key = self.clock()

    def full_due(self) -> bool:
        return self.clock() - self.last_full >= self.thaw_every

    def tick(self) -> str:
        """One step: "full" (thawed, collected everything, froze the survivors) or "young" (collected the young
        generations and froze their survivors)."""
        now = self.clock()
        if now - self.last_full >= self.thaw_every:
            if now - self.last_key >= self.quiet:
                gc.unfreeze()
                gc.collect()
                gc.freeze()
                self.last_full = now
                self.full_passes += 1
                return "full"
            self.postponed += 1
        gc.collect(1)
        gc.freeze()
        self.freezes += 1
        return "young"

    def close(self) -> None:
        """Give everything frozen back to the collector (a closed console's objects become collectable)."""
        gc.unfreeze()
