"""Hang forensics (issue 39): a snapshot of every rank of every process of a run, gathered from the nodes at once.

On each node one script (core/launch/scripts/snapshot.sh, run through the run's launcher: a local shell, the
node's SSH connection, an `srun --overlap` step) reads each process's tree from /proc, dumps the Python members
with py-spy (a bounded number at once) and lists the node's TCP connections. Meanwhile each worker's /metrics
(running, waiting) and the router's per-worker in-flight count are read. Nodes are asked at most NODE_FANOUT at a
time; a node that does not answer is marked and the others are still shown. The result can be bundled as a
tar.gz in the run directory (one file per node, process and rank; secrets redacted).

py-spy: this machine's (the py-spy wheel's static binary, a dependency of atomdeck) for the local launcher; on a
node, py-spy on its PATH or one copied to `remote_dir/bin` (`install_pyspy`: over SFTP for ssh, `sbcast` for
Slurm). Without it, or when ptrace is denied, the /proc, socket and log parts are still shown, and why there is
no stack is said with the fix.
"""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.errors import AtomdeckError
from ..launch.base import script
from ..remote.probes import HttpClient
from ..remote.shell import low_priority
from .diagnose import own_check
from .snapshot import ProcSnap, Rank, Snapshot, group, name_peers, parse_node
from .watchers.metrics import ATOM_NAMES, ROUTER_NAMES, atom_values, parse_wanted, router_values

if TYPE_CHECKING:
    from .actor import Run

SNAPSHOT_SCRIPT = script("snapshot")
NODE_FANOUT = 16     # nodes asked at once (a 128-node run: 8 rounds, never 128 connections' worth of work at once)
SPY_PARALLEL = 4     # py-spy dumps at once on one node (each pauses its process for a moment)
NODE_TIMEOUT_S = 60.0
METRICS_TIMEOUT_S = 2.0
CAP_SYS_PTRACE = 19


