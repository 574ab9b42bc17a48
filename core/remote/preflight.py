"""Pre-flight checks on the allocated nodes, before anything is launched.

One small POSIX-sh script runs on every node in parallel (as a Slurm step or over SSH) and prints
`key=value` lines; `findings_from` turns them into findings that name the node.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..config.cluster import NodeIp
from ..config.errors import PreflightError
from ..config.paths import sim_shim_dir
from ..config.text import listed
from ..design.commands import ProcessSpec
from ..design.container import image_of
from ..design.findings import Finding
from ..design.plan import Plan
from .gpus import VRAM_IDLE_PCT, parse_amdsmi_metric, parse_rocmsmi
from .image_check import IMAGE_SCRIPT, PROGRESS_S, ImageCheck, image_check_findings, is_file_image, pyxis_error
from .image_check import image_checks_for as _image_checks_for
from .shell import Result

__all__ = ["IMAGE_SCRIPT", "ImageCheck", "image_check_findings", "image_checks_for"]

NOFILE_NEEDED = 65536  # InferenceX: `ulimit -n 65536` / docker --ulimit nofile for Mooncake
SIM_NOFILE_NEEDED = 4096  # the simulator's worker (Mooncake over TCP) holds about 30 files open
WRAPPER_NOFILE = 65536  # supervisor.sh raises the soft limit to this, or else to the hard limit

# $1: ports to check (space separated), $2: a path that must exist (or ""), $3: runtime check command,
# $4: Mooncake library directories the workers' LD_LIBRARY_PATH names (space separated; outside containers;
# inside an image IMAGE_SCRIPT checks them), $5: this launch's run id (its own processes are not another run's),
# $6: the image when it is a file on the node (pyxis, apptainer: a squashfs), or ""
# $7: a directory to put first on PATH for the GPU tools (the simulator's amd-smi on simulated clusters, else "")
SCRIPT = r'''ports=$1; model=$2; runtime=$3; mooncake=$4; self_run=$5; image=$6; gpu_path=$7
echo "host=$(hostname)"
if [ -n "$image" ]; then if [ -r "$image" ]; then echo "image=present"; else echo "image=missing"; fi; fi
echo "nofile=$(ulimit -n) $(ulimit -Hn)"
if [ -e /dev/infiniband ]; then echo "ib_dev=yes"; else echo "ib_dev=no"; fi
missing=
for d in $mooncake; do [ -d "$d" ] || missing="$missing $d"; done
echo "mooncake_missing=$missing"
nic=none
if [ -d /sys/class/infiniband ]; then
  for d in /sys/class/infiniband/*; do
    [ -e "$d" ] || continue
    case "$(basename "$d")" in bnxt_re*) nic=bnxt_re;; ionic*) nic=ionic;; mlx5*) [ "$nic" = none ] && nic=mlx5;; esac
  done
fi
echo "nic=$nic"
if [ -n "$model" ]; then if [ -e "$model" ]; then echo "model=present"; else echo "model=missing"; fi; fi
listening=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
  awk 'NR>1 && $4=="0A" {split($2,a,":"); print a[2]}' | sort -u)
busy=
for p in $ports; do
  hex=$(printf '%04X' "$p")
  for l in $listening; do [ "$l" = "$hex" ] && busy="$busy $p"; done
done
echo "busy_ports=$busy"
if [ -n "$runtime" ]; then
  if out=$(sh -c "$runtime" 2>&1); then echo "runtime=ok"; else echo "runtime=missing $(echo "$out" | tail -1)"; fi
fi
(
  [ -n "$gpu_path" ] && PATH="$gpu_path:$PATH"
  PATH="$PATH:/opt/rocm/bin"
  if command -v amd-smi >/dev/null 2>&1; then
    echo "gpu_tool=amd-smi"; echo "gpu_json=$(amd-smi metric --mem-usage --json 2>/dev/null | tr -d '\n')"
  elif command -v rocm-smi >/dev/null 2>&1; then
    echo "gpu_tool=rocm-smi"; echo "gpu_json=$(rocm-smi --showmeminfo vram --json 2>/dev/null | tr -d '\n')"
  else
    echo "gpu_tool="; echo "gpu_json="
  fi
)
me=$(readlink /proc/self/ns/net)
runs=
for f in $(cd /proc && grep -lsz '^ATOMDECK_RUN=' [0-9]*/environ); do
  p=${f%/environ}
  [ "$(readlink "/proc/$p/ns/net" 2>/dev/null)" = "$me" ] || continue
  r=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^ATOMDECK_RUN=\([^:]*\):.*/\1/p')
  case " $runs " in *" $r "*) ;; *) [ -n "$r" ] && [ "$r" != "$self_run" ] && runs="$runs $r";; esac
done
echo "atomdeck_runs=$runs"
echo "ips=$(hostname -I 2>/dev/null)"
echo "ifaddrs=$(ip -o addr show 2>/dev/null | awk '{split($4, a, "/"); print $2 "=" a[1]}' | tr '\n' ' ')"
echo "preflight=done"
'''

@dataclass
class NodeCheck:
    node: str
    ports: list[int]
    model_path: str = ""
    runtime: str = ""  # a shell command that fails when the worker's runtime is not importable
    result: dict[str, str] = field(default_factory=dict)
    node_addr: str = ""  # what Slurm (or the cluster file) calls the node's address
    mooncake_dirs: list[str] = field(default_factory=list)  # LD_LIBRARY_PATH entries for Mooncake (no container)
    rdma: bool = False  # a KV transfer over RDMA runs on this node: /dev/infiniband must be there
    nofile: int = 0  # the open-files limit the engine needs (0: not checked here: a container checks its own)
    image_file: str = ""  # the image as a file on the node (pyxis, apptainer squashfs): it must be there
    gpu_path: str = ""  # put first on PATH for amd-smi / rocm-smi (the simulator's shim/bin on simulated clusters)


def node_addresses(result: dict[str, str]) -> list[tuple[str, str]]:
    """(interface, address) pairs the node reported, loopback and IPv6 link-local left out; from
    `hostname -I` alone (interface '?') when `ip` was not there."""
    pairs = []
    for item in result.get("ifaddrs", "").split():
        iface, _, addr = item.partition("=")
        pairs.append((iface.split("@")[0], addr))
    if not pairs:
        pairs = [("?", a) for a in result.get("ips", "").split()]
    keep = []
    for iface, addr in pairs:
        try:
            ip = ipaddress.ip_address(addr.split("%")[0])
        except ValueError:
            continue
        if not (ip.is_loopback or ip.is_link_local):
            keep.append((iface, str(ip)))
    return keep


def pick_node_ip(check: NodeCheck, spec: NodeIp) -> tuple[str | None, str]:
    """The address the node's peers must use, and how it was chosen (or why none could be)."""
    have = node_addresses(check.result)
    shown = ", ".join(f"{a} on {i}" if i != "?" else a for i, a in have) or "no address"
    cands = have
    if spec.interface:
        cands = [(i, a) for i, a in cands if fnmatch.fnmatchcase(i, spec.interface)]
    if spec.subnet:
        net = ipaddress.ip_network(spec.subnet, strict=False)
        cands = [(i, a) for i, a in cands if ipaddress.ip_address(a) in net]
    wanted = " and ".join(x for x in (spec.interface and f"on interface {spec.interface}",
                                      spec.subnet and f"in {spec.subnet}") if x)
    if wanted:
        return (cands[0][1], f"{cands[0][1]} ({wanted})") if cands else (None, f"it has {shown}")
    if check.node_addr in {a for _, a in have}:
        return check.node_addr, f"{check.node_addr} (its NodeAddr)"
    v4 = [a for _, a in have if ":" not in a]
    if v4 or have:
        first = (v4 or [a for _, a in have])[0]
        return first, f"{first} (first of hostname -I)"
    return None, "it reported no address (hostname -I printed nothing)"


