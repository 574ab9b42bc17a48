"""The cyclic garbage collector, kept off the key path (issue 19).

Python's cyclic GC runs a full pass over every object it tracks whenever enough objects have survived its
younger passes. A console attached to a 128-node run holds a few hundred thousand such objects (the run's state,
Textual's widgets, strips and caches); a full pass over them takes 40-200 ms on this machine, and a key pressed
during one waits that long. `settle_gc` (tui/live.py) freezes what exists at attach, but a run that comes up or
serves keeps making long-lived objects after it, and the full passes grow back.

The steward does the full passes itself, when nobody types: every minute, once no key has been pressed for 2 s
(or after 5 more minutes of keys), it thaws everything, runs a full pass and freezes what survived (the
permanent generation, which the automatic passes never traverse); and while the console runs, Python makes no
full passes of its own (OWN_FULL_THRESHOLD). In between, the automatic young passes free most cycles, and cyclic
garbage that reached generation 2 or the frozen objects waits at most for the next such pass. Reference counting
frees frozen objects as usual. When the console closes, everything is thawed and Python's thresholds are back.
Measured and dropped: freezing the survivors right after every automatic generation-1 pass (every 5 s) also
froze garbage cycles that had reached generation 2, and the console's memory grew ~2 MB a minute under load
(bench/soak.py, 10 minutes: +129 MB/h); a young pass of the steward's own every 5 s met flood key presses."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

TICK_S = 5.0  # how often the steward looks whether a full pass is due and the moment quiet
FULL_EVERY_S = 60.0  # a full pass over everything (frozen included) at most this far apart ...
QUIET_S = 2.0  # ... and only after this long without a key press ...
LATEST_S = 300.0  # ... or, with keys pressed all along, once it has waited this long anyway (memory stays bounded)
# Python's own full passes (generation 2) are left to the steward while it runs: their threshold is set out of
# reach. At 128 nodes a run coming up makes long-lived objects fast (its state, its pairs, Textual's caches);
# after the launch's freeze Python's automatic full passes traversed them every few seconds, 0.2-0.7 s each
# while the simulators took the CPU (bench/atomdeck_key_trace.py), and a key pressed then waited for one.
# The young passes (generations 0 and 1) run as before and free most cycles; what reaches generation 2 is
# collected by the steward's next pass.
OWN_FULL_THRESHOLD = 1 << 30


def settle_gc() -> None:
    """Thaw, collect everything, freeze what survived: what the console holds now leaves the automatic full
    passes (reference counting still frees frozen objects; cyclic garbage among them waits for the next call)."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class GcSteward:
    """`tick()` from a timer every TICK_S, `key()` on every key press, `close()` when the console ends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, full_every: float = FULL_EVERY_S,
                 quiet: float = QUIET_S, latest: float = LATEST_S) -> None:
        self.clock = clock
        self.full_every = full_every
        self.quiet = quiet
        self.latest = latest
        self._thresholds: tuple[int, int, int] | None = None  # Python's, while the steward owns the full passes
        self.last_key = float("-inf")
        self.last_full = clock()
        self.full_passes = 0  # full passes over everything (thawed first), survivors frozen
        self.postponed = 0  # ticks a due full pass waited for a quiet moment

    def key(self) -> None:
        self.last_key = self.clock()

    def due(self) -> None:
        """Make the full pass due now: it runs at the next tick after QUIET_S without a key."""
        self.last_full = min(self.last_full, self.clock() - self.full_every)

    def full_due(self) -> bool:
        return self.clock() - self.last_full >= self.full_every

    def own_full_passes(self) -> None:
        """Python's automatic full passes stop; the steward's are the only ones (see OWN_FULL_THRESHOLD)."""
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
            young, middle, _ = self._thresholds
            gc.set_threshold(young, middle, OWN_FULL_THRESHOLD)

    def tick(self) -> str:
        """"full" if the due full pass ran now (thawed, collected everything, froze the survivors), else ""."""
        if not self.full_due():
            return ""
        now = self.clock()
        if now - self.last_key < self.quiet and now - self.last_full < self.full_every + self.latest:
            self.postponed += 1
            return ""
        settle_gc()
        self.last_full = now
        self.full_passes += 1
        return "full"

    def close(self) -> None:
        """Give everything frozen back to the collector (a closed console's objects become collectable), and
        the full passes back to Python."""
        gc.unfreeze()
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None
