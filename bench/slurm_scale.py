"""Slurm at scale on the lab (issue 19, "Scale"): the most TP1 workers the lab's 4 nodes hold co-located
(`per_node` > 1), launched directly (`lab`) and through the login host (`lab-login`); what the launching
host pays per held process for the `srun` clients that stay alive for the run (RSS, PSS, CPU); time until
every process is started; teardown to verified clean. Then the launcher alone holding many `sleep`
processes per node (what the Slurm side holds beyond the GPU limit).

    .venv/bin/python bench/slurm_scale.py           # needs root and the lab up (tests/cluster/up.sh)

The launching host is this machine for `lab` and the login host's namespace for `lab-login`: the cost is
every process there that carries the run's `ATOMDECK_RUN` marker or names the run (srun clients, their
forked helpers, shell wrappers), summed, divided by the processes the run holds on the nodes.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from atomdeck.core.config.cluster import load_cluster
from atomdeck.core.config.paths import find_cluster
from atomdeck.core.design.commands import ProcessSpec
from atomdeck.core.design.edit import set_field
from atomdeck.core.design.workspace import load_workspace
from atomdeck.core.launch.slurm import SlurmLauncher
from atomdeck.core.run.inventory import fetch_inventory
from atomdeck.core.run.run import Run
from atomdeck.core.run.rundir import RunDir, new_run_id
from common import save

NODES = ["mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03", "mia1-p01-g04"]
LOGIN_NS = "/run/netns/mia1-login"
GRACE = 5.0
WINDOW_S = 10.0  # CPU of the srun clients is read over this long while the run holds
TICK = os.sysconf("SC_CLK_TCK")


def _netns(pid: int | str) -> int:
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def launching_procs(run_id: str, cluster: str) -> list[int]:
    """Processes of the run on the launching host (see the module doc)."""
    where = os.stat(LOGIN_NS).st_ino if cluster == "lab-login" else _netns("self")
    me = os.getpid()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            if _netns(d.name) != where:
                continue
            env = (d / "environ").read_bytes()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if f"ATOMDECK_RUN={run_id}:".encode() in env or run_id.encode() in cmd:
            out.append(int(d.name))
    return out


def _cpu_ticks(pid: int) -> int | None:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        return None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def _kb(pid: int, path: str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


async def client_cost(run_id: str, cluster: str, held: int) -> dict:
    """RSS, PSS and CPU of the run's processes on the launching host, per process held on the nodes."""
    pids = launching_procs(run_id, cluster)
    rss = sum(_kb(p, "status", "VmRSS:") for p in pids)
    pss = sum(_kb(p, "smaps_rollup", "Pss:") for p in pids)
    before = {p: _cpu_ticks(p) for p in pids}
    await asyncio.sleep(WINDOW_S)
    after = {p: _cpu_ticks(p) for p in pids}
    cpu = sum(after[p] - before[p] for p in pids if before[p] is not None and after[p] is not None) / TICK
    srun = [p for p in pids if _comm(p) == "srun"]
    by_comm: dict[str, int] = {}
    for p in pids:
        by_comm[_comm(p)] = by_comm.get(_comm(p), 0) + 1
    return {"client_processes": len(pids), "held": held, "by_command": by_comm,
            "srun_processes": len(srun), "srun_rss_mb": round(sum(_kb(p, "status", "VmRSS:") for p in srun) / 1024, 1),
            "srun_pss_mb": round(sum(_kb(p, "smaps_rollup", "Pss:") for p in srun) / 1024, 1),
            "rss_mb": round(rss / 1024, 1), "pss_mb": round(pss / 1024, 1),
            "rss_mb_per_held": round(rss / 1024 / max(1, held), 2),
            "pss_mb_per_held": round(pss / 1024 / max(1, held), 2),
            "cpu_pct_of_core": round(100 * cpu / WINDOW_S, 2),
            "cpu_pct_per_held": round(100 * cpu / WINDOW_S / max(1, held), 3)}


def workspace(cluster: str, per_node: int):
    os.environ["ATOMDECK_SIM_SPEED"] = "20"
    ws = load_workspace("demo-1p1d", cluster)
    ws.inventory, _ = asyncio.run(fetch_inventory(ws.cluster))
    for path, value in {"prefill.workers": 2 * per_node, "prefill.per_node": per_node, "prefill.tp": 1,
                        "decode.workers": 2 * per_node, "decode.per_node": per_node, "decode.tp": 1,
                        # 8 co-located workers take HTTP ports 8010-8017 / 8020-8027: engine ports elsewhere
                        "ports.prefill_http": 8100, "ports.decode_http": 8200, "ports.engine": 8300}.items():
        ws.recipe = set_field(ws.recipe, path, value)
    return ws