def local_pyspy() -> str:
    """This machine's py-spy: the one beside this Python (the wheel's binary), else one on PATH, else ""."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else (shutil.which("py-spy") or "")


def pick(run: Run, names: list[str] | None) -> list[str]:
    """The processes asked for (all by default), refusing a name the run does not have."""
    known = list(run.processes)
    if run.state.status == "stopped":
        raise AtomdeckError(f"run {run.id} is torn down: there is nothing to snapshot (`atomdeck runs` lists the live "
                         f"ones)")
    if not names:
        return known
    unknown = [n for n in names if n not in known]
    if unknown:
        raise AtomdeckError(f"run {run.id} has no process {', '.join(unknown)}; its processes: {', '.join(known)}")
    return names


async def take(run: Run, names: list[str] | None = None, *, spy_parallel: int = SPY_PARALLEL,
               node_fanout: int = NODE_FANOUT) -> Snapshot:
    """One snapshot of the named processes (every one by default)."""
    names = pick(run, names)
    t0, taken_at = time.monotonic(), time.time()
    spy = local_pyspy() if run.cluster.launcher == "local" else ""
    spy_dir = f"{run.cluster.remote_dir}/bin"
    by_node: dict[str, list[str]] = {}
    for n in names:  # (the local launcher's nodes too: one script each, as a cluster's, bounded the same way)
        by_node.setdefault(run.processes[n].node, []).append(n)
    roles = {n: run.processes[n].role for n in names}
    procs = {n: ProcSnap(n, run.processes[n].node, run.processes[n].role) for n in names}
    nodes: dict[str, str] = {}
    pyspy: dict[str, str] = {}
    conns: list[tuple] = []
    gate = asyncio.Semaphore(node_fanout)
    low = low_priority(run.cluster.launcher)

    def unanswered(node: str, members: list[str], why: str) -> None:
        nodes[node] = f"did not answer: {why}"
        for n in members:
            procs[n].error = f"{node} did not answer: {why}"

    async def one(node: str, members: list[str]) -> None:
        items = []
        for n in members:
            h = run.handles.get(n)
            if h is None or not h.pid:
                procs[n].error = "never started (no handle)"
                continue
            items.append(f"{n}:{h.pid}:{'native' if roles[n] == 'router' else 'python'}")
        if not items:
            return
        async with gate:
            try:
                res = await run.launcher.node_run(node, [*low, "sh", "-c", SNAPSHOT_SCRIPT, "snapshot", spy, spy_dir,
                                                         str(spy_parallel), *items], timeout=NODE_TIMEOUT_S)
            except (TimeoutError, OSError, AtomdeckError) as e:
                return unanswered(node, members, str(e))
        if not res.ok and "== node" not in res.stdout:
            err = (res.stderr or res.stdout).strip().splitlines()
            return unanswered(node, members, f"its snapshot command exited {res.rc}: "
                                             f"{err[-1] if err else '(no output)'}")
        # (in a thread: a node's 8 ranks are ~50 KB of py-spy JSON, 128 nodes' are MBs; the console's loop keeps
        # its keys while they are read)
        facts, trees, node_conns = await asyncio.to_thread(parse_node, res.stdout, roles)
        nodes[node] = "ok"
        pyspy[node] = _pyspy_word(facts, trees)
        mine = {r.pid for ranks in trees.values() for r in ranks}  # (a node's `ss` lists every process's)
        conns.extend(c for c in node_conns if set(c[3]) & mine)
        for n in members:
            ranks = trees.get(n, [])
            if not ranks and not procs[n].error:
                procs[n].error = "gone: no process of it on its node"
            procs[n].ranks = ranks

    _, (queues, in_flight) = await asyncio.gather(
        asyncio.gather(*(one(node, members) for node, members in by_node.items())), _queues(run, names))
    ports = {(p.host, port): p.name for p in run.processes.values() for port in p.ports}
    peers = name_peers(conns, ports)
    for n, p in procs.items():
        p.queues = queues.get(n, {})
        p.router_in_flight = in_flight.get(n)
        for r in p.ranks:
            r.connections = peers.get(r.pid, [])
            r.cmdline = run.redact(r.cmdline)  # (an --api-key on a command line stays on the node)
        p.last_lines = [run.redact(line) for line in await _last_lines(run, n)]
    snap = Snapshot(run.id, taken_at, round(time.monotonic() - t0, 3), list(procs.values()), nodes, pyspy)
    snap.groups = group(snap.procs)
    return snap


async def install_pyspy(run: Run, names: list[str] | None = None) -> list[str]:
    """Copy this machine's py-spy (the wheel's static binary) to `remote_dir/bin/py-spy` on every node of the named
    processes, through the run's launcher. One line per node of what was done."""
    src = local_pyspy()
    if not src:
        raise AtomdeckError("this machine has no py-spy to copy (it comes with atomdeck: reinstall with "
                            "`pip install atomdeck`, or `pip install py-spy`)")
    if run.cluster.launcher == "local":
        return [f"this machine: py-spy at {src} (nothing to copy)"]
    nodes = sorted({run.processes[n].node for n in pick(run, names)})
    dest = f"{run.cluster.remote_dir}/bin/py-spy"
    if run.cluster.launcher == "slurm":  # one `sbcast` writes it on every node of the job (one per node raced)
        try:
            await run.launcher.put_file(nodes[0], src, dest)
            return [f"{node}: py-spy copied to {dest}" for node in nodes]
        except (OSError, AtomdeckError) as e:
            return [f"{node}: could not copy py-spy to {dest}: {e}" for node in nodes]

    async def one(node: str) -> str:
        try:
            await run.launcher.put_file(node, src, dest)
            return f"{node}: py-spy copied to {dest}"
        except (OSError, AtomdeckError) as e:
            return f"{node}: could not copy py-spy to {dest}: {e}"

    return list(await asyncio.gather(*(one(n) for n in nodes)))


def _pyspy_word(facts: dict[str, str], trees: dict[str, list[Rank]]) -> str:
    """Where py-spy is on the node, or why there are no stacks (and the fix)."""
    spy = facts.get("spy", "none")
    if spy == "none":
        return ("missing: py-spy is not on this node's PATH (nor its container's); copy the one atomdeck ships with "
                "`atomdeck snapshot RUN --install-py-spy`")
    errors = [r.stack_error for ranks in trees.values() for r in ranks if r.stack_error.startswith("ptrace denied")]
    if errors:
        hidden = not any(r.exe for ranks in trees.values() for r in ranks)
        return (f"ptrace denied ({_ptrace_fix(facts)}): {errors[0].removeprefix('ptrace denied: ')}" +
                ("; the same refusal hides their executables, wait channels, syscalls and which sockets are "
                 "theirs (states, titles, threads and logs are shown)" if hidden else ""))
    return spy


def _ptrace_fix(facts: dict[str, str]) -> str:
    scope = facts.get("ptrace_scope", "-")
    try:
        cap = int(facts.get("capeff", "0"), 16) >> CAP_SYS_PTRACE & 1
    except ValueError:
        cap = 0
    if facts.get("uid") != "0" and scope not in ("-", "0"):
        return (f"kernel.yama.ptrace_scope={scope} lets only a parent trace; run as root, or `sysctl "
                f"kernel.yama.ptrace_scope=0` on the node")
    if not cap:
        return ("no CAP_SYS_PTRACE: a container without SYS_PTRACE (docker `--cap-add SYS_PTRACE`), or py-spy run "
                "as another user")
    return "see the error"


