"""Holding a launch half-way, as an operator's keys can catch it: while the local starter reports its starts."""

from __future__ import annotations

import threading


def hold_starts(monkeypatch, release: threading.Event, from_line: int = 2) -> threading.Event:
    """Hold the local starter's report of each start from its `from_line`th line on until `release` is set (the
    lines are read in a thread: the launch's count and its end wait there, the processes start all the same).
    Returns the event set when the first held line came."""
    from atomdeck.core.launch.local import LocalLauncher

    reached = threading.Event()
    real_run_starter = LocalLauncher._run_starter

    def run_starter(self, req, said):
        heard: list[list] = []

        def held(item: list) -> None:
            heard.append(item)
            if len(heard) >= from_line:
                reached.set()
                release.wait(60)
            said(item)

        return real_run_starter(self, req, held)

    monkeypatch.setattr(LocalLauncher, "_run_starter", run_starter)
    return reached
