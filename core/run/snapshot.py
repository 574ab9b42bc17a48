"""Where every rank of every process is (issue 39), as data: what a node's snapshot script printed, parsed into
processes and ranks (kernel state, wait channel, current syscall, Python stacks from py-spy, TCP connections),
ranks with identical stacks grouped (the odd ones first), two snapshots compared (a rank whose stack did not change
did not move). Pure: the collection is forensics.py.

A worker on a real node is ATOM's tree (sim/proctree.py has the sources): the launcher's supervisor, the server
(`python3 -m atom.entrypoints.openai_server`), one EngineCore per DP rank (titled ATOM::EngineCore[_DPd] at
head) and one process per TP rank under it (ATOM::TPr, ATOM::DPdTPr). At the pin there are no titles: the
members are named by their place in the tree.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

# x86_64 syscall numbers of the calls a waiting process sits in (arch/x86/entry/syscalls/syscall_64.tbl)
SYSCALLS = {0: "read", 1: "write", 7: "poll", 23: "select", 35: "nanosleep", 42: "connect", 43: "accept",
            44: "sendto", 45: "recvfrom", 46: "sendmsg", 47: "recvmsg", 61: "wait4", 202: "futex",
            230: "clock_nanosleep", 232: "epoll_wait", 247: "waitid", 270: "pselect6", 271: "ppoll",
            281: "epoll_pwait", 288: "accept4", 441: "epoll_pwait2"}
STATES = {"R": "running", "S": "sleeping", "D": "uninterruptible (disk or driver)", "T": "stopped", "t": "traced",
          "Z": "zombie", "I": "idle"}
_USERS = re.compile(r'\("([^"]*)",pid=(\d+),fd=\d+\)')
_EXE = re.compile(r"/proc/(\d+)/exe -> (.*)$")                     # `ls -l` of the members' exe links
_CMDLINE = re.compile(r"==> (?:/proc/(\d+)/cmdline|[^<]*) <== ?")   # `head` of their command lines, on one line


@dataclass
class Frame:
    name: str
    file: str
    line: int

    def short(self) -> str:
        return self.name


@dataclass
class Conn:
    state: str
    local: str
    peer: str
    peer_name: str = ""  # "prefill-1:6302" when the peer is a port of this run


@dataclass
class Rank:
    """One process of a worker's (or the router's) tree."""

    pid: int
    ppid: int
    kind: str            # supervisor | server | EngineCore | rank | router | other
    title: str           # ATOM::TP3, EngineCore, server, ...
    state: str = ""
    wchan: str = ""
    syscall: str = ""
    threads: int = 0
    exe: str = ""
    cmdline: str = ""
    stack: list[Frame] = field(default_factory=list)   # the main thread's, innermost first
    other_threads: int = 0                              # threads py-spy saw besides the main one
    stack_error: str = ""
    connections: list[Conn] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.title or f"{self.kind} {self.pid}"

    def where(self, depth: int = 3) -> str:
        """'recv_from_peer <- all_reduce <- execute_model', or the kernel's view when there is no stack."""
        if self.stack:
            return " <- ".join(f.name for f in self.stack[:depth])
        kernel = self.syscall or self.wchan
        if kernel:
            return f"({kernel})"
        why = "ptrace denied" if self.stack_error.startswith("ptrace denied") else self.stack_error or "no stack"
        return f"({STATES.get(self.state, self.state)}; {why})" if self.state else f"({why})"

    def signature(self) -> tuple:
        return tuple((f.name, f.file) for f in self.stack) if self.stack else ("kernel", self.syscall, self.wchan)


@dataclass
class ProcSnap:
    name: str
    node: str
    role: str
    ranks: list[Rank] = field(default_factory=list)
    error: str = ""                       # the node did not answer, the process is gone
    queues: dict = field(default_factory=dict)      # the worker's own running / waiting (from its /metrics)
    router_in_flight: float | None = None         # mesh_worker_requests_active for this worker
    last_lines: list[str] = field(default_factory=list)

    def stacked(self) -> list[Rank]:
        """The members worth grouping: the server, EngineCores and ranks (the supervisor only waits for its child)."""
        return [r for r in self.ranks if r.kind != "supervisor"]


@dataclass
class Group:
    """Ranks of one process with the same stack."""

    process: str
    members: list[str]
    where: str
    odd: bool


