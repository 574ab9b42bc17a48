"""ATOM's process tree below the API server: one EngineCore process per DP rank, one model-runner process per
TP rank under it, with ATOM's titles, parent links, signal handling and orphan reaping.

What the real program does (ROCm/ATOM head ffdf3bb5; the router pin 087b82d9 where it differs):
- atom/model_engine/engine_core_mgr.py (``CoreManager.__init__``, ``launch_engine_core``): the server process
  starts one ``EngineCore-DP{d}`` process per DP rank (``--enable-dp-attention``: tp*dp ranks of TP1).
- atom/model_engine/engine_core.py (``EngineCore.run_engine``): the EngineCore arms orphan reaping and titles
  itself ``EngineCore`` (one DP rank) or ``EngineCore_DP{d}``; its ``busy_loop`` waits for input.
- atom/model_engine/async_proc.py (``AsyncIOProcManager``): the EngineCore starts one ``AsyncIOProc`` per TP
  rank, named ``ModelRunner{r}/{n}``, each titled ``TP{r}`` (one DP rank) or ``DP{d}TP{r}``, each arming orphan
  reaping; its ``busy_loop`` waits in ``get_func`` -> ``rpc_broadcast_mq.dequeue()``. ``monitor_procs`` waits on
  the ranks' sentinels and logs ``AsyncIOProcManager(ModelRunner): [ModelRunner{r}/{n}] proc died unexpectedly
  (exitcode={c}), shutting down.``, then ``exit()`` logs ``... shutdown all runners...``, terminates the others
  (``shutdown_all_processes``: SIGTERM, 1 s, SIGKILL) and ``... All runners are shutdown.``.
- atom/utils/__init__.py: ``set_process_title`` sets ``{ATOM_PROCESS_NAME_PREFIX}::{name}`` (prefix ``ATOM``)
  with the ``setproctitle`` package (comm and cmdline; it also blanks /proc/PID/environ unless ``SPT_NOENV`` is
  set); ``enable_orphan_reaping`` is ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` and exits at once if the parent is
  already gone; ``init_exit_handler`` ignores SIGINT and logs ``{label}: received signal 15 (SIGTERM),
  exiting...`` on SIGTERM (the last handler set wins: ``AsyncIOProcManager(ModelRunner)`` in an EngineCore,
  ``Model Runner{r}/{n}`` in a rank, from model_runner.py).
- At the pin there is neither ``set_process_title`` nor ``enable_orphan_reaping``: the processes keep the
  command line multiprocessing's spawn gives them, and a SIGKILLed parent leaves its EngineCore and ranks running
  as orphans (ROCm/ATOM #1511: they kept their GPU memory and the next run crashed).

Where this differs: the real processes are started with multiprocessing's ``spawn`` (a new interpreter each);
here they are forked from the server before Mooncake starts (the same tree, titles and links, at a fraction of
the memory: 1,152 ranks run on one machine in the 128-node benchmark). The pin's spawn command line is set as
the title, with /proc/PID/environ kept as the real pin keeps it. The engines' work is modelled in the server
(scheduler.py), not in the ranks; a rank only waits for work, as an idle real one does.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import atomlog

PR_SET_PDEATHSIG = 1
RUNNERS_GRACE_S = 1.0   # shutdown_all_processes(allowed_seconds=1)
CORES_GRACE_S = 5.0     # CoreManager.close(): one 5 s deadline for all EngineCores


def prefix() -> str:
    return os.environ.get("ATOM_PROCESS_NAME_PREFIX", "ATOM")


@dataclass(frozen=True)
class Rank:
    """One model-runner process of one EngineCore."""

    dp_rank: int
    tp_rank: int
    tp: int
    dp: int

    @property
    def name(self) -> str:
        """multiprocessing's process name (async_proc.py): what the death line names."""
        return f"ModelRunner{self.tp_rank}/{self.tp}"

    @property
    def title(self) -> str:
        return f"DP{self.dp_rank}TP{self.tp_rank}" if self.dp > 1 else f"TP{self.tp_rank}"

    def matches(self, spec: str) -> bool:
        """``3``, ``TP3``, ``DP1TP0`` or ``ModelRunner3/8`` name this rank (a bare TP rank means DP rank 0)."""
        s = spec.strip()
        if s.isdigit():
            return self.dp_rank == 0 and self.tp_rank == int(s)
        if s.upper().startswith("TP") and s[2:].isdigit():
            return self.dp_rank == 0 and self.tp_rank == int(s[2:])
        return s in (self.title, self.name)