def checks_for(plan: Plan, processes: list[ProcessSpec]) -> list[NodeCheck]:
    """What to check on each node: its ports, the model path as the node sees it, the runtime."""
    out = []
    for node in plan.selection.all():
        ports = sorted({port for p in processes if p.node == node for port in p.ports})
        workers = [p for p in processes if p.node == node and p.role != "router"]
        runtime = plan.cluster.container.runtime
        dirs = sorted({d for p in workers for d in p.env.get("LD_LIBRARY_PATH", "").split(":")
                       if "mooncake" in d.lower()}) if runtime == "none" else []
        rdma = plan.recipe.mode == "disagg" and plan.recipe.mooncake.protocol in (None, "rdma") and bool(workers)
        # docker and podman set their own limit (--ulimit, checked in the image); enroot and apptainer keep the node's
        nofile = nofile_needed(plan) if workers and runtime in ("none", "pyxis", "apptainer") else 0
        image = image_of(plan) if runtime in ("pyxis", "apptainer") and plan.recipe.image else ""
        out.append(NodeCheck(node, ports, model_host_path(plan, node), runtime_check(processes, node),
                             node_addr=plan.node(node).addr or "", mooncake_dirs=dirs, rdma=rdma, nofile=nofile,
                             image_file=image if image and is_file_image(image) else "",
                             gpu_path=str(sim_shim_dir() / "bin") if plan.cluster.simulator.enabled else ""))
    return out