@dataclass
class Snapshot:
    run: str
    taken_at: float
    took_s: float
    procs: list[ProcSnap]
    nodes: dict[str, str]                   # node -> "ok" or what went wrong
    pyspy: dict[str, str]                   # node -> where py-spy is, or why there is none / it cannot read
    groups: list[Group] = field(default_factory=list)
    bundle: str = ""

    def to_json(self) -> dict:
        return asdict(self)


# ---- parsing what the node script printed ------------------------------------------------------------------

def parse_node(text: str, roles: dict[str, str]) -> tuple[dict[str, str], dict[str, list[Rank]], list[tuple]]:
    """(node facts, process name -> its tree's members, the node's TCP connections) from scripts/snapshot.sh's
    output. `roles`: process name -> prefill|decode|worker|router."""
    facts: dict[str, str] = {}
    members: dict[str, list[Rank]] = {}
    by_pid: dict[int, Rank] = {}
    conns: list[tuple] = []
    section: str = ""
    cur: Rank | None = None
    spy_lines: list[str] = []
    spy_rc: int | None = None

    def end_spy() -> None:
        if cur is not None and section == "spy":
            _read_spy(cur, "\n".join(spy_lines), spy_rc)

    for line in text.splitlines():
        if line.startswith("== "):
            head = line[3:].split()
            if section == "spy" and head[:1] == ["spyrc"]:  # a dump's exit code, after its output
                spy_rc = int(head[1]) if len(head) > 1 and head[1].lstrip("-").isdigit() else None
            end_spy()
            section, cur, spy_lines = head[0] if head else "", None, []
            if section == "node":
                facts.update(dict(kv.split("=", 1) for kv in head[2:] if "=" in kv))
                facts["host"] = head[1] if len(head) > 1 else ""
            elif section == "proc" and len(head) >= 3:
                cur = Rank(int(head[2]), 0, "other", "")
                members.setdefault(head[1], []).append(cur)
                by_pid[cur.pid] = cur
            elif section == "spy" and len(head) >= 3:
                cur = by_pid.get(int(head[2]))
                spy_rc = int(head[3]) if len(head) > 3 and head[3].lstrip("-").isdigit() else None
            continue
        if section == "proc" and cur is not None:
            key, _, value = line.partition(" ")
            _read_proc_line(cur, key, value)
        elif section == "spy":
            spy_lines.append(line)
        elif section == "exe" and (m := _EXE.search(line)) and (r := by_pid.get(int(m[1]))):
            r.exe = m[2].strip()
        elif section == "cmdline":
            heads = list(_CMDLINE.finditer(line))
            for m, after in zip(heads, [*heads[1:], None], strict=True):
                if m[1] and (r := by_pid.get(int(m[1]))):
                    r.cmdline = line[m.end():after.start() if after else len(line)].strip()
        elif section == "ss" and line.strip():
            parts = line.split()
            if len(parts) >= 5:
                pids = [int(p) for _, p in _USERS.findall(line)]
                conns.append((parts[0], parts[3], parts[4], pids))
    end_spy()
    for name, ranks in members.items():
        _classify(ranks, roles.get(name, ""))
    return facts, members, conns


def _read_proc_line(r: Rank, key: str, value: str) -> None:
    if key == "stat" and ")" in value:
        fields = value[value.rfind(")") + 2:].split()
        r.state, r.ppid = fields[0], int(fields[1])
        r.title = value[value.find("(") + 1:value.rfind(")")]
    elif key == "wchan":
        r.wchan = "" if value.strip() in ("0", "") else value.strip()
    elif key == "syscall":
        first = value.split()[0] if value.split() else ""
        r.syscall = (SYSCALLS.get(int(first), f"syscall {first}") if first.lstrip("-").isdigit() and first != "-1"
                     else first)
    elif key == "threads":
        r.threads = int(value) if value.strip().isdigit() else 0
    elif key == "exe":
        r.exe = value.strip()
    elif key == "cmdline":
        r.cmdline = value.strip()


def _read_spy(r: Rank, text: str, rc: int | None) -> None:
    """py-spy dump --json: a list of threads, each with its frames (innermost first)."""
    try:
        threads = json.loads(text)
    except ValueError:
        r.stack_error = _spy_error(text, rc)
        return
    if not isinstance(threads, list) or not threads:
        r.stack_error = "py-spy saw no thread"
        return
    main = next((t for t in threads if t.get("os_thread_id") == r.pid), None) or \
        next((t for t in threads if t.get("thread_name") == "MainThread"), threads[0])
    r.stack = [Frame(f.get("name", "?"), f.get("short_filename") or f.get("filename", ""), int(f.get("line") or 0))
               for f in main.get("frames", [])]
    r.other_threads = len(threads) - 1


