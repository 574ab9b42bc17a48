"""The local launcher's starter: one process that starts a launch's processes, all in one session.

Run by LocalLauncher.start_many as `python -I starter.py` in a session of its own (standard library only,
nothing of atomdeck is imported). It reads the processes from stdin as JSON:

    {"cwd": RUN_DIR, "procs": [{"name": N, "argv": [...], "env": {K: V}, "log": PATH, "exit": PATH,
                               "child": PATH}, ...]}

and starts each with posix_spawn in its own process group (the group teardown signals), in the starter's
session, with stdin from /dev/null and stdout and stderr appended to its log. For each it prints one JSON
line, `["started", NAME, PID]` or `["failed", NAME, ERRNO, TEXT]`, then closes its output, so the
console's read ends, and stays to reap them. When a process ends by a signal without writing its exit-code
file (its supervisor was killed), the starter writes 128+N there before it reaps it, so whoever reads the file
later learns how it ended; unless the supervisor's child (its PID in the "child" file) still runs: then the
engine outlived its supervisor, and its liveness is the launcher's to read (local.py), not a code to write.

Why one session for them all: with the kernel's autogroups (sched_autogroup_enabled, the default of most
distributions) every session is a scheduling group with the same share of the CPU as the console's. When
each of 129 local simulators had a session of its own, the console got about 1/130 of the two cores while they
booted. Why a process of its own: Popen in the console held its GIL through each fork until the child exec'd.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def _write_exit(path: str, code: int) -> None:
    """Write the exit-code file as the supervisor does (a temporary file, then renamed), if it is missing."""
    if not path or os.path.exists(path):
        return
    tmp = f"{path}.{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            f.write(f"{code}\n")
        os.replace(tmp, path)
    except OSError:
        pass


CHILD_DIES_S = 0.5  # a group killed at once: its engine may take this long to die after its supervisor


def _child_lives(path: str) -> bool:
    """The PID in the supervisor's child file stays a live process (not a zombie) for CHILD_DIES_S: a SIGKILL
    to the whole group ends the supervisor first, and an engine with much memory takes a moment to be gone."""
    until = time.monotonic() + CHILD_DIES_S
    while _alive(path):
        if time.monotonic() >= until:
            return True
        time.sleep(0.01)
    return False


def _alive(path: str) -> bool:
    try:
        with open(path) as f:
            pid = int(f.read().strip())
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (OSError, ValueError):
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def start(procs: list[dict], out) -> dict[int, tuple[str, str]]:
    """Start each process; say how each went on `out`. Returns pid -> (its exit-code file, its child file)."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    exits: dict[int, tuple[str, str]] = {}
    for p in procs:
        try:
            fd = os.open(p["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                pid = os.posix_spawnp(
                    p["argv"][0], p["argv"], {**os.environ, **p.get("env", {})},
                    file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, fd, 1),
                                  (os.POSIX_SPAWN_DUP2, fd, 2)],
                    setpgroup=0,  # its own process group, which teardown signals; the starter's session
                    setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))  # as Popen: Python ignores these
            finally:
                os.close(fd)
        except OSError as e:
            out.write(json.dumps(["failed", p["name"], e.errno or 0, f"{e.strerror or e}: {e.filename or ''}"
                                  .rstrip(": ")]) + "\n")
        else:
            exits[pid] = (p.get("exit", ""), p.get("child", ""))
            out.write(json.dumps(["started", p["name"], pid]) + "\n")
        out.flush()
    os.close(devnull)
    return exits


def reap(exits: dict[int, tuple[str, str]]) -> None:
    """Wait for every child; a child ended by a signal gets its exit-code file first, if it has none and its
    own child (the engine) does not live on."""
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if info is None:
            continue
        exit_path, child = exits.get(info.si_pid, ("", ""))
        if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) and not _child_lives(child):
            _write_exit(exit_path, 128 + info.si_status)
        try:
            os.waitpid(info.si_pid, 0)
        except ChildProcessError:
            pass
        exits.pop(info.si_pid, None)


def main() -> int:
    req = json.loads(sys.stdin.read())
    os.chdir(req["cwd"])
    exits = start(req["procs"], sys.stdout)
    # the console reads until both pipes close; the processes keep nothing of them (their fds are the log's)
    sink = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(sink, fd)
    os.close(sink)
    reap(exits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
