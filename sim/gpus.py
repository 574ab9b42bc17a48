"""A simulated node's GPUs: which live process holds how much VRAM on which GPU, read by the `amd-smi` and
`rocm-smi` stand-ins (smi.py).

The bookkeeping: a process that holds GPU memory (an ATOM TP rank, proctree.py; or `hold`, standing in for another
job) writes one small JSON file, ``<ATOMSIM_GPU_DIR>/<node>/<pid>.json``, as it starts: its PID, its start time
(/proc/PID/stat field 22, so a reused PID is not mistaken for it) and the bytes it holds on each GPU. The stand-ins
count a file only while that process lives: the kernel frees a process's VRAM when it ends, however it ends (a
SIGKILL included), and a process that outlives its parent (the pin's orphans, ROCm/ATOM #1511) keeps it.

`<node>` is the network namespace's inode and the node's address (``ATOMSIM_NODE_IP``): the lab's nodes each have
a network namespace of their own, and a stand-in run there (over ssh or as a Slurm step) finds its node's GPUs by
its own namespace; the local demo's nodes share one namespace and are told apart by their loopback address, which
the caller passes to the stand-in as ``ATOMSIM_NODE_IP``.

How much a rank holds: ATOM sizes its KV cache so that the GPU's use reaches ``total * gpu_memory_utilization``
(atom/model_engine/model_runner.py at ffdf3bb5: ``budget = int(total * config.gpu_memory_utilization)``), so a rank
holds that, from the moment it starts (the real one grows to it while the weights load and the KV cache is
allocated). Which GPU: ATOM's ``local_device_rank = engine_index * stage_span + rank`` (model_runner.py), i.e.
``dp_rank * tp + tp_rank`` here, mapped through ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``) when set, as
HIP maps a visible device to the physical one.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field

MIB = 1024 * 1024
# MI355X: 288 GB of HBM3E per GPU. amd-smi divides bytes by 1024*1024 and calls the result "MB"
# (amdsmi_commands.py metric_gpu, mem_usage), so a 288 GiB board shows 294912 "MB". Chosen, not read from a board.
VRAM_TOTAL_MB = 294912
IDLE_USED_MB = 282        # what an idle board reports used (the driver's own); chosen, not measured
GTT_TOTAL_MB = 257536     # chosen
IDLE_POWER_W = 180        # chosen: socket power of an idle board
POWER_PER_PCT_W = 12      # chosen: + 12 W per percent of GFX activity (1,380 W at 100 %)
IDLE_HOTSPOT_C, IDLE_MEM_C = 38, 34  # chosen


def gpus_per_node() -> int:
    """``ATOMSIM_GPUS``: GPUs per simulated node (8, an MI355X node)."""
    raw = os.environ.get("ATOMSIM_GPUS", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 8


def base_dir() -> str:
    return os.environ.get("ATOMSIM_GPU_DIR", "").strip() or "/tmp/atomsim-gpus"


def netns() -> str:
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return "0"


def node_dir(node_ip: str | None = None) -> str:
    ip = node_ip if node_ip is not None else os.environ.get("ATOMSIM_NODE_IP", "").strip()
    return os.path.join(base_dir(), f"{netns()}-{ip or 'any'}")


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (the process's start, in clock ticks since boot), or None when it is gone or a
    zombie (a zombie holds no memory)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    return None if rest[0] in ("Z", "X") else rest[19]


def comm(pid: int) -> str:
    """/proc/PID/comm: the process name amd-smi reports (src/amd_smi/fdinfo.cc gpuvsmi_get_pid_info)."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def visible_devices() -> list[int] | None:
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        raw = os.environ.get(var, "").strip()
        if raw:
            try:
                return [int(x) for x in raw.split(",") if x.strip()]
            except ValueError:
                return None
    return None


def device_index(local: int) -> int:
    """The physical GPU behind HIP's device `local`."""
    vis = visible_devices()
    return vis[local] if vis and 0 <= local < len(vis) else local


def hold(held: dict[int, int], activity: dict[int, int] | None = None) -> str | None:
    """Record that this process holds `held` (GPU index -> bytes) on this node. Returns the file, or None when it
    cannot be written (the simulation goes on; the stand-ins then show the GPU idle)."""
    pid = os.getpid()
    started = start_time(pid)
    if started is None:
        return None
    d = node_dir()
    path = os.path.join(d, f"{pid}.json")
    record = {"pid": pid, "start": started, "vram": {str(g): int(b) for g, b in held.items()},
              "activity": {str(g): int(a) for g, a in (activity or {}).items()}}
    try:
        os.makedirs(d, exist_ok=True)
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def hold_rank_memory(local_device: int, utilization: float) -> str | None:
    """A TP rank's VRAM: `utilization` of its GPU (ATOM's --gpu-memory-utilization)."""
    total = VRAM_TOTAL_MB * MIB
    return hold({device_index(local_device): int(total * max(0.0, min(utilization, 1.0)))})