def core_title(dp_rank: int, dp: int) -> str:
    return f"EngineCore_DP{dp_rank}" if dp > 1 else "EngineCore"


def spawn_cmdline() -> str:
    """What multiprocessing's spawn start method runs (multiprocessing/spawn.py get_command_line), as ps shows
    it for the pin's processes, which set no title."""
    return (f"{sys.executable} -c from multiprocessing.spawn import spawn_main; "
            f"spawn_main(tracker_fd=5, pipe_handle=7) --multiprocessing-fork")


def _set_title(name: str, rev: str) -> None:
    if rev == "pin":
        os.environ["SPT_NOENV"] = "1"  # the pin calls no setproctitle: its environ stays readable
        title = spawn_cmdline()
    else:
        title = f"{prefix()}::{name}"
    try:
        import setproctitle
    except ImportError:  # a soft dependency in ATOM too (set_process_title is a no-op without it)
        return
    setproctitle.setproctitle(title)


def _arm_orphan_reaping(parent: int) -> None:
    """enable_orphan_reaping: the kernel SIGKILLs this process when its parent exits."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died between the fork and the prctl
        os._exit(1)


def _forked(rev: str, parent: int) -> None:
    """A forked child starts clean: no event loop's wakeup fd, its own log lock, no garbage collection of the
    server's objects (they stay shared with the server, copy-on-write)."""
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # init_exit_handler: the server handles Ctrl-C
    atomlog.reset_lock()
    _current.clear()  # the server's tree is not this process's to close
    gc.disable()
    if rev != "pin":
        _arm_orphan_reaping(parent)


def fork_process(target: Callable[..., None], *args) -> int:
    """Start `target(*args)` in a forked child whose Python stack is shallow: the fork happens in a thread of its
    own, so the child's stack begins where a spawned process's does (spawn_main -> _main -> target), not with the
    parent's frames (py-spy shows what a real rank shows). The thread lives as long as the process: the kernel's
    PR_SET_PDEATHSIG fires when the *thread* that forked a child exits (ATOM's enable_orphan_reaping says so).
    Returns the child's PID."""
    if not _spawner:
        requests: queue.Queue = queue.Queue()
        threading.Thread(target=spawn_main, args=(requests,), name="spawn", daemon=True).start()
        _spawner.append(requests)
    reply: queue.Queue = queue.Queue()
    _spawner[0].put((target, args, reply))
    return reply.get()


_spawner: list[queue.Queue] = []


# signals a process's Python handlers wait for: a thread of ours blocks them, so the kernel hands them to the main
# thread (a signal taken by a thread blocked in a queue would leave the main thread's blocking read uninterrupted,
# and the handler would not run until that read returned)
HANDLED = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGCHLD}


def quiet_thread() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)


def spawn_main(requests: queue.Queue) -> None:
    quiet_thread()
    while True:
        target, args, reply = requests.get()
        pid = os.fork()
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED)  # the child's main thread takes its signals
            threading.current_thread().name = "MainThread"  # the forking thread is the child's main thread
            _spawner.clear()
            try:
                _main(target, args)
            finally:
                os._exit(1)
        reply.put(pid)


def _main(target: Callable[..., None], args: tuple) -> None:
    try:
        target(*args)
    except BaseException:  # a simulator bug: say where, as a crashed real process would
        import traceback

        traceback.print_exc()
        raise


