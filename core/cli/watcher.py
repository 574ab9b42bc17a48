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
  {"e": [EVENT, ...], "l": [[PROCESS, [LINE, ...]], ...], "q": [[PROCESS, COUNT, [LINE, ...]], ...],
   "t": TIME}                  what happened since: "e" the events, each an object as Event.to_json writes
                               it (a console before issue 19's stream change read them as JSON strings; the
                               client takes both); "l" every line of the processes the console asked for
                               (all of them until it asks), "q" for the others how many lines they logged
                               and their newest KEEP_LAST lines (at most every QUIET_S, and with any event)
Two events are sent shorter than core emitted them (the console's client makes them whole again):
  - a pair's progress (both_registered, ports_reachable, transferred) waits up to PAIRS_S, and of one pair
    only its newest event goes, without its detail and data (the console's fold keeps a pair's stage and
    since, nothing in between; the events file keeps every event whole); a failed pair goes at once, whole,
    with every pair held.
  - a metrics event whose "history" continues what this watcher sent for that endpoint carries "history+"
    (the values appended to each series) instead of the 40-value series.
  {"from": {PROCESS: OFFSET}}  answers "lines": every line after OFFSET (bytes, in the process's log) will
                               come in "l"; the ones before were reported before (the log file has them all)
  {"stopping": true}           acknowledges "stopping" (below)
  {"error": TEXT}              watching failed (then it exits 1)
and on stdin, one command a line:
  lines ["P", ...]             send every line of these processes from now on, only counts of the others
  stopping                     the console is tearing the run down: exits are stops, not crashes

Under a flood (8 processes x 2,000 lines/s) sending every line of every process made the console decode
and fold 16,000 lines a second that no view showed; now it gets those of the log or last lines it shows.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections import deque

from ..run.watchers.metrics import HISTORY  # values per metrics series

FLUSH_S = 0.05  # how often the console hears about new events and lines
MAX_BATCH = 4_000  # lines: flush early under a flood (each message stays around a megabyte)
QUIET_S = 0.5  # how often the last lines of the processes no view shows go out (core's last lines, "silent for")
KEEP_LAST = 20  # ProcState.last_lines holds this many
PAIRS_S = 0.25  # a pair's progress waits this long at most: the pairs of a 64P64D run move 4,096 at a time
CANCEL_GRACE_S = 2.0  # the watch's clean-up once cancelled (its watchers end at once; this is a bound)
# Started in a session of its own (tui/watch_client.py), the watcher sets its scheduling group (autogroup) this much
# below its console's. In the console's session, niced as a process only, it took from the console's group's share
# (the kernel ranks a process's nice only inside its session): while 128 nodes came up on this 2-core machine the
# console waited for a CPU 53-56 % of the time; with its own group at +5, 22-41 % (keys p95 pooled 413 -> 220 ms;
# at +0 the watcher competed with the console as an equal: 301 ms, and 66 ms while serving; bench/README.md).
GROUP_NICE = 5


class Reporter:
    def __init__(self, out, offsets: dict[str, int] | None = None) -> None:
        self.out = out
        self.offsets = offsets if offsets is not None else {}  # the run's: where each log was read to
        self.events: list[str] = []
        self.lines: dict[str, list[str]] = {}
        self.count = 0
        self.full: set[str] | None = None  # processes whose every line the console wants (None: all)
        self.quiet: dict[str, deque[str]] = {}  # the others: their newest lines since the last report
        self.quiet_n: dict[str, int] = {}  # and how many they logged
        self.quiet_at = 0.0
        self.pairs: dict[str, object] = {}  # pair -> its newest progress event, held (PAIRS_S)
        self.pairs_at = 0.0  # when the oldest of them came
        self.pairs_now = False  # a failed pair: send them with the next flush
        self.history: dict[str, dict[str, list]] = {}  # endpoint -> the metrics history the console has

    def on_event(self, e) -> None:
        if e.kind == "pair":
            if not self.pairs:
                self.pairs_at = time.monotonic()
            self.pairs.pop(e.name, None)  # (re-inserted: the order they last moved in)
            self.pairs[e.name] = e
            self.pairs_now = self.pairs_now or e.value == "failed"
            return
        if e.kind == "metrics" and isinstance(e.data.get("history"), dict):
            self.events.append(self.metrics_json(e))
            return
        self.events.append(e.to_json())

    def metrics_json(self, e) -> str:
        """A metrics event, its history as the values appended since the last one sent for the endpoint."""
        hist: dict[str, list] = e.data["history"]
        sent = self.history.get(e.name)
        self.history[e.name] = hist
        added = None if sent is None else _appended(sent, hist)
        if added is None:
            return e.to_json()
        data = {k: v for k, v in e.data.items() if k != "history"}
        data["history+"] = added
        return json.dumps({**e.as_dict(), "data": data}, separators=(",", ":"), default=str)

    def on_line(self, name: str, line: str) -> None:
        if self.full is None or name in self.full:
            self.lines.setdefault(name, []).append(line)
            self.count += 1
            if self.count >= MAX_BATCH:
                self.flush()
            return
        last = self.quiet.get(name)
        if last is None:
            last = self.quiet[name] = deque(maxlen=KEEP_LAST)
        last.append(line)
        self.quiet_n[name] = self.quiet_n.get(name, 0) + 1

    def want(self, names: set[str]) -> None:
        """Every line of `names` from now on; tells the console from which offset of each log newly asked."""
        self.flush(quiet=True)  # what came before goes out as it was asked for
        new = names - (self.full or set())
        self.full = set(names)
        if new:
            self.send({"from": {name: int(self.offsets.get(name, 0)) for name in sorted(new)}})

    def send(self, msg: dict) -> None:
        self.out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        self.out.flush()

    def flush(self, quiet: bool = False) -> None:
        now = time.monotonic()
        if self.pairs and (quiet or self.pairs_now or now - self.pairs_at >= PAIRS_S):
            # before the other events: a pair's fold touches the pair alone, so the order across kinds does
            # not change the console's state; a run's status that a failed pair set follows it, as emitted
            self.events[:0] = [e.to_json() if e.value == "failed" else _progress(e)  # type: ignore[attr-defined]
                               for e in self.pairs.values()]
            self.pairs, self.pairs_now = {}, False
        quiet = bool(self.quiet_n) and (quiet or bool(self.events) or now - self.quiet_at >= QUIET_S)
        if not self.events and not self.lines and not quiet:
            return
        # the events are JSON already: put in as they are (as objects), not encoded a second time as strings
        rest: dict = {"l": list(self.lines.items()), "t": time.time()}
        if quiet:
            rest["q"] = [[name, n, list(self.quiet[name])] for name, n in self.quiet_n.items()]
            self.quiet, self.quiet_n, self.quiet_at = {}, {}, now
        text = '{"e":[' + ",".join(self.events) + "]," + json.dumps(rest, separators=(",", ":"))[1:]
        self.events, self.lines, self.count = [], {}, 0
        self.out.write(text.encode() + b"\n")
        self.out.flush()


def _progress(e) -> str:
    """A pair's progress for the console: its fold keeps the stage and when, not the words (a log line of up
    to 300 characters for `transferred`); the events file has them."""
    return json.dumps({"kind": e.kind, "name": e.name, "value": e.value, "t": e.t}, separators=(",", ":"))


def _appended(sent: dict[str, list], hist: dict[str, list]) -> dict[str, list] | None:
    """What was appended to each series of `sent` to make `hist`, or None when `hist` does not continue it.
    A series keeps its newest HISTORY values: one still filling grew (`sent`'s is its start), a full one
    lost its first value for the one appended. The console makes `hist` again as (sent + added)[-HISTORY:]."""
    if not set(sent) <= set(hist):
        return None
    out = {}
    for key, new in hist.items():
        old = sent.get(key, [])
        if len(new) > len(old) and new[:len(old)] == old:
            out[key] = new[len(old):]
        elif len(new) == len(old) == HISTORY and new[:-1] == old[1:]:
            out[key] = new[-1:]
        else:
            return None
    return out


async def watch(run_id: str) -> int:
    from ..run.run import Run

    out = sys.stdout.buffer
    rep = Reporter(out)
    try:
        run = Run.open(run_id)
    except Exception as e:
        rep.send({"error": f"cannot open run {run_id}: {e}"})
        return 1
    rep.offsets = run.offsets  # updated before each line reaches on_line: a subscription starts exactly there
    run.listeners.append(rep.on_event)
    run.line_listeners.append(rep.on_line)
    rep.send({"ready": len(run.rd.event_lines())})
    loop = asyncio.get_running_loop()
    niced = asyncio.ensure_future(_own_group())  # (tried again for a while if the kernel refuses it for now)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    pending = bytearray()
    loop.add_reader(sys.stdin.fileno(), lambda: _command(run, rep, stop, pending))

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
            rep.flush(quiet=True)
            rep.send({"error": f"watching stopped: {watching.exception()}"})
            code = 1
    except BrokenPipeError:
        code = 0
    finally:
        # one cancellation, and time for the watch's own clean-up (it cancels and awaits its watchers):
        # cancelling it again every 0.1 s, as before, cut that clean-up short and left its watchers to
        # asyncio's final cancel alone. A watch still running after CANCEL_GRACE_S lost a cancellation
        # (asyncio.wait_for on Python 3.11, see core/run/barrier.py checkpoint): say where, cancel again.
        for wait in (CANCEL_GRACE_S, 0.5, 0.5, 0.5):
            if watching.done():
                break
            watching.cancel()
            await asyncio.wait({watching}, timeout=wait)
            if not watching.done():
                where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in watching.get_stack(limit=8))
                print(f"watcher: the watch still running {wait:g} s after its cancellation, at {where}",
                      file=sys.stderr, flush=True)
        flushing.cancel()
        stopping.cancel()
        niced.cancel()
        try:
            rep.flush(quiet=True)  # everything held (pairs, quiet lines) goes
        except (BrokenPipeError, OSError):
            pass
        try:
            await run.close()  # saves where it read each log
        except Exception:
            pass
    return code


async def _own_group() -> bool:
    """Lower this process's scheduling group to GROUP_NICE below its console's (the parent's) group, only when it
    leads a session of its own: otherwise that group is the console's, and would be lowered with it."""
    from ..run.schedgroup import group_nice, group_nice_of

    if os.getsid(0) != os.getpid():
        return False
    return await group_nice(os.getpid(), min(19, group_nice_of(os.getppid()) + GROUP_NICE))


def _command(run, rep: Reporter, stop: asyncio.Event, pending: bytearray) -> None:
    """Commands from the console on stdin, one a line; end of file means the console went away."""
    try:
        data = os.read(sys.stdin.fileno(), 65536)
    except OSError:
        data = b""
    if not data:
        asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
        stop.set()
        return
    pending += data
    *lines, rest = bytes(pending).split(b"\n")
    pending[:] = rest
    for raw in lines:
        word, _, arg = raw.strip().partition(b" ")
        if word == b"stopping":
            # Run.teardown sets this on the Run that tears down; this session's Run learns it here, so
            # the exits that follow are recorded as stops, not as crashes that fail the run
            run.stopping = True
            rep.flush()
            rep.send({"stopping": True})
        elif word == b"lines":
            try:
                names = json.loads(arg or b"[]")
            except ValueError:
                continue
            rep.want({str(n) for n in names})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m atomdeck.core.cli.watcher RUN_ID", file=sys.stderr)
        return 2
    return run_bounded(watch(args[0]))


def run_bounded(coro, grace_s: float = 2.0) -> int:
    """asyncio.run, except that the tasks left when `coro` returns get `grace_s` to end once cancelled.
    asyncio.run waits for them without a bound: a watcher whose console had died (its stdin closed)
    stayed alive for good, in Runner.close, because one task of Run.watch never finished after its
    cancellation. The stuck tasks are named on stderr (the run's watcher.log), then the process exits."""
    loop = asyncio.new_event_loop()
    code = 0
    try:
        code = loop.run_until_complete(coro)
    except BrokenPipeError:
        code = 0
    finally:
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in left:
            t.cancel()
        if left:
            _, stuck = loop.run_until_complete(asyncio.wait(left, timeout=grace_s))
            if stuck:
                names = ", ".join(sorted(f"{t.get_name()} {t.get_coro()!r}" for t in stuck))
                print(f"watcher: {len(stuck)} task(s) still running {grace_s:g} s after their cancellation, "
                      f"exiting anyway: {names}", file=sys.stderr, flush=True)
                try:
                    sys.stdout.flush()
                except (BrokenPipeError, OSError):
                    pass
                os._exit(code)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
