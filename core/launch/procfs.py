"""This machine's processes as /proc shows them: alive or not, their process groups, the run's marker in their
environment. The local launcher stops and sweeps by these; tests check what a run left by them too."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, process group) of a PID, or None if it does not exist."""
    st = _stat(pid)
    return None if st is None else (st[0], int(st[2]))


def parent_of(pid: int) -> int | None:
    st = _stat(pid)
    return None if st is None else int(st[1])


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name: state, parent, process group, ..."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    return data[data.rfind(")") + 2:].split()


def alive(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may linger as a zombie until PID 1 reaps it)."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def scan_groups(pgids: Collection[int]) -> dict[int, list[int]]:
    """The live (non-zombie) processes of each of these process groups, from one pass over /proc."""
    out: dict[int, list[int]] = {pg: [] for pg in pgids}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = proc_stat(int(entry.name))
            if st and st[1] in out and st[0] not in ("Z", "X"):
                out[st[1]].append(int(entry.name))
    return out


def scan_trees(pgids: Collection[int]) -> dict[int, list[int]]:
    """Each process group's live processes and every live descendant of them that left the group (an ATOM rank
    that called setsid is still its EngineCore's child), from one pass over /proc: what stopping a process
    started in that group must end."""
    wanted = set(pgids)
    out: dict[int, list[int]] = {pg: [] for pg in wanted}
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        st = _stat(int(entry.name))
        if st is None or st[0] in ("Z", "X"):
            continue
        pid, ppid, pgid = int(entry.name), int(st[1]), int(st[2])
        parent[pid] = ppid
        if pgid in wanted:
            out[pgid].append(pid)
    owner = {pid: pg for pg, members in out.items() for pid in members}
    grew = True
    while grew:  # descendants outside the groups, however deep (a tree is a few levels)
        grew = False
        for pid, ppid in parent.items():
            if pid not in owner and ppid in owner:
                owner[pid] = owner[ppid]
                out[owner[pid]].append(pid)
                grew = True
    return out


def title(pid: int) -> str:
    """What `ps -o comm` shows (an ATOM rank's title, cut to 15 characters by the kernel), or ""."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group."""
    return scan_groups((pgid,))[pgid]


def env_marker(run_id: str, name: str) -> str:
    return f"ATOMDECK_RUN={run_id}:{name}"


def is_ours(pgid: int, run_id: str, name: str) -> bool:
    """Some live member of the group carries our marker in its environment (PIDs get reused, so this is
    checked before any signal is sent)."""
    return carries_marker(group_members(pgid), run_id, name)


def carries_marker(pids: list[int], run_id: str, name: str) -> bool:
    """One of these processes (a group's members, already read) carries our marker in its environment."""
    want = env_marker(run_id, name).encode()
    for pid in pids:
        try:
            if want in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False


def _marked(prefix: bytes) -> Iterator[tuple[int, str]]:
    """(pid, what follows `prefix`) of every live process on this machine whose environment has an entry that
    starts with `prefix`, from one pass over /proc."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry.name}/environ").read_bytes()
        except OSError:
            continue
        if prefix not in env or not alive(int(entry.name)):
            continue
        item = next((x for x in env.split(b"\0") if x.startswith(prefix)), None)
        if item is not None:
            yield int(entry.name), item[len(prefix):].decode(errors="replace")


def runs_marked() -> dict[str, set[str]]:
    """run id -> the names of its processes alive on this machine, for every run whose marker a live process's
    environment carries."""
    out: dict[str, set[str]] = {}
    for _, value in _marked(b"ATOMDECK_RUN="):
        run_id, _, name = value.partition(":")
        out.setdefault(run_id, set()).add(name)
    return out


def marked_processes(run_id: str) -> dict[int, str]:
    """pid -> process name, of every live process on this machine whose environment carries the run's marker
    (its supervisor and everything it started: they inherit the environment)."""
    return dict(_marked(f"ATOMDECK_RUN={run_id}:".encode()))