def exitcode(status: int) -> int:
    """multiprocessing's Process.exitcode: the exit code, or minus the signal that ended it."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.waitstatus_to_exitcode(status)


# ---- a rank (model-runner process) --------------------------------------------------------------------------

def AsyncIOProc(rank: Rank, rev: str, parent: int, leave_group: bool, calls: int) -> None:
    """A model-runner process (async_proc.py AsyncIOProc): titled, then waiting for the EngineCore's calls
    (`calls`: the read end of its broadcast queue)."""
    _forked(rev, parent)
    label = f"Model Runner{rank.tp_rank}/{rank.tp}"

    def on_term(signum, _frame):
        atomlog.atom(f"{label}: received signal {signum} ({signal.Signals(signum).name}), exiting...")
        atomlog.hard_exit(0)

    signal.signal(signal.SIGTERM, on_term)
    if leave_group:  # ATOMSIM_RANK_SETSID: a rank that left its process group (and session)
        os.setsid()
    _set_title(rank.title, rev)
    hold_gpu_memory(rank)
    busy_loop(calls, rank)


# ---- the rank's GPU memory (gpus.py) ------------------------------------------------------------------------

GPU_MEMORY = {"utilization": 0.9}  # --gpu-memory-utilization, set by the server before it forks (worker.py)


def hold_gpu_memory(rank: Rank) -> None:
    """The rank holds its share of its GPU for as long as it lives (the amd-smi stand-in reads it): ATOM's
    model_runner.py puts rank r of EngineCore d on device ``d * tp + r`` and sizes its KV cache to
    ``total * gpu_memory_utilization``."""
    from . import gpus

    gpus.hold_rank_memory(rank.dp_rank * rank.tp + rank.tp_rank, GPU_MEMORY["utilization"])


def busy_loop(calls: int, rank: Rank) -> None:
    """async_proc.py AsyncIOProc.busy_loop: run each call of the EngineCore."""
    while True:
        func, arg = get_func(calls)
        if func == "execute_model":
            execute_model(rank, arg)


def get_func(calls: int) -> tuple[str, str]:
    func, _, arg = dequeue(calls).partition(" ")
    return func, arg


def dequeue(fd: int) -> str:
    """The shared-memory broadcast queue's dequeue: one line from the EngineCore. Once the EngineCore is gone
    (end of file) it waits forever, as a real orphaned rank waits on its queue."""
    line = _read_line(fd)
    if line is None:
        return wait_forever()
    return line


def execute_model(rank: Rank, hung: str) -> None:
    """The forward pass: every rank meets the others in a collective. ``ATOMSIM_RANK_HANG`` names the rank that
    never arrives: it sits in a blocking receive from its peer, and the others wait in the all-reduce for it."""
    all_reduce(rank, rank.matches(hung))


def all_reduce(rank: Rank, stuck: bool) -> None:
    if stuck:
        recv_from_peer()
    wait_for_peers()


def recv_from_peer() -> bytes:
    """A receive from a peer that never sends (a socket pair this process holds both ends of)."""
    import socket

    a, b = socket.socketpair()
    _keep.append((a, b))
    return a.recv(1)


def wait_for_peers() -> str:
    return wait_forever()


_keep: list[object] = []
_idle: list[int] = []


def wait_forever() -> str:
    """A blocking read of a pipe this process holds both ends of: it never sees end-of-file."""
    if not _idle:
        _idle.extend(os.pipe())
    return os.read(_idle[0], 1).decode()


def _read_line(fd: int) -> str | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 1)
        if not chunk:
            return None
        data += chunk
    return data.decode().strip()


# ---- an EngineCore ------------------------------------------------------------------------------------------

def run_engine(dp_rank: int, tp: int, dp: int, rev: str, parent: int, pipes: tuple[int, int, int],
               setsid_rank: str | None) -> None:
    """An EngineCore process (engine_core.py EngineCore.run_engine): titled, starts its ranks, then waits for
    work from the server (`pipes`: the ready pipe's two ends and the read end of the server's calls) while a
    thread waits for a rank to die."""
    os.close(pipes[0])
    ready_w, inputs = pipes[1], pipes[2]
    _forked(rev, parent)
    manager = "AsyncIOProcManager(ModelRunner)"
    me = os.getpid()
    ranks: dict[int, Rank] = {}
    stopping = threading.Event()

    def stop_runners(code: int) -> None:
        """AsyncIOProcManager.exit + shutdown_all_processes: SIGTERM the ranks, 1 s, SIGKILL, then leave."""
        stopping.set()
        atomlog.atom(f"{manager}: shutdown all runners...")
        for pid in list(ranks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + RUNNERS_GRACE_S
        while ranks and time.monotonic() < deadline:
            _reap(ranks, block=False)
            time.sleep(0.02)
        for pid in list(ranks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        while ranks:
            _reap(ranks, block=True)
        atomlog.atom(f"{manager}: All runners are shutdown.")
        atomlog.hard_exit(code)

    def on_term(signum, _frame):
        if stopping.is_set():
            return
        atomlog.atom(f"{manager}: received signal {signum} ({signal.Signals(signum).name}), exiting...")
        stop_runners(0)

    signal.signal(signal.SIGTERM, on_term)
    _set_title(core_title(dp_rank, dp), rev)
    broadcast: list[int] = []
    for tp_rank in range(tp):
        rank = Rank(dp_rank, tp_rank, tp, dp)
        r, w = os.pipe()
        pid = fork_process(AsyncIOProc, rank, rev, me, bool(setsid_rank) and rank.matches(setsid_rank or ""), r)
        os.close(r)
        ranks[pid] = rank
        broadcast.append(w)
    os.write(ready_w, (json.dumps({"dp_rank": dp_rank, "pid": me,
                                   "ranks": {str(p): r.title for p, r in ranks.items()}}) + "\n").encode())
    os.close(ready_w)
    monitor_procs(ranks, stopping, lambda: stop_runners(1), manager)
    core_busy_loop(inputs, broadcast)


def core_busy_loop(inputs: int, broadcast: list[int]) -> None:
    """engine_core.py EngineCore.busy_loop: take the server's next input and run a step of the model on every
    rank (the broadcast queue), then wait for the ranks' output."""
    while True:
        line = pull_input(inputs)
        func, _, arg = line.partition(" ")
        if func == "hang":
            step(broadcast, arg)