def nofile_needed(plan: Plan) -> int:
    """The open-files limit the engine needs: the cluster's `nofile`, else Mooncake's (the simulator's less)."""
    c = plan.cluster
    return c.nofile or (SIM_NOFILE_NEEDED if c.simulator.enabled else NOFILE_NEEDED)


def wrapper_nofile(soft: str, hard: str) -> int | None:
    """The soft limit the engine gets once supervisor.sh raised it (None: unlimited)."""
    if soft == "unlimited":
        return None
    if int(soft) >= WRAPPER_NOFILE:
        return int(soft)
    return WRAPPER_NOFILE if hard == "unlimited" or int(hard) >= WRAPPER_NOFILE else max(int(soft), int(hard))


def model_host_path(plan: Plan, node: str) -> str:
    """The model's path on the node's file system ('' when it is a hub id)."""
    path = plan.recipe.model.path
    if not path.startswith("/"):
        return ""
    c = plan.cluster
    mount = c.container.mount_path.rstrip("/")
    host_dir = c.model_dir(node)
    if c.container.runtime != "none" and host_dir and (path == mount or path.startswith(mount + "/")):
        return host_dir.rstrip("/") + path[len(mount):]
    return path


def runtime_check(processes: list[ProcessSpec], node: str) -> str:
    """A shell command that fails when the node cannot start the worker's program: with a container, its runtime
    must be there (pyxis: srun itself starts it, the image check tells); without, the worker's module must
    import with the worker's own environment."""
    for p in processes:
        if p.node != node or p.role == "router" or not p.inner:
            continue
        if p.step_options:  # pyxis: the program is in the image (the image check runs there)
            return ""
        if p.inner[0] == "docker":
            return ("command -v docker >/dev/null || { echo 'docker: command not found'; exit 1; }; "
                    "docker info >/dev/null 2>&1 || { echo 'docker: the Docker daemon is not reachable'; exit 1; }")
        if p.inner[0] in ("podman", "apptainer"):
            return f"command -v {p.inner[0]} >/dev/null || {{ echo '{p.inner[0]}: command not found'; exit 1; }}"
        if p.argv[:2] == ["python3", "-m"]:
            env = p.inner[1:len(p.inner) - len(p.argv)] if p.inner[0] == "env" else []
            probe = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({p.argv[2]!r}) else 1)"
            return shlex.join(["env", *env, "python3", "-c", probe])
    return ""


