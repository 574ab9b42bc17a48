"""GPU telemetry of one node: VRAM used/total, GFX activity, socket power and temperature per GPU, and (when asked)
which processes hold memory on which GPU. AMD first: `amd-smi` (`metric ... --json`, `process --json`), with
`rocm-smi --json` as the fallback; a node with neither says so.

The JSON is read as the tools print it (sim/README.md "The GPUs" names the sources): amd-smi prints a list with one
object per GPU (24.x), or the same list as ``{"gpu_data": [...]}`` (ROCm 7's `combine_arrays_to_json`); values are
``{"value": v, "unit": u}`` (memory in MB = MiB, power in W, temperature in C, activity in %) or "N/A". rocm-smi prints
``{"card0": {"VRAM Total Used Memory (B)": "...", ...}}`` with every value a string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .shell import Result

VRAM_IDLE_PCT = 10  # InferenceX's pre-flight: a GPU is free when its VRAM use is <= 10 %
MIB = 1024 * 1024

# $1: a directory to put first on PATH ("" for none; the simulator's shim/bin on simulated clusters), $2: "procs" to
# list the processes too. ROCm installs put the tools in /opt/rocm/bin, which non-login shells may not have.
SCRIPT = r'''[ -n "$1" ] && PATH="$1:$PATH"
PATH="$PATH:/opt/rocm/bin"
if command -v amd-smi >/dev/null 2>&1; then
  echo "@@tool amd-smi"
  amd-smi metric --usage --power --temperature --mem-usage --json || echo "@@failed metric $?"
  if [ "$2" = procs ]; then echo "@@process"; amd-smi process --json || echo "@@failed process $?"; fi
elif command -v rocm-smi >/dev/null 2>&1; then
  echo "@@tool rocm-smi"
  rocm-smi --showmeminfo vram --showuse --showpower --showtemp --json || echo "@@failed rocm-smi $?"
else
  echo "@@tool none"
fi
'''
NO_TOOL = "neither amd-smi nor rocm-smi was found on the node (PATH and /opt/rocm/bin)"


@dataclass(frozen=True)
class Gpu:
    index: int
    used_mb: int | None
    total_mb: int | None
    util_pct: float | None = None
    power_w: float | None = None
    temp_c: float | None = None  # hotspot (junction), else edge, else memory

    @property
    def used_pct(self) -> float | None:
        if self.used_mb is None or not self.total_mb:
            return None
        return 100.0 * self.used_mb / self.total_mb

    @property
    def busy(self) -> bool:
        """Holds memory as a running job does: more than InferenceX's idle threshold."""
        pct = self.used_pct
        return pct is not None and pct > VRAM_IDLE_PCT


@dataclass(frozen=True)
class GpuProcess:
    gpu: int
    pid: int
    name: str
    vram_mb: int


@dataclass
class NodeGpus:
    node: str
    tool: str = ""  # amd-smi | rocm-smi | "" (none could be read)
    gpus: list[Gpu] = field(default_factory=list)
    procs: list[GpuProcess] | None = None  # None: not asked (or the tool cannot list them: rocm-smi)
    error: str = ""


def command(extra_path: str = "", procs: bool = False, node_ip: str = "") -> list[str]:
    """The argv that reads a node's GPUs. `node_ip`: the simulated node's address, for the simulator's stand-in on a
    machine whose simulated nodes share one network namespace (the local demo)."""
    argv = ["sh", "-c", SCRIPT, "atomdeck-gpus", extra_path, "procs" if procs else ""]
    return ["env", f"ATOMSIM_NODE_IP={node_ip}", *argv] if node_ip else argv


def _num(x) -> float | None:
    """A value as amd-smi prints it: {"value": v, "unit": u}, a number, "12 %" or "N/A"."""
    if isinstance(x, dict):
        x = x.get("value")
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        m = re.match(r"\s*(-?\d+(?:\.\d+)?)", x)
        return float(m.group(1)) if m else None
    return None


def _mb(x) -> int | None:
    """A memory value in MiB: amd-smi's "MB" is bytes // 2**20; other units converted."""
    v = _num(x)
    if v is None:
        return None
    unit = (x.get("unit") if isinstance(x, dict) else "") or "MB"
    scale = {"B": 1 / MIB, "KB": 1 / 1024, "MB": 1, "GB": 1024, "TB": 1024 * 1024}.get(str(unit).upper(), 1)
    return int(v * scale)


def _json(text: str):
    """The JSON document in a tool's output (a tool may print a warning line before it)."""
    start = min((i for i in (text.find("["), text.find("{")) if i >= 0), default=-1)
    if start < 0:
        raise ValueError("no JSON in the output")
    return json.loads(text[start:])


def _items(data) -> list[dict]:
    if isinstance(data, dict):
        data = data.get("gpu_data", [])
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def parse_amdsmi_metric(text: str) -> list[Gpu]:
    """`amd-smi metric --usage --power --temperature --mem-usage --json`."""
    out = []
    for item in _items(_json(text)):
        mem, usage = item.get("mem_usage") or {}, item.get("usage") or {}
        power, temp = item.get("power") or {}, item.get("temperature") or {}
        mem = mem if isinstance(mem, dict) else {}
        usage = usage if isinstance(usage, dict) else {}
        power = power if isinstance(power, dict) else {}
        temp = temp if isinstance(temp, dict) else {}
        t = next((v for v in (_num(temp.get(k)) for k in ("hotspot", "edge", "mem")) if v is not None), None)
        idx = _num(item.get("gpu"))
        if idx is None:
            continue
        out.append(Gpu(int(idx), _mb(mem.get("used_vram")), _mb(mem.get("total_vram")),
                       _num(usage.get("gfx_activity")), _num(power.get("socket_power")), t))
    return sorted(out, key=lambda g: g.index)