def pull_input(fd: int) -> str:
    """The input socket: one line from the server; after the server is gone it waits forever (the pin's orphan
    EngineCore blocks on its input queue)."""
    line = _read_line(fd)
    return wait_forever() if line is None else line


def step(broadcast: list[int], hung: str) -> None:
    for fd in broadcast:
        os.write(fd, f"execute_model {hung}\n".encode())
    get_output()


def get_output() -> str:
    """The ranks' output (rank 0's socket): with a rank stuck in its collective it never comes."""
    return wait_forever()


def _reap(ranks: dict[int, Rank], block: bool) -> tuple[int, int] | None:
    try:
        pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
    except ChildProcessError:
        ranks.clear()
        return None
    if pid == 0:
        return None
    ranks.pop(pid, None)
    return pid, status


def monitor_procs(ranks: dict[int, Rank], stopping: threading.Event, shut_down: Callable[[], None],
                  manager: str) -> None:
    """async_proc.py AsyncIOProcManager.monitor_procs: a thread waits for the first rank to die."""
    def monitor_engine_cores() -> None:
        quiet_thread()
        watched = dict(ranks)
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or stopping.is_set():
                return
            rank = watched.get(info.si_pid)
            if rank is None:
                continue
            code = -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status
            # a SIGTERM to the process group reaches the ranks and this EngineCore at once: a rank that ended on
            # it is no death to report once this process's own handler has begun the shutdown (ATOM: exit()
            # clears keep_monitoring; its monitor first joins the dead process, up to 5 s)
            if stopping.wait(0.2):
                return
            atomlog.atom(f"{manager}: [{rank.name}] proc died unexpectedly (exitcode={code}), shutting down.")
            # on this thread, as async_proc.py's monitor calls self.exit() (a SIGUSR1 to the main thread raced
            # its blocking read: a signal that lands just before the read() leaves it blocked for good)
            shut_down()
            return

    threading.Thread(target=monitor_engine_cores, daemon=True, name="ModelRunnerMonitor").start()


_current: list = []  # the server's EngineTree (engine_tree.py), which a forked child must not close
