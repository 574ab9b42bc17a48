"""Node inventory: what Slurm (or a static list) says about each node, parsed from real output.

Parsers take the text of `scontrol show node [-o]`, `sinfo -N -h -o '%N|%T|%G|%P|%E'` and
`sinfo --json`, as printed by Slurm 22.05; unit tests run them on captured output.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# Flags that make a node unusable for a new deployment, with the words an operator uses.
BAD_FLAGS = {
    "DOWN": "down",
    "DRAIN": "drained",
    "DRAINING": "draining",
    "DRAINED": "drained",
    "NOT_RESPONDING": "not responding",
    "FAIL": "failing",
    "FAILING": "failing",
    "INVAL": "invalid configuration",
    "MAINT": "in maintenance",
    "REBOOT_REQUESTED": "reboot requested",
    "REBOOT_ISSUED": "rebooting",
    "POWERED_DOWN": "powered down",
    "POWERING_DOWN": "powering down",
    "FUTURE": "not yet in service",
    "UNKNOWN": "state unknown",
}
# sinfo's compact lower-case states (the '*' suffix, "not responding", is handled separately).
_SINFO_STATES = {
    "idle": ("IDLE",), "mixed": ("MIXED",), "mix": ("MIXED",), "allocated": ("ALLOCATED",),
    "alloc": ("ALLOCATED",), "completing": ("COMPLETING",), "comp": ("COMPLETING",),
    "down": ("DOWN",), "drained": ("IDLE", "DRAIN"), "drain": ("IDLE", "DRAIN"),
    "draining": ("ALLOCATED", "DRAIN"), "drng": ("ALLOCATED", "DRAIN"), "fail": ("DOWN", "FAIL"),
    "failing": ("ALLOCATED", "FAIL"), "maint": ("MAINT",), "reserved": ("RESERVED",),
    "resv": ("RESERVED",), "inval": ("INVAL",), "unknown": ("UNKNOWN",), "unk": ("UNKNOWN",),
    "planned": ("PLANNED",), "future": ("FUTURE",), "powered_down": ("POWERED_DOWN",),
    "powering_down": ("POWERING_DOWN",), "reboot_requested": ("REBOOT_REQUESTED",),
}


@dataclass(frozen=True)
class Node:
    """One node as the cluster reports it."""

    name: str
    addr: str = ""  # the IP (or resolvable name) other nodes use to reach it
    states: tuple[str, ...] = ("IDLE",)  # Slurm state words, e.g. ("IDLE", "DRAIN")
    gpus: int = 0
    partitions: tuple[str, ...] = ()
    reason: str = ""
    source: str = "static"  # "slurm" | "static"
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def state(self) -> str:
        return "+".join(self.states)

    @property
    def problems(self) -> list[str]:
        """Why Slurm says this node is unusable, in an operator's words (empty when healthy)."""
        return [BAD_FLAGS[s] for s in self.states if s in BAD_FLAGS]

    @property
    def healthy(self) -> bool:
        return not self.problems

    def why_unhealthy(self) -> str:
        """One phrase, e.g. 'drained: gpu memory not released'."""
        if self.healthy:
            return ""
        words = ", ".join(dict.fromkeys(self.problems))
        return f"{words}: {self.reason}" if self.reason else words


_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[A-Za-z0-9_.-]+)?:(\d+)")
_REASON_STAMP = re.compile(r"\s*\[[^\]]*@\d{4}-\d\d-\d\dT[\d:]+\]\s*$")


def gpus_from_gres(gres: str) -> int:
    """GPU count from a GRES string such as 'gpu:8', 'gpu:mi355x:8(S:0-1)', 'gpu:4,gpu:a:4'."""
    total = 0
    for part in re.split(r",(?![^()]*\))", gres or ""):
        m = _GPU_GRES.search(re.sub(r"\(.*?\)", "", part))
        if m:
            total += int(m.group(1))
    return total


def _split_kv(line: str) -> dict[str, str]:
    """Split `Key=Value Key=Value` where some values (OS=, Reason=) contain spaces."""
    out: dict[str, str] = {}
    # Reason= is always last and may hold anything; take it first.
    m = re.search(r"(?:^|\s)Reason=(.*)$", line)
    if m:
        out["Reason"] = m.group(1).strip()
        line = line[: m.start()]
    tokens = re.finditer(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_:]*)=", line)
    starts = [(t.group(1), t.start(1), t.end()) for t in tokens]
    for i, (key, _, vstart) in enumerate(starts):
        vend = starts[i + 1][1] if i + 1 < len(starts) else len(line)
        out[key] = line[vstart:vend].strip()
    return out


