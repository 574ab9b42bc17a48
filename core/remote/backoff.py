"""Retry pacing: one `Backoff` and its `delays()`, used by every loop that waits longer after each
failure (SSH connects, remote tails, the watch's watchers, barrier probes, launcher waits, local
file polling). Pure data, no I/O: each use names its own constants next to the loop."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """first_s, then ×factor each time, capped at max_s; `tries` delays in all (None: forever).

    `give_up_s` is for loops that stop after that long without success (the SSH connect loop);
    `delays()` itself never looks at the clock.
    """

    first_s: float = 0.25
    factor: float = 2.0
    max_s: float = 5.0
    give_up_s: float | None = 60.0
    tries: int | None = None

    def delays(self) -> Iterator[float]:
        """The waits between attempts, in order. Start a fresh iterator to reset after a success."""
        delay, n = self.first_s, 0
        while self.tries is None or n < self.tries:
            yield delay
            n += 1
            delay = min(delay * self.factor, self.max_s)
