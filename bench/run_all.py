"""Run every benchmark and write bench/results/latest.json and the table in bench/README.md.

    .venv/bin/python bench/run_all.py            # everything (the lab parts need root and the lab up)
    .venv/bin/python bench/run_all.py detect     # one section
    .venv/bin/python bench/run_all.py soak --minutes 5   # the soak, shorter than its 30 minutes

console-scale (128 simulated nodes, ~8 GB of RAM) and soak (30 minutes) are not in the default list:
name them.

Machines here are shared and noisy: compare ratios measured in the same run, not absolute numbers
from different days.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile

from common import BENCH, load, save

SECTIONS = ["detect", "sim", "scale", "teardown", "fanout", "console", "slurm-scale"]
EXTRA = ["console-scale", "soak"]  # long or heavy: run when named


def lab_up() -> bool:
    return subprocess.run(["sinfo", "-h"], capture_output=True).returncode == 0


def run(section: str, minutes: float = 30.0) -> None:
    if section == "detect":
        import detect

        save("detect", asyncio.run(detect.main(6)))
        if lab_up():  # process death over ssh and srun (the lab: root, tests/cluster/up.sh)
            save("detect_lab", {c: asyncio.run(detect.lab_death(c)) for c in ("lab-ssh", "lab")})
    elif section == "sim":
        import sim

        save("sim", asyncio.run(sim.main()))
    elif section == "scale":
        import scale

        save("scale", scale.main())
    elif section == "teardown":
        import teardown

        clusters = ["local"] + (["lab", "lab-ssh"] if lab_up() else [])
        save("teardown", asyncio.run(teardown.main(clusters)))
    elif section == "fanout":
        if not lab_up():
            print("fanout: the lab is not up (tests/cluster/up.sh as root); skipped", file=sys.stderr)
            return
        import fanout

        save("fanout", asyncio.run(fanout.main()))
    elif section == "console":
        import console

        save("console", console.main())
    elif section == "console-scale":
        import scale_console

        save("console-scale", scale_console.main())
    elif section == "soak":
        import soak

        save("soak", soak.main(minutes))
    elif section == "slurm-scale":
        if not lab_up():
            print("slurm-scale: the lab is not up (tests/cluster/up.sh as root); skipped", file=sys.stderr)
            return
        import slurm_scale

        save("slurm-scale", slurm_scale.main())


def fmt(v, unit: str = "s") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "**no**"
    if isinstance(v, float):
        return f"{v * 1000:.0f} ms" if unit == "s" and v < 1 else f"{v:.2f} {unit}".strip()
    return str(v)


def table(r: dict) -> str:
    out = ["| benchmark | result | goal | met |", "|---|---|---|---|"]
    d = r.get("detect")
    if d:
        h, p, g = d["hints"], d["probe_only"], d["goal"]
        out.append(f"| port open -> state change (with ATOM's log hints) | median {fmt(h['atomdeck']['median'])}, "
                   f"p95 {fmt(h['atomdeck']['p95'])} (n={h['atomdeck']['n']}) | median <= 25 ms, p95 <= 60 ms | "
                   f"{fmt(g['median_le_0.025s'] and g['p95_le_0.06s'])} |")
        out.append(f"| same, probes only (a program that logs nothing) | median {fmt(p['atomdeck']['median'])}, p95 "
                   f"{fmt(p['atomdeck']['p95'])} | median <= 200 ms | {fmt(g['probe_only_median_le_0.2s'])} |")
        out.append(f"| baseline: 5 s TCP poll (sync.py) | median {fmt(h['tcp5']['median'])}, p95 {fmt(h['tcp5']['p95'])}"
                   f" | atomdeck >= 10x faster | {fmt(g['10x_faster_than_baselines'])} "
                   f"({h['tcp5']['median'] / h['atomdeck']['median']:.0f}x) |")
        out.append(f"| baseline: 10 s HTTP /health poll (server_atom.sh) | median {fmt(h['http10']['median'])}, p95 "
                   f"{fmt(h['http10']['p95'])} | | ({h['http10']['median'] / h['atomdeck']['median']:.0f}x) |")
        death = d.get("death_all", h["death_atomdeck"])
        out.append(f"| process death -> reported (local) | atomdeck median {fmt(death['median'])}, p95 "
                   f"{fmt(death['p95'])} (n={death['n']}); 5 s TCP poll {fmt(h['death_tcp5']['median'])} "
                   f"(InferenceX: only at its timeout) | median <= 25 ms | "
                   f"{fmt(g.get('death_median_le_0.025s', death['median'] <= 0.025))} |")
        conn = max(h["connects_per_s_per_node"]["max"], p["connects_per_s_per_node"]["max"])
        tables = p.get("table_reads_per_s")
        out.append(f"| probe traffic | median {h['connects_per_s_per_node']['median']:.1f}, max {conn:.1f} connects/s "
                   f"per node" + (f"; listening-socket table read {tables['median']:.0f}/s (local: one read for all "
                                  f"nodes)" if tables and tables["n"] else "") + " | <= 5 connects/s per node | "
                   f"{fmt(conn <= 5)} |")
        for c, v in (r.get("detect_lab") or {}).items():
            if v.get("n"):
                out.append(f"| process death -> reported over {'ssh' if c == 'lab-ssh' else 'srun'} (lab) | median "
                           f"{fmt(v['median'])}, max {fmt(v['max'])} (n={v['n']}) | median <= 250 ms | "
                           f"{fmt(v['median'] <= 0.25)} |")
        if "load_average" in d:
            la = d["load_average"]
            out.append(f"| machine load during detect (1-min load average, 2 cores) | {la['before'][0]:.1f} before, "
                       f"{la['after'][0]:.1f} after | | |")
    f = r.get("fanout")
    if f:
        for kind in ("ssh", "srun"):
            k = f[kind]
            out.append(f"| launch fan-out over {kind}: 1 / 4 / 16 processes, parallel | {fmt(k['1_parallel_s'])} / "
                       f"{fmt(k['4_parallel_s'])} / {fmt(k['16_parallel_s'])} (one after another: 16 in "
                       f"{fmt(k['16_sequential_s'])}) | 16 within 2x of 1 | {fmt(k['goal_16_within_2x_of_1'])} "
                       f"({k['16_parallel_s'] / k['1_parallel_s']:.1f}x) |")
            if "16_parallel_machine_cpu_s" in k:
                out.append(f"| machine CPU for those starts over {kind}: 1 / 16 processes | "
                           f"{fmt(k['1_parallel_machine_cpu_s'])} / {fmt(k['16_parallel_machine_cpu_s'])} (16 on "
                           f"{k['cores']} cores: at best {fmt(k['16_parallel_cpu_floor_s'])}) | | |")
    t = r.get("teardown")
    if t:
        for key, v in t.items():
            if isinstance(v, dict) and "seconds" in v:
                out.append(f"| teardown {key} to verified clean | {fmt(v['seconds'])} | <= grace ({t['grace_s']:g} s) + 1 s"
                           f" | {fmt(v['goal_le_grace_plus_1s'] and v['clean'])} |")
        for cluster, v in (t.get("frozen") or {}).items():
            out.append(f"| teardown {cluster}/demo-1p1d, its decode frozen (SIGSTOP) with a request in flight, to "
                       f"verified clean | {fmt(v['seconds'])}"
                       + (f"; SIGKILL after the grace: {', '.join(v['killed_after_grace'])}" if v['killed_after_grace']
                          else "; none waited out the grace") +
                       f" | <= grace ({v['grace_s']:g} s) + 1 s | {fmt(v['goal_le_grace_plus_1s'] and v['clean'])} |")
    m = r.get("sim")
    if m:
        out.append(f"| simulator: 2P1D (4 processes), delays off, launch -> serving | {fmt(m['launch_to_serving_s'])}"
                   f" | < 5 s | {fmt(m['goal_start_le_5s'])} |")
        out.append(f"| simulator: 2P1D total RSS (process trees) | {m['rss_mb']:.0f} MB | < 400 MB | "
                   f"{fmt(m['goal_rss_le_400mb'])} |")
    s = r.get("scale")
    if s:
        p = s["plan_lint_render_s"]
        out.append(f"| plan + lint + commands, 8 / 64 / 256 nodes | {fmt(p['8'])} / {fmt(p['64'])} / {fmt(p['256'])} "
                   f"(64 -> 256: x{s['growth_64_to_256']}) | <= 100 ms at 256, ~linear | {fmt(s['goal_256_le_100ms'])} |")
        out.append(f"| `atomdeck --help` | {fmt(s['help_s'])} | | |")
        out.append(f"| `atomdeck plan demo-2p1d --json` | {fmt(s['plan_json_s'])} | | |")
    for name in ("console", "console-scale", "soak"):
        for line in (r.get(name) or {}).get("table", []):
            out.append(line)
    if r.get("slurm-scale"):
        import slurm_scale

        out += slurm_scale.rows(r["slurm-scale"])
    return "\n".join(out)


def write_readme(r: dict) -> None:
    path = BENCH / "README.md"
    text = path.read_text() if path.exists() else ""
    start, end = "<!-- results:start -->", "<!-- results:end -->"
    block = f"{start}\n{table(r)}\n{end}"
    if start in text and end in text:
        text = text[:text.index(start)] + block + text[text.index(end) + len(end):]
    else:
        text += "\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    sys.path.insert(0, str(BENCH))
    args = sys.argv[1:]
    minutes = 30.0
    if "--minutes" in args:
        i = args.index("--minutes")
        minutes = float(args[i + 1])
        del args[i:i + 2]
    unknown = [a for a in args if a not in SECTIONS + EXTRA]
    if unknown:
        raise SystemExit(f"unknown section(s) {unknown}; sections: {', '.join(SECTIONS + EXTRA)}")
    for section in args or SECTIONS:
        print(f"== {section}", file=sys.stderr, flush=True)
        run(section, minutes)
    write_readme(load())
    print(table(load()))