def parse_scontrol_nodes(text: str) -> list[Node]:
    """Parse `scontrol show node` output, multi-line or one-liner (-o)."""
    nodes = []
    for block in re.split(r"\n\s*\n|\n(?=NodeName=)", text.strip()):
        block = " ".join(line.strip() for line in block.splitlines() if line.strip())
        if not block.startswith("NodeName="):
            continue
        kv = _split_kv(block)
        states = tuple(s for s in kv.get("State", "UNKNOWN").replace("*", "").split("+") if s)
        reason = _REASON_STAMP.sub("", kv.get("Reason", "")).strip()
        parts = kv.get("Partitions", "")
        nodes.append(Node(
            name=kv["NodeName"],
            addr=kv.get("NodeAddr") or kv["NodeName"],
            states=states,
            gpus=gpus_from_gres(kv.get("Gres", "")),
            partitions=tuple(p for p in parts.split(",") if p and p != "(null)"),
            reason="" if reason in ("(null)", "none") else reason,
            source="slurm",
            extra={"hostname": kv.get("NodeHostName", ""), "cpus": kv.get("CPUTot", "")},
        ))
    return nodes


def _sinfo_states(word: str) -> tuple[str, ...]:
    word = word.strip().lower()
    not_responding = word.endswith("*")
    flags = word.rstrip("*~#!%$@^-")
    states = list(_SINFO_STATES.get(flags, (flags.upper(),)))
    if not_responding:
        states.append("NOT_RESPONDING")
    if word.endswith("~"):
        states.append("POWERED_DOWN")
    return tuple(states)


SINFO_FORMAT = "%N|%T|%G|%P|%E"


def parse_sinfo(text: str) -> list[Node]:
    """Parse `sinfo -N -h -o '%N|%T|%G|%P|%E'` (more columns after these are ignored).

    A node in several partitions appears once per partition; the rows are merged.
    """
    merged: dict[str, Node] = {}
    for line in text.splitlines():
        cols = line.strip().split("|")
        if len(cols) < 5 or not cols[0]:
            continue
        name, state, gres, part = cols[0], cols[1], cols[2], cols[3]
        reason = cols[-1] if len(cols) == 5 else cols[6] if len(cols) > 6 else cols[4]
        reason = "" if reason.strip() in ("none", "(null)") else reason.strip()
        partition = part.rstrip("*")
        prev = merged.get(name)
        if prev:
            merged[name] = Node(prev.name, prev.addr, prev.states, prev.gpus,
                                prev.partitions + (partition,), prev.reason, "slurm")
            continue
        merged[name] = Node(name=name, addr=name, states=_sinfo_states(state), gpus=gpus_from_gres(gres),
                            partitions=(partition,), reason=reason, source="slurm")
    return list(merged.values())


def parse_sinfo_json(text: str) -> list[Node]:
    """Parse `sinfo --json` (OpenAPI v0.0.38 and later shapes)."""
    data = json.loads(text)
    nodes = []
    for n in data.get("nodes", []):
        state = n.get("state", "unknown")
        states = list(state) if isinstance(state, list) else [str(state)]
        states = [s.upper() for s in states] + [f.upper() for f in n.get("state_flags", [])]
        # v0.0.38 says e.g. state "idle" + flags ["DRAIN"]; NOT_RESPONDING appears as a flag
        reason = _REASON_STAMP.sub("", n.get("reason") or "").strip()
        nodes.append(Node(
            name=n["name"], addr=n.get("address") or n["name"], states=tuple(dict.fromkeys(states)),
            gpus=gpus_from_gres(n.get("gres", "")), partitions=tuple(n.get("partitions") or ()),
            reason=reason, source="slurm",
        ))
    return nodes


def merge_addresses(nodes: list[Node], addrs: dict[str, str]) -> list[Node]:
    """Fill in node addresses found elsewhere (e.g. scontrol's NodeAddr for sinfo rows)."""
    return [Node(n.name, addrs.get(n.name, n.addr), n.states, n.gpus, n.partitions, n.reason, n.source, n.extra)
            for n in nodes]


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist such as 'mia1-p01-g[01-02,04],other' into names."""
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", expr):
        m = re.match(r"^(.*?)\[([^\]]+)\](.*)$", part)
        if not m:
            names.append(part)
            continue
        prefix, ranges, rest = m.groups()
        for r in ranges.split(","):
            if "-" in r:
                lo, hi = r.split("-", 1)
                width = len(lo)
                names.extend(f"{prefix}{i:0{width}d}{rest}" for i in range(int(lo), int(hi) + 1))
            else:
                names.append(f"{prefix}{r}{rest}")
    return names