def _spy_error(text: str, rc: int | None) -> str:
    """py-spy's reason in a line. Denied, it prints a misleading "Failed to get process executable name. Check
    that the process is running." with the cause under it ("0: Permission denied (os error 13)"): the cause is
    what is said (tests/data/snapshot/pyspy-denied.txt is one)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("Error")), "")
    if "Permission denied" in text or "Operation not permitted" in text:
        cause = next((ln.strip().split(": ", 1)[-1] for ln in text.splitlines()
                      if "Permission denied" in ln or "Operation not permitted" in ln), "")
        return f"ptrace denied: py-spy: {cause}"
    if rc == 124:
        return "py-spy did not answer within 20 s"
    return line or text.strip()[:160] or f"py-spy exited {rc}"


def _classify(ranks: list[Rank], role: str) -> None:
    """Each member's kind and title: the root is the supervisor, ATOM titles name EngineCores and ranks; at the pin
    (no titles) the server's children are EngineCores and their children ranks."""
    if not ranks:
        return
    root = ranks[0]
    root.kind, root.title = "supervisor", "supervisor"
    pids = {r.pid for r in ranks}
    depth = {root.pid: 0}
    for r in ranks[1:]:
        depth[r.pid] = depth.get(r.ppid, 0) + 1 if r.ppid in pids else 1
    python = [r for r in ranks[1:] if "python" in r.exe or not r.exe]  # (no exe: ptrace denied, not readable)
    server = next((r for r in python if "openai_server" in r.cmdline), None)
    if role == "router":
        for r in ranks[1:]:
            if "atomesh" in r.cmdline:
                r.kind, r.title = "router", "router"
        return
    for r in ranks[1:]:
        cmd = r.cmdline
        if r is server:
            r.kind, r.title = "server", "server"
        elif cmd.startswith("ATOM::EngineCore") or "::EngineCore" in cmd.split(" ")[0]:
            r.kind, r.title = "EngineCore", cmd.split(" ")[0]
        elif re.match(r"\S*::(DP\d+)?TP\d+$", cmd.split(" ")[0] if cmd else ""):
            r.kind, r.title = "rank", cmd.split(" ")[0]
        elif server is not None and r.ppid == server.pid and r in python:
            r.kind, r.title = "EngineCore", f"EngineCore {r.pid}"  # the pin: untitled
    cores = {r.pid for r in ranks if r.kind == "EngineCore"}
    for i, r in enumerate(sorted((r for r in ranks if r.kind == "other" and r.ppid in cores), key=lambda r: r.pid)):
        r.kind, r.title = "rank", f"rank {i} (pid {r.pid})"


def name_peers(conns: list[tuple], ports: dict[tuple[str, int], str]) -> dict[int, list[Conn]]:
    """pid -> its TCP connections, each peer named when it is a port of the run ('prefill-1:6302')."""
    out: dict[int, list[Conn]] = {}
    for state, local, peer, pids in conns:
        host, _, port = peer.rpartition(":")
        name = ports.get((host.strip("[]"), int(port))) if port.isdigit() else None
        for pid in pids:
            out.setdefault(pid, []).append(Conn(state, local, peer, f"{name}:{port}" if name else ""))
    return out


# ---- grouping and comparing --------------------------------------------------------------------------------

def group(procs: list[ProcSnap]) -> list[Group]:
    """Per process, its members grouped by identical stack; a group smaller than the largest of its process is
    odd. Odd groups come first (every process's), then the rest."""
    out: list[Group] = []
    for p in procs:
        by_sig: dict[tuple, list[Rank]] = {}
        for r in p.stacked():
            by_sig.setdefault((r.kind, r.signature()), []).append(r)
        ranks_only = [rs for (kind, _), rs in by_sig.items() if kind == "rank"]
        biggest = max((len(rs) for rs in ranks_only), default=0)
        for (kind, _), rs in by_sig.items():
            odd = kind == "rank" and len(ranks_only) > 1 and len(rs) < biggest
            out.append(Group(p.name, [r.label for r in rs], rs[0].where(), odd))
    return sorted(out, key=lambda g: (not g.odd,))