def parse_amdsmi_process(text: str) -> list[GpuProcess]:
    """`amd-smi process --json`: per GPU, {"process_info": {...}} entries (or the 'No running processes' text)."""
    out = []
    for item in _items(_json(text)):
        idx = _num(item.get("gpu"))
        for entry in item.get("process_list") or []:
            info = entry.get("process_info") if isinstance(entry, dict) else None
            if not isinstance(info, dict) or idx is None:
                continue
            mu = info.get("memory_usage")
            mu = mu if isinstance(mu, dict) else {}
            vram = mu.get("vram_mem", info.get("mem_usage", info.get("mem")))
            pid = _num(info.get("pid"))
            if pid is None:
                continue
            # bytes: a unit-less number is bytes too (amdsmi_get_gpu_process_list's mem fields)
            mb = _mb(vram if isinstance(vram, dict) else {"value": _num(vram) or 0, "unit": "B"}) or 0
            out.append(GpuProcess(int(idx), int(pid), str(info.get("name", "")), mb))
    return out


def parse_rocmsmi(text: str) -> list[Gpu]:
    """`rocm-smi --showmeminfo vram --showuse --showpower --showtemp --json`."""
    out = []
    data = _json(text)
    for card, fields in (data.items() if isinstance(data, dict) else []):
        m = re.fullmatch(r"card(\d+)", str(card))
        if not m or not isinstance(fields, dict):
            continue
        used, total = _num(fields.get("VRAM Total Used Memory (B)")), _num(fields.get("VRAM Total Memory (B)"))
        if used is None and (pct := _num(fields.get("GPU Memory Allocated (VRAM%)"))) is not None:
            used, total = pct, 100.0  # --showmemuse: a percentage only
            out.append(Gpu(int(m.group(1)), int(used), int(total)))
            continue
        power = next((_num(v) for k, v in fields.items() if k.endswith("Graphics Package Power (W)")), None)
        temp = next((_num(fields[k]) for k in ("Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)",
                                               "Temperature (Sensor memory) (C)") if k in fields), None)
        out.append(Gpu(int(m.group(1)), None if used is None else int(used // MIB),
                       None if total is None else int(total // MIB), _num(fields.get("GPU use (%)")), power, temp))
    return sorted(out, key=lambda g: g.index)


def parse(node: str, res: Result) -> NodeGpus:
    """SCRIPT's output -> the node's GPUs, or an error that says what was missing or broken."""
    parts: dict[str, str] = {}
    key, tool, failed = "", "", []
    for line in res.stdout.splitlines(keepends=True):
        if line.startswith("@@tool "):
            tool, key = line.split()[1], "metric"
        elif line.startswith("@@process"):
            key = "process"
        elif line.startswith("@@failed "):
            failed.append(line.split(maxsplit=1)[1].strip())
        elif key:
            parts[key] = parts.get(key, "") + line
    err_tail = (res.stderr.strip().splitlines() or [""])[-1]
    if not tool:
        return NodeGpus(node, error=f"could not read the GPUs: {res.explain()}")
    if tool == "none":
        return NodeGpus(node, error=NO_TOOL)
    out = NodeGpus(node, tool)
    try:
        out.gpus = parse_amdsmi_metric(parts.get("metric", "")) if tool == "amd-smi" else \
            parse_rocmsmi(parts.get("metric", ""))
    except ValueError as e:
        why = f"; {err_tail}" if err_tail else ""
        out.error = f"{tool} printed no GPU data ({e}{', exit ' + failed[0].split()[-1] if failed else ''}){why}"
        return out
    if "process" in parts:
        try:
            out.procs = parse_amdsmi_process(parts["process"])
        except ValueError:
            out.procs = None
    if not out.gpus:
        out.error = f"{tool} listed no GPUs"
    return out


async def read(node: str, node_run: Callable[[list[str], float], Awaitable[Result]], *, extra_path: str = "",
               procs: bool = False, node_ip: str = "", timeout: float = 20.0) -> NodeGpus:
    """Read one node's GPUs through `node_run(argv, timeout)` (the launcher's command on that node). Never raises
    for a node that cannot be read: the error is in the answer."""
    try:
        res = await node_run(command(extra_path, procs, node_ip), timeout)
    except Exception as e:  # an unreachable node is an answer too
        return NodeGpus(node, error=f"could not run the GPU tools on {node}: {e}")
    return parse(node, res)


async def read_flagged(read_fn: Callable[[bool], Awaitable[NodeGpus]], flagged: Callable[[NodeGpus], list[int]],
                       name_holders: Callable[[list[int]], bool] = bool) -> tuple[NodeGpus, list[int], bool]:
    """A node's GPUs (`read_fn(procs)`), the ones `flagged` (memory nobody here should hold), and whether their
    holders were listed: when some are flagged and `name_holders(them)` says so, amd-smi is read again with its
    process list, which names what holds them by PID (rocm-smi has none)."""
    ng = await read_fn(False)
    flags = flagged(ng)
    if not (flags and ng.tool == "amd-smi" and name_holders(flags)):
        return ng, flags, False
    ng = await read_fn(True)
    return ng, flagged(ng), True