def limit(cluster: str, per_node: int) -> str:
    """What refuses one more co-located TP1 worker per node (lint, before anything runs)."""
    a = workspace(cluster, per_node).assess()
    return "; ".join(f"{f.rule}: {f.message}" for f in a.errors()) or "accepted"


def layout(cluster: str, per_node: int) -> dict:
    """16P16D TP1 (8 per node) + router on the 4 nodes: start, serve, cost, teardown."""
    ws = workspace(cluster, per_node)
    a = ws.assess()
    assert a.ok, a.findings

    async def go() -> dict:
        t0 = time.perf_counter()
        run = await Run.launch(ws, a)
        started = time.perf_counter() - t0
        out: dict = {"processes": len(run.processes), "per_node": per_node, "started_s": round(started, 3)}
        try:
            state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=240)
            out["serving_s"] = round(time.perf_counter() - t0, 2) if state.status == "serving" else None
            out["status"] = state.status if state.status == "serving" else f"{state.status}: {state.diagnosis}"
            out["alive"] = sum(p.alive is not False for p in state.procs.values())
            out["launching_host"] = await client_cost(run.id, cluster, len(run.processes))
        finally:
            await run.close()
            t1 = time.perf_counter()
            report = await Run.open(run.id).teardown(grace=GRACE)
            out["teardown_s"] = round(time.perf_counter() - t1, 3)
            out["teardown_clean"] = report.clean
            out["teardown_le_grace_plus_2s"] = out["teardown_s"] <= GRACE + 2
        return out

    return asyncio.run(go())


async def hold(cluster: str, per_node: int) -> dict:
    """The launcher alone: per_node `sleep` processes on each of the 4 nodes (no GPU, no engine)."""
    c = load_cluster(find_cluster(cluster))
    run_id = new_run_id(f"bench-slurm-hold-{cluster}")
    rd = RunDir.create(run_id)
    launcher = SlurmLauncher(run_id, str(rd.path), c, {})
    out: dict = {"per_node": per_node, "processes": per_node * len(NODES)}
    specs = []
    for i in range(per_node * len(NODES)):
        node = NODES[i % len(NODES)]
        argv = ["sleep", "600"]
        specs.append(ProcessSpec(f"s{i}", "worker", node, node, argv, {}, {}, argv, argv, [], "", None))
    try:
        await launcher._submit(NODES)
        await launcher._mkdir_shared()
        await _hold(launcher, specs, cluster, run_id, out)
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"[:300]
    finally:
        t2 = time.perf_counter()
        out["release"] = await launcher.release()
        out["release_s"] = round(time.perf_counter() - t2, 3)
        await launcher.close()
    return out


async def _hold(launcher, specs: list[ProcessSpec], cluster: str, run_id: str, out: dict) -> None:
    t0 = time.perf_counter()
    handles = await launcher.start_many(specs)
    out["started_s"] = round(time.perf_counter() - t0, 3)
    bad = [h for h in handles if isinstance(h, BaseException)]
    ok = [h for h in handles if not isinstance(h, BaseException)]
    out["started"] = len(ok)
    out["errors"] = sorted({str(e).splitlines()[-1][:200] for e in bad})
    many = getattr(launcher, "poll_many", None)
    alive = await many(ok) if many else await asyncio.gather(*(launcher.poll(h) for h in ok))
    out["alive"] = sum(st.alive for st in alive)
    out["launching_host"] = await client_cost(run_id, cluster, len(ok))
    t1 = time.perf_counter()
    reports = await launcher.stop(ok, GRACE)
    out["stop_s"] = round(time.perf_counter() - t1, 3)
    out["stopped_ok"] = sum(r.ok for r in reports)


