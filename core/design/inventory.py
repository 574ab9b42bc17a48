"""Node inventory: what Slurm (or a static list) says about each node, parsed from real output.

The parser takes the text of `scontrol show node [-o]` as printed by Slurm 22.05 (the inventory and the
slurm launcher read it); unit tests run it on captured output.
"""

from __future__ import annotations

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
    # GPU memory held by no run of ours, as the node's GPUs were last read (core/run/gpustate.py mark_held):
    # "8/8 GPUs hold 240 GB: another job, or an orphan (pid ...)"; such a node is not chosen unless overridden
    held: str = ""

    @property
    def state(self) -> str:
        return "+".join(self.states)

    @property
    def problems(self) -> list[str]:
        """Why Slurm says this node is unusable, in an operator's words, and its GPUs' memory held by others
        (empty when healthy)."""
        return [BAD_FLAGS[s] for s in self.states if s in BAD_FLAGS] + (["GPUs in use"] if self.held else [])

    @property
    def healthy(self) -> bool:
        return not self.problems

    def why_unhealthy(self) -> str:
        """One phrase, e.g. 'drained: gpu memory not released'."""
        if self.healthy:
            return ""
        slurm = [BAD_FLAGS[s] for s in self.states if s in BAD_FLAGS]
        words = ", ".join(dict.fromkeys(slurm))
        said = (f"{words}: {self.reason}" if self.reason else words) if slurm else ""
        return "; ".join(x for x in (said, f"GPUs in use: {self.held}" if self.held else "") if x)


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
