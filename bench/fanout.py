"""Launch fan-out over SSH and over srun: time until every process is started, in parallel versus
one after another, for 1, 4 and 16 processes on the lab's 4 nodes. Goal: 16 within 2x the time of 1."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time

from atomdeck.core.config.cluster import load_cluster
from atomdeck.core.config.paths import find_cluster
from atomdeck.core.design.commands import ProcessSpec
from atomdeck.core.launch.slurm import SlurmLauncher
from atomdeck.core.launch.ssh import SshLauncher
from atomdeck.core.run.rundir import RunDir, new_run_id
from common import save

NODES = ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03", "mia1-p01-g04"]


def specs(n: int) -> list[ProcessSpec]:
    out = []
    for i in range(n):
        node = NODES[i % len(NODES)]
        argv = ["sleep", "120"]
        out.append(ProcessSpec(f"p{i}", "worker", node, node, argv, {}, {}, argv, argv, [], "", None))
    return out


def machine_cpu_s() -> float:
    """CPU time spent by the whole machine so far (user+nice+system+irq+softirq, all cores): the lab's
    nodes, slurmctld, slurmd, slurmstepd, sshd and our own process all share these cores."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7)) / os.sysconf("SC_CLK_TCK")


async def _time_start(launcher, procs, parallel: bool) -> tuple[float, float, list]:
    c0, t0 = machine_cpu_s(), time.perf_counter()
    if parallel:
        handles = await launcher.start_many(procs)
        bad = [h for h in handles if isinstance(h, BaseException)]
        if bad:
            raise bad[0]
    else:
        handles = [await launcher.start(p) for p in procs]
    return time.perf_counter() - t0, machine_cpu_s() - c0, list(handles)


async def bench_kind(kind: str) -> dict:
    cluster = load_cluster(find_cluster("lab-ssh" if kind == "ssh" else "lab"))
    out: dict = {}
    run_id = new_run_id(f"bench-fanout-{kind}")
    rd = RunDir.create(run_id)
    if kind == "ssh":
        launcher = SshLauncher(run_id, str(rd.path), cluster, {})
        # warm: one connection per node (the launch path opens them in parallel during prepare)
        await asyncio.gather(*(launcher.shell(n).run(["mkdir", "-p", f"{launcher.remote_dir}/logs"]) for n in NODES))
    else:
        launcher = SlurmLauncher(run_id, str(rd.path), cluster, {})
        await launcher._submit(NODES)
        await launcher._mkdir_shared()
    try:
        for n in (1, 4, 16):
            for parallel in (True, False):
                times, cpus = [], []
                for rep in range(3 if n == 1 else 1):  # one process is quick: take the median of three
                    procs = specs(n)
                    for p in procs:
                        object.__setattr__(p, "name", f"{p.name}-{n}-{'par' if parallel else 'seq'}-{rep}")
                    dt, cpu, handles = await _time_start(launcher, procs, parallel)
                    times.append(dt)
                    cpus.append(cpu)
                    await launcher.stop(handles, grace=2)
                key = f"{n}_{'parallel' if parallel else 'sequential'}"
                out[f"{key}_s"] = round(sorted(times)[len(times) // 2], 3)
                out[f"{key}_machine_cpu_s"] = round(sorted(cpus)[len(cpus) // 2], 3)
    finally:
        await launcher.release()
        await launcher.close()
    # what the machine's cores could do at best: the CPU the 16 starts cost, spread over every core
    out["cores"] = os.cpu_count()
    out["16_parallel_cpu_floor_s"] = round(out["16_parallel_machine_cpu_s"] / out["cores"], 3)
    out["goal_16_within_2x_of_1"] = out["16_parallel_s"] <= 2 * out["1_parallel_s"]
    return out


async def main() -> dict:
    return {"ssh": await bench_kind("ssh"), "srun": await bench_kind("slurm")}


if __name__ == "__main__":
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    res = asyncio.run(main())
    save("fanout", res)
    import json

    print(json.dumps(res, indent=2))