def command(check: NodeCheck, run_id: str = "") -> list[str]:
    return ["sh", "-c", SCRIPT, "atomdeck-preflight", " ".join(map(str, check.ports)), check.model_path,
            check.runtime, " ".join(check.mooncake_dirs), run_id, check.image_file, check.gpu_path]


def parse(output: str) -> dict[str, str]:
    out = {}
    for line in output.splitlines():
        k, sep, v = line.partition("=")
        if sep and k.isidentifier():
            out[k] = v.strip()
    return out


def findings_from(check: NodeCheck, recipe_model: str) -> list[Finding]:
    r = check.result
    n = check.node
    out: list[Finding] = []
    if r.get("preflight") != "done":
        out.append(Finding("preflight", "error", f"the pre-flight check did not finish on {n}: "
                           f"{r.get('error', 'no output')}", "--nodes", "check the node, or pick another", n))
        return out
    if r.get("image") == "missing":
        out.append(Finding("preflight-image", "error", f"image {check.image_file} does not exist on {n}",
                           "image", "put the squashfs file there (every node of the run needs it), or fix the path", n))
    if r.get("model") == "missing":
        out.append(Finding("preflight-model", "error", f"model path {check.model_path} is missing on {n}",
                           "model.path", f"put {recipe_model} there, or fix cluster model_dirs", n))
    busy = r.get("busy_ports", "").split()
    if busy:
        out.append(Finding("preflight-ports", "error", f"port(s) {', '.join(busy)} already in use on {n}",
                           "ports", "stop what listens there, or change ports.* in the recipe", n))
    runs = r.get("atomdeck_runs", "").split()
    if runs:  # (a run launched from this machine was refused before pre-flight, naming it: core/run/inuse.py)
        out.append(Finding("preflight-busy", "error",
                           f"processes of another atomdeck run are running on {n}: {listed(runs, 3)} (launched "
                           "from another machine or state directory)", "--nodes",
                           "stop it where it was launched (`atomdeck down RUN`), or pick another node", n))
    rt = r.get("runtime", "")
    if rt.startswith("missing"):
        out.append(Finding("preflight-runtime", "error",
                           f"the worker's runtime cannot start on {n}: {rt[len('missing'):].strip() or 'not found'}",
                           "image / cluster", "install ATOM on the node or use the container image", n))
    out += image_findings(check)
    out += gpu_findings(n, r.get("gpu_tool", ""), r.get("gpu_json", ""))
    return out


def gpu_findings(node: str, tool: str, text: str) -> list[Finding]:
    """Busy GPUs refuse the node: VRAM use above InferenceX's 10 %, read from amd-smi (rocm-smi as the fallback).
    A node whose GPUs cannot be read is not refused for it (the tools may be missing on a login-less image)."""
    try:
        gpus = parse_amdsmi_metric(text) if tool == "amd-smi" else parse_rocmsmi(text) if text else []
    except ValueError:
        return []
    busy = [g for g in gpus if g.busy]
    if not busy:
        return []
    most = max(busy, key=lambda g: g.used_pct or 0)
    which = f"GPU {', '.join(str(g.index) for g in busy)}; " if len(busy) < len(gpus) else ""
    # (rocm-smi --showmemuse, an older pre-flight's reading, gives a percentage only: total 100)
    held = f", {most.used_mb // 1024} GB" if most.used_mb is not None and most.total_mb not in (None, 100) else ""
    return [Finding("preflight-gpu", "error",
                    f"{len(busy)}/{len(gpus)} GPUs on {node} already hold VRAM ({which}up to "
                    f"{most.used_pct or 0:.0f}%{held}, by {tool or 'rocm-smi'}): another job, or a leftover process",
                    "--nodes",
                    f"free the GPUs (VRAM <= {VRAM_IDLE_PCT}% each; `amd-smi process` names what holds them) "
                    "or pick another node", node)]