def rows(r: dict) -> list[str]:
    """The README table's rows for this section (run_all.py)."""
    def ms(v) -> str:
        return "-" if v is None else f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"

    out = []
    for cluster in ("lab", "lab-login"):
        c = r.get(cluster)
        if not c:
            continue
        lay = c["layout_8_per_node"]
        cost = lay.get("launching_host", {})
        out.append(f"| Slurm ({cluster}): co-located TP1 workers held on the lab's 4 nodes | {lay['processes']} "
                   f"processes (16P16D TP1, {lay['per_node']} per node, + router): all started in "
                   f"{ms(lay['started_s'])}, {lay.get('status')} in {ms(lay.get('serving_s'))}; a 9th per node: "
                   f"`{c['limit_per_node_9'].split(';')[0]}` | the most the nodes' GPUs allow | "
                   f"{'yes' if lay.get('serving_s') else '**no**'} |")
        was = r.get("before", {}).get(cluster, {}).get("layout_8_per_node", {}).get("launching_host")
        before = (f"; before (one step per process): RSS {was['rss_mb_per_held']} MB, PSS {was['pss_mb_per_held']} "
                  f"MB, CPU {was['cpu_pct_per_held']} % per held process ({was['client_processes']} processes)"
                  if was else "")
        held = max(1, cost.get("held") or 1)
        if "srun_processes" in cost:  # the srun clients apart from the rest (log tails through a login host)
            per = round(cost["srun_rss_mb"] / held, 2)
            what = (f"srun clients: {cost['srun_processes']} processes, RSS {per} MB, PSS "
                    f"{round(cost['srun_pss_mb'] / held, 2)} MB per held process; every process of the run there "
                    f"at that moment ({cost['client_processes']}, with log tails and short commands): RSS "
                    f"{cost.get('rss_mb_per_held')} MB per held; CPU {cost.get('cpu_pct_per_held')} % of a core per held")
        else:
            per = cost.get("rss_mb_per_held") or 99
            what = (f"RSS {cost.get('rss_mb_per_held')} MB, PSS {cost.get('pss_mb_per_held')} MB, CPU "
                    f"{cost.get('cpu_pct_per_held')} % of a core ({cost.get('client_processes')} client processes for "
                    f"{cost.get('held')})")
        out.append(f"| Slurm ({cluster}): launching host per held process | {what}{before} | <= 5 MB, ~0 CPU | "
                   f"{'yes' if per <= 5 else '**no**'} |")
        out.append(f"| Slurm ({cluster}): teardown of those {lay['processes']} to verified clean | "
                   f"{ms(lay.get('teardown_s'))} ({'clean' if lay.get('teardown_clean') else '**not clean**'}) | "
                   f"<= grace ({r['grace_s']:g} s) + 2 s | "
                   f"{'yes' if lay.get('teardown_le_grace_plus_2s') and lay.get('teardown_clean') else '**no**'} |")
        for key in sorted((k for k in c if k.startswith("hold_")), key=lambda k: int(k.split("_")[1])):
            h = c[key]
            hc = h.get("launching_host", {})
            out.append(f"| Slurm ({cluster}): the launcher alone, {h['per_node']} `sleep` per node | "
                       f"{h.get('started')}/{h['processes']} started in {ms(h.get('started_s'))}, "
                       f"{h.get('alive')} alive; host: RSS {hc.get('rss_mb_per_held')} MB per process "
                       f"({hc.get('client_processes')} client processes); stop {ms(h.get('stop_s'))}, release "
                       f"{ms(h.get('release_s'))} | | |")
    return out


def main(hold_per_node: tuple[int, ...] = (8, 64)) -> dict:
    out: dict = {"grace_s": GRACE, "window_s": WINDOW_S}
    for cluster in ("lab", "lab-login"):
        r: dict = {"limit_per_node_9": limit(cluster, 9)}
        try:
            r["layout_8_per_node"] = layout(cluster, 8)
        except Exception as e:  # a number that could not be had is a result too
            r["layout_8_per_node"] = {"processes": 33, "per_node": 8, "started_s": None,
                                      "error": f"{type(e).__name__}: {e}"[:300]}
        for n in hold_per_node:
            try:
                r[f"hold_{n}_per_node"] = asyncio.run(hold(cluster, n))
            except Exception as e:
                r[f"hold_{n}_per_node"] = {"per_node": n, "processes": n * len(NODES),
                                           "error": f"{type(e).__name__}: {e}"[:300]}
        out[cluster] = r
    return out


if __name__ == "__main__":
    import json
    import sys

    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    sizes = tuple(int(x) for x in sys.argv[1:]) or (8, 64)
    res = main(sizes)
    if os.environ.get("SLURM_SCALE_BEFORE"):  # the same bench run on the launcher before a change
        res["before"] = json.loads(Path(os.environ["SLURM_SCALE_BEFORE"]).read_text())
    save("slurm-scale", res)
    print(json.dumps(res, indent=2))