def busy(p: ProcSnap) -> bool:
    """Work is in flight to it: its own queues (running + waiting, from its /metrics) when it serves them; else
    the router's count of requests relayed to it. The router's count alone would call an idle prefill busy:
    AToMesh's PD router holds the prefill's and the decode's load guards together until the whole request ends
    (atom/mesh/src/routers/http_pd_router.rs, WorkerLoadGuard), so a prefill that finished its part still
    counts while its decode hangs. At the pin (no /metrics) the router's count is all there is."""
    if "requests_running" in p.queues or "requests_waiting" in p.queues:
        return p.queues.get("requests_running", 0) + p.queues.get("requests_waiting", 0) > 0
    return (p.router_in_flight or 0) > 0


def compare(first: Snapshot, second: Snapshot) -> dict[str, list[str]]:
    """Each member of the first snapshot, by process and label, against the second: "moved" when its main
    thread's stack (every frame and line) changed; unchanged it is "stuck" when its process has work in flight
    (requests running or waiting, or relayed to it by the router) and "idle" when it has none; "gone" when it
    is no longer there."""
    later = {(p.name, r.pid): r for p in second.procs for r in p.stacked()}
    now = {p.name: p for p in second.procs}
    out: dict[str, list[str]] = {"stuck": [], "idle": [], "moved": [], "gone": []}
    for p in first.procs:
        waiting = p.name in now and (busy(now[p.name]) or busy(p))
        for r in p.stacked():
            again = later.get((p.name, r.pid))
            key = f"{p.name} {r.label}"
            if again is None:
                out["gone"].append(key)
            elif (r.stack and r.stack == again.stack) or (not r.stack and r.syscall and
                                                           (r.syscall, r.wchan) == (again.syscall, again.wchan)):
                out["stuck" if waiting else "idle"].append(key)
            else:
                out["moved"].append(key)
    return out


_RANK = re.compile(r"(?:\S*::)?(DP\d+)?TP(\d+)|rank (\d+) \(pid \d+\)")


def verdict(g: Group, moved: dict[str, list[str]]) -> str:
    """A group's members' verdict in a comparison (compare): stuck, idle, moved or gone, "mixed" when they differ,
    "" when none of them was compared."""
    of = {k: v for v, keys in moved.items() for k in keys}
    seen = {of[k] for k in (f"{g.process} {m}" for m in g.members) if k in of}
    return "" if not seen else seen.pop() if len(seen) == 1 else "mixed"


def fold_keys(keys: list[str]) -> str:
    """'decode-0 ATOM::TP0', 'decode-0 ATOM::TP1', 'prefill-0 server' -> 'decode-0 TP0–TP1; prefill-0 server'."""
    by: dict[str, list[str]] = {}
    for k in keys:
        proc, _, label = k.partition(" ")
        by.setdefault(proc, []).append(label)
    parts = []
    for proc, labels in by.items():
        ranks = [lab for lab in labels if _RANK.fullmatch(lab)]
        rest = [lab.removeprefix("ATOM::") for lab in labels if lab not in ranks]
        parts.append(f"{proc} " + ", ".join(([fold(ranks)] if ranks else []) + rest))
    return "; ".join(parts)


def fold(labels: list[str]) -> str:
    """'ATOM::TP0', ..., 'ATOM::TP6' -> 'TP0–TP6'; the pin's untitled 'rank 0 (pid 41)', ... -> 'ranks 0–6' (one
    alone keeps its pid: it is the one to look at); other labels as they are."""
    nums = []
    for lab in labels:
        m = _RANK.fullmatch(lab)
        if not m:
            return ", ".join(labels)
        nums.append(("rank", int(m[3])) if m[3] is not None else (m[1] or "", int(m[2])))
    if len(nums) == 1 and nums[0][0] == "rank":
        return labels[0]
    out, i = [], 0
    nums.sort()
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1][0] == nums[i][0] and nums[j + 1][1] == nums[j][1] + 1:
            j += 1
        if nums[i][0] == "rank":
            out.append(f"rank {nums[i][1]}" if i == j else f"ranks {nums[i][1]}–{nums[j][1]}")
        else:
            a, b = f"{nums[i][0]}TP{nums[i][1]}", f"{nums[j][0]}TP{nums[j][1]}"
            out.append(a if i == j else f"{a}–{b}")
        i = j + 1
    return ", ".join(out)