def image_findings(check: NodeCheck) -> list[Finding]:
    """What the DeepSeek recipes assume of the place the engine runs: Mooncake's library directory, enough
    open files for Mooncake, and the RDMA devices when the KV transfer is RDMA."""
    r, n, out = check.result, check.node, []
    for d in r.get("mooncake_missing", "").split():
        out.append(Finding("preflight-mooncake", "error",
                           f"LD_LIBRARY_PATH names {d} for Mooncake, but {n} has no such directory",
                           "env.LD_LIBRARY_PATH", "point it at <site-packages>/mooncake of the Python that runs ATOM",
                           n))
    soft, _, hard = r.get("nofile", "").partition(" ")
    valid = all(x == "unlimited" or x.isdigit() for x in (soft, hard)) and soft and hard
    raised = wrapper_nofile(soft, hard) if check.nofile and valid else None
    if raised is not None and raised < check.nofile:
        if hard != "unlimited" and int(hard) < check.nofile:
            out.append(Finding("preflight-nofile", "error",
                               f"the open-files limit on {n} is {soft} (at most {hard}); Mooncake needs "
                               f"{check.nofile} and atomdeck can raise it only up to the hard limit",
                               "cluster", f"raise the hard limit (nofile {check.nofile} in limits.conf, or Slurm's "
                                          "PropagateResourceLimits), or run in a container (--ulimit nofile)", n))
        else:
            out.append(Finding("preflight-nofile", "error",
                               f"the open-files limit on {n} is {soft}; atomdeck's wrapper raises it to {raised}, "
                               f"but the cluster's nofile asks for {check.nofile}",
                               "nofile", f"raise the soft limit on the nodes to {check.nofile}, or lower nofile", n))
    if check.rdma and r.get("ib_dev") == "no":
        out.append(Finding("preflight-rdma", "error",
                           f"the KV transfer is RDMA but {n} has no /dev/infiniband",
                           "mooncake.protocol", "set mooncake.protocol: tcp, or pick nodes with RDMA devices", n))
    return out


def image_checks_for(plan: Plan, processes: list[ProcessSpec]) -> list[ImageCheck]:
    """What to check inside the image (image_check.py), with the open-files limit the engine needs."""
    return _image_checks_for(plan, processes, nofile_needed(plan))


def ip_findings(checks: list[NodeCheck], spec: NodeIp) -> tuple[dict[str, str], list[Finding]]:
    """Each node's own address (node -> IP), and a finding naming every node where none matches."""
    ips, out = {}, []
    key = "node_ip.interface" if spec.interface else "node_ip.subnet"
    for ch in checks:
        if ch.result.get("preflight") != "done":
            continue
        ip, why = pick_node_ip(ch, spec)
        if ip is None:
            wanted = " and ".join(x for x in (spec.interface and f"on interface {spec.interface}",
                                              spec.subnet and f"in {spec.subnet}") if x) or "at all"
            out.append(Finding("preflight-node-ip", "error", f"{ch.node} has no address {wanted}: {why}", key,
                               "set node_ip.interface or node_ip.subnet to the network the nodes share", ch.node))
        else:
            ips[ch.node] = ip
    return ips, out