@dataclass
class Holder:
    pid: int
    name: str
    vram: dict[int, int]  # GPU -> bytes
    activity: dict[int, int] = field(default_factory=dict)  # GPU -> percent


@dataclass
class Gpu:
    index: int
    used_mb: int
    total_mb: int
    activity: int  # GFX activity, percent
    holders: list[Holder]

    @property
    def power_w(self) -> int:
        return IDLE_POWER_W + POWER_PER_PCT_W * self.activity

    @property
    def hotspot_c(self) -> int:
        return IDLE_HOTSPOT_C + self.activity * 40 // 100

    @property
    def mem_c(self) -> int:
        return IDLE_MEM_C + self.activity * 30 // 100


def holders(node_ip: str | None = None) -> list[Holder]:
    """Every live process that holds memory on this node's GPUs (files of ended processes are removed)."""
    ip = node_ip if node_ip is not None else os.environ.get("ATOMSIM_NODE_IP", "").strip()
    root = base_dir()
    if ip:  # this node's, and what was held in this namespace with no address given (`hold` on a lab node)
        dirs = [node_dir(ip), node_dir("")]
    else:  # a node of its own network namespace (the lab): every address seen in it
        prefix = f"{netns()}-"
        try:
            dirs = [os.path.join(root, d) for d in os.listdir(root) if d.startswith(prefix)]
        except OSError:
            dirs = []
    out = []
    for d in dirs:
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(d, name)
            try:
                with open(path) as f:
                    rec = json.load(f)
            except (OSError, ValueError):
                continue
            pid = int(rec.get("pid", 0))
            if start_time(pid) != rec.get("start"):
                with contextlib.suppress(OSError):
                    os.unlink(path)
                continue
            out.append(Holder(pid, comm(pid), {int(g): int(b) for g, b in rec.get("vram", {}).items()},
                              {int(g): int(a) for g, a in rec.get("activity", {}).items()}))
    return sorted(out, key=lambda h: h.pid)


def gpus(node_ip: str | None = None) -> list[Gpu]:
    """This node's GPUs as the stand-ins report them."""
    hs = holders(node_ip)
    out = []
    for i in range(gpus_per_node()):
        on = [h for h in hs if h.vram.get(i)]
        used = IDLE_USED_MB + sum(h.vram[i] for h in on) // MIB
        act = min(100, sum(h.activity.get(i, 0) for h in hs))  # a server reports its ranks' activity
        out.append(Gpu(i, min(used, VRAM_TOTAL_MB), VRAM_TOTAL_MB, act, on))
    return out


def parse_gpu_list(spec: str) -> list[int]:
    """``0-7``, ``0,2,5`` or ``all``."""
    if spec in ("all", ""):
        return list(range(gpus_per_node()))
    out: list[int] = []
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out += list(range(int(a), int(b) + 1)) if b else [int(a)]
    return out


def hold_main(argv: list[str]) -> int:
    """``python3 -m atomdeck.sim.gpus hold [--gpus 0-7] [--gb 275]``: a process that holds VRAM on this node's
    GPUs until it is killed, standing in for another job (or a leftover of one) on the node."""
    import argparse
    import signal

    p = argparse.ArgumentParser(prog="atomsim-gpu-hold")
    p.add_argument("--gpus", default="all")
    p.add_argument("--gb", type=float, default=275.0, help="GiB held on each GPU")
    p.add_argument("--activity", type=int, default=0, help="GFX activity, percent")
    a = p.parse_args(argv)
    gs = parse_gpu_list(a.gpus)
    if hold({g: int(a.gb * 1024 * MIB) for g in gs}, {g: a.activity for g in gs}) is None:
        print(f"cannot write under {base_dir()}", flush=True)
        return 1
    print("holding", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        signal.pause()


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["hold"]:
        print("usage: python3 -m atomdeck.sim.gpus hold [--gpus 0-7] [--gb 275] [--activity 0]", file=sys.stderr)
        sys.exit(2)
    sys.exit(hold_main(sys.argv[2:]))