async def _queues(run: Run, names: list[str]) -> tuple[dict[str, dict], dict[str, float]]:
    """Each worker's running and waiting (its /metrics) and the router's in-flight count per worker."""
    http = HttpClient()
    queues: dict[str, dict] = {}
    in_flight: dict[str, float] = {}

    async def worker(n: str) -> None:
        ep = run.plan.endpoint(n)
        try:
            r = await http.get(ep.host, ep.http_port, "/metrics", METRICS_TIMEOUT_S, run.launcher.probe_runner(ep.node))
            if r.status == 200:
                vals = atom_values(parse_wanted(r.body.decode(errors="replace"), ATOM_NAMES))
                queues[n] = {k: vals[k] for k in ("requests_running", "requests_waiting") if k in vals}
            else:
                queues[n] = {"error": f"GET /metrics: {r.status or r.error}"}
        except (TimeoutError, OSError, ValueError) as e:
            queues[n] = {"error": f"GET /metrics: {e}"}

    async def router() -> None:
        rt = run.plan.router
        try:
            r = await http.get(rt.host, rt.prometheus_port, "/metrics", METRICS_TIMEOUT_S,
                               run.launcher.probe_runner(rt.node))
            if r.status == 200:
                _, workers = router_values(parse_wanted(r.body.decode(errors="replace"), ROUTER_NAMES))
                for n in names:
                    if n != "router":
                        url = run.plan.endpoint(n).url.rstrip("/")
                        if url in workers and "active" in workers[url]:
                            in_flight[n] = workers[url]["active"]
        except (TimeoutError, OSError, ValueError):
            pass

    try:
        await asyncio.gather(router(), *(worker(n) for n in names if n != "router"))
    finally:
        await http.aclose()
    return queues, in_flight


async def _last_lines(run: Run, name: str, last: int = 8) -> list[str]:
    """The process's last lines, atomdeck's own checks' access-log lines left out."""
    try:
        async with asyncio.timeout(10):
            lines = await run.log_lines(name, last * 8)
        return [line for line in lines if not own_check(line)][-last:]
    except (TimeoutError, OSError, AtomdeckError) as e:
        return [f"(log not readable: {e})"]


def bundle(snap: Snapshot, run_dir: Path) -> Path:
    """snapshots/<time>.tar.gz in the run directory: snapshot.json, and one text file per node, process and rank
    (its /proc facts, connections and stack), ready to attach to a bug report. Command lines and log lines are
    already redacted; environments are never read."""
    out = run_dir / "snapshots"
    out.mkdir(mode=0o700, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(snap.taken_at))
    path = out / f"snapshot-{stamp}.tar.gz"
    snap.bundle = str(path)
    with tarfile.open(path, "w:gz") as tar:
        def add(name: str, text: str) -> None:
            data = text.encode()
            info = tarfile.TarInfo(f"snapshot-{stamp}/{name}")
            info.size, info.mtime, info.mode = len(data), int(snap.taken_at), 0o600
            tar.addfile(info, io.BytesIO(data))

        add("snapshot.json", json.dumps(snap.to_json(), indent=1, default=str))
        for p in snap.procs:
            add(f"{p.node}/{p.name}/last-lines.txt", "\n".join(p.last_lines) + "\n")
            for r in p.ranks:
                add(f"{p.node}/{p.name}/{r.pid}-{r.label.replace('/', '_').replace(' ', '_')}.txt", rank_text(r))
    path.chmod(0o600)
    return path


def rank_text(r: Rank) -> str:
    lines = [f"pid {r.pid} (parent {r.ppid}) {r.label}: {r.kind}", f"state {r.state} wchan {r.wchan or '-'} "
             f"syscall {r.syscall or '-'} threads {r.threads}", f"exe {r.exe}", f"cmdline {r.cmdline}"]
    lines += [f"tcp {c.state} {c.local} -> {c.peer} {c.peer_name}".rstrip() for c in r.connections]
    if r.stack:
        lines.append("stack (innermost first):")
        lines += [f"  {f.name} ({f.file}:{f.line})" for f in r.stack]
    else:
        lines.append(f"no stack: {r.stack_error or 'not a Python process'}")
    return "\n".join(lines) + "\n"