async def run_checks(plan: Plan, processes: list[ProcessSpec],
                     run_on: Callable[[str, list[str]], Awaitable[Result]],
                     run_id: str = "", *,
                     run_image: Callable[[str, list[str], float], Awaitable[Result]] | None = None,
                     progress: Callable[[str], None] | None = None) -> dict[str, dict[str, str]]:
    """Run the script on every node in parallel (run_on(node, argv) runs it there: an srun step, an SSH
    command), then the checks inside the image (image_check.py) with run_image(node, argv, timeout), which may
    pull it: container.pull_timeout_s each, `progress` told every PROGRESS_S which are still running. Raises
    PreflightError with every finding; returns facts: each node's RDMA NIC type ("nic") and the address its
    peers must use, learned from the node itself ("node_ips"). `run_id`: this launch's run, whose own
    processes (a Slurm node's step) are not another run's."""
    from .engine_flags import cache_load, cache_save

    checks = checks_for(plan, processes)
    images = image_checks_for(plan, processes)
    cache = cache_load("image-checks") if images else {}

    async def one(ch: NodeCheck) -> None:
        res = await run_on(ch.node, command(ch, run_id))
        ch.result = parse(res.stdout)
        if not res.ok and "preflight" not in ch.result:
            ch.result["error"] = f"exit {res.rc}: " + ((res.stderr or res.stdout).strip()[-300:] or "no output")

    await asyncio.gather(*(one(ch) for ch in checks))
    unfit = {ch.node for ch in checks if ch.result.get("preflight") != "done" or ch.result.get("image") == "missing"}
    images = [ch for ch in images if ch.node not in unfit]  # a missing image file is named once, by the node check
    await _check_images(plan, images, cache, run_image or (lambda node, argv, _t: run_on(node, argv)), progress)
    findings = [f for ch in checks for f in findings_from(ch, plan.recipe.model.path)]
    image_errors = {ch.key: image_check_findings(ch) for ch in images}
    passed = {ch.key: ch.result for ch in images if ch.cacheable and not ch.cached and not image_errors[ch.key]}
    if passed:
        cache_save(passed, "image-checks")  # only what passed: a fixed image is checked again
    findings += [f for fs in image_errors.values() for f in fs]
    ips, ip_errors = ip_findings(checks, plan.cluster.node_ip)
    if findings or ip_errors:
        raise PreflightError(findings + ip_errors)
    facts: dict[str, dict[str, str]] = {"nic": {ch.node: ch.result.get("nic", "none") for ch in checks},
                                        "node_ips": ips}
    if images:
        done: dict[str, list[str]] = {}
        for ch in images:
            done.setdefault(ch.image, []).append("cached" if ch.cached else ch.node)
        facts["image_checks"] = {img: "cached" if where == ["cached"] else f"checked on {', '.join(where)}"
                                 for img, where in done.items()}
    return facts


async def _check_images(plan: Plan, images: list[ImageCheck], cache: dict,
                        run_image: Callable[[str, list[str], float], Awaitable[Result]],
                        progress: Callable[[str], None] | None) -> None:
    """The image checks in parallel, each up to container.pull_timeout_s (a pull), with a progress line every
    PROGRESS_S naming the nodes still at it."""
    timeout = plan.cluster.container.pull_timeout_s
    running: set[str] = set()

    async def one(ch: ImageCheck) -> None:
        if ch.cacheable and isinstance(cache.get(ch.key), dict):
            ch.result, ch.cached = cache[ch.key], True
            return
        running.add(ch.node)
        try:
            res = await run_image(ch.node, ch.command(), timeout)
        finally:
            running.discard(ch.node)
        ch.result = parse(res.stdout)
        if not res.ok and "preflight" not in ch.result:
            said = (res.stderr or res.stdout).strip()
            if res.rc == 124 and res.stderr.startswith("timed out"):
                ch.result["error"] = f"no answer within {timeout:g} s (container.pull_timeout_s): {res.explain()}"
            elif ch.runtime == "pyxis":
                ch.result["error"] = pyxis_error(said)
            else:
                ch.result["error"] = f"exit {res.rc}: " + (said[-300:] or "no output")

    if not images:
        return
    task = asyncio.gather(*(one(ch) for ch in images))
    if progress:
        img = images[0].image
        progress(f"checking image {img} on {', '.join(sorted({ch.node for ch in images}))} "
                 f"(up to {timeout:g} s: it may be pulled)")
    t0 = asyncio.get_running_loop().time()
    while True:
        try:
            async with asyncio.timeout(PROGRESS_S):
                await asyncio.shield(task)
            return
        except TimeoutError:
            if progress and running:
                progress(f"image check still running on {', '.join(sorted(running))} after "
                         f"{asyncio.get_running_loop().time() - t0:.0f} s (up to {timeout:g} s)")
