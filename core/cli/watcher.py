"""The console's watcher: `python -m atomdeck.core.cli.watcher RUN_ID` runs core's Run.watch for a run in a
process of its own and reports to the console on stdout.

Watching means reading, redacting and classifying every log line of every process; at 8 x 2,000
lines/s that is most of a CPU core. In the console's process (even on a thread of its own, since
the interpreter runs one thread at a time) it left keys and repaints waiting; here it has a core to
itself and the console only draws (bench/console.py has the numbers).

This is one more atomdeck session on the run (like `atomdeck status` or a second console): it opens
the run from its directory, watches, and records its events there as any session does. It stops,
saving where it read each log, when the console closes its stdin or goes away.

Protocol, one JSON object per line on stdout:
  {"ready": N}                 the run was opened; N = events in events.jsonl when it was read
  {"e": [EVENT_JSON, ...], "l": [[PROCESS, [LINE, ...]], ...], "t": TIME}   what happened since
  {"stopping": true}           acknowledges "stopping" (below)
  {"error": TEXT}              watching failed (then it exits 1)
and on stdin, one word a line:
  stopping                     the console is tearing the run down: exits are stops, not crashes
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

FLUSH_S = 0.05  # how often the console hears about new events and lines
MAX_BATCH = 4_000  # lines: flush early under a flood (each message stays around a megabyte)


class Reporter:
    def __init__(self, out) -> None:
        self.out = out
        self.events: list[str] = []
        self.lines: dict[str, list[str]] = {}
        self.count = 0

    def on_event(self, e) -> None:
        self.events.append(e.to_json())

    def on_line(self, name: str, line: str) -> None:
        self.lines.setdefault(name, []).append(line)
        self.count += 1
        if self.count >= MAX_BATCH:
            self.flush()

    def send(self, msg: dict) -> None:
        self.out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        self.out.flush()

    def flush(self) -> None:
        if not self.events and not self.lines:
            return
        msg = {"e": self.events, "l": list(self.lines.items()), "t": time.time()}
        self.events, self.lines, self.count = [], {}, 0
        self.send(msg)


async def watch(run_id: str) -> int:
    from ..run.run import Run

    out = sys.stdout.buffer
    rep = Reporter(out)
    try:
        run = Run.open(run_id)
    except Exception as e:
        rep.send({"error": f"cannot open run {run_id}: {e}"})
        return 1
    run.listeners.append(rep.on_event)
    run.line_listeners.append(rep.on_line)
    rep.send({"ready": len(run.rd.event_lines())})
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: _command(run, rep, stop))

    async def flusher() -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            rep.flush()

    watching = asyncio.create_task(run.watch())
    flushing = asyncio.create_task(flusher())
    stopping = asyncio.create_task(stop.wait())
    code = 0
    try:
        done, _ = await asyncio.wait({watching, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if watching in done and watching.exception() is not None:
            rep.flush()
            rep.send({"error": f"watching stopped: {watching.exception()}"})
            code = 1
    except BrokenPipeError:
        code = 0
    finally:
        for _ in range(50):  # Run.watch can swallow one cancellation (asyncio.wait_for on 3.11)
            if watching.done():
                break
            watching.cancel()
            await asyncio.wait({watching}, timeout=0.1)
        flushing.cancel()
        stopping.cancel()
        try:
            rep.flush()
        except (BrokenPipeError, OSError):
            pass
        try:
            await run.close()  # saves where it read each log
        except Exception:
            pass
    return code


def _command(run, rep: Reporter, stop: asyncio.Event) -> None:
    """A word from the console on stdin; end of file means the console went away."""
    try:
        data = os.read(sys.stdin.fileno(), 4096)
    except OSError:
        data = b""
    if not data:
        asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
        stop.set()
        return
    if b"stopping" in data:
        # Run.teardown sets this on the Run that tears down; this session's Run learns it here, so
        # the exits that follow are recorded as stops, not as crashes that fail the run
        run.stopping = True
        rep.flush()
        rep.send({"stopping": True})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m atomdeck.core.cli.watcher RUN_ID", file=sys.stderr)
        return 2
    try:
        return asyncio.run(watch(args[0]))
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
