"""Accuracy cross-check: `atomdeck bench` and NVIDIA's aiperf side by side on the same deployment (the demo
1P1D through its router, simulator at the demo pace), the same prompts (one dataset file) and the same
concurrency, the tools alternated. Goal: output throughput, median TTFT and median TPOT within 10 %.

A third witness settles a disagreement: the router's port captured on the wire (bench/wire.py, kernel timestamps)
gives the server's own time of every request (prompt in -> first token out -> [DONE] out) and the tokens it
really sent. Each tool's per-request TTFT and end-to-end time are compared with the wire's for the same requests
(matched by aiperf's X-Request-ID header, atomdeck's by its prompt: one dataset line per request), their token
counts with the token events on the wire. Each tool's own CPU is measured (all its processes: the rusage of the
tool's process and every child it waited for; and its process tree's CPU while its measured requests were at the
server), and meanwhile the deployment's CPU and its time waiting for a CPU (its threads' run-queue wait).

`--pin`: the deployment (and the wire capture) on CPU 1, each client on CPU 0 (`taskset`), so the clients' CPU
does not come out of the simulated server's.

aiperf lives only in a bench venv, never in atomdeck's dependencies:
    python3 -m venv /work/aiperf-venv && /work/aiperf-venv/bin/pip install aiperf tokenizers
It runs offline with a local tokenizer: a WordLevel tokenizer over the simulator's vocabulary (built
here with `tokenizers`, saved with a tokenizer_config.json), so aiperf counts tokens as the simulator does.

    flock /tmp/atomdeck-demo.lock .venv/bin/python bench/crosscheck.py [AIPERF_VENV] [CONCURRENCY REQUESTS]
        [--pin] [--reps N] [--no-wire] [--aiperf-args "..."]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from atomdeck.core.measure.workload import random_prompts, write_dataset
from atomdeck.sim.engine import VOCAB
from common import BENCH, save

ISL, OSL = 256, 64
SERVER_CPU, CLIENT_CPU = "1", "0"

TOKENIZER = """
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers
vocab = {"[UNK]": 0}
for w in json.loads(sys.argv[2]):
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()  # words and punctuation, like the simulator's tokenizer
tok.save(sys.argv[1] + "/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 1000000},
          open(sys.argv[1] + "/tokenizer_config.json", "w"))
"""


def build_tokenizer(venv: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(venv / "bin/python"), "-c", TOKENIZER, str(out), json.dumps(VOCAB)], check=True)


def atomdeck_cmd(run_id: str, data: Path, conc: int, n: int) -> list[str]:
    return [sys.executable, "-m", "atomdeck.core.cli.main", "bench", run_id, "--dataset", str(data), "--osl", str(OSL),
            "--concurrency", str(conc), "--num-prompts", str(n), "--warmup", "2", "--json"]


def aiperf_cmd(venv: Path, url: str, model: str, data: Path, tok: Path, out: Path, conc: int, n: int,
               extra: list[str]) -> list[str]:
    return [str(venv / "bin/aiperf"), "profile", "--model", model, "--url", url, "--endpoint-type", "completions",
            "--streaming", "--input-file", str(data), "--custom-dataset-type", "single_turn", "--concurrency",
            str(conc), "--request-count", str(n), "--warmup-request-count", "2", "--tokenizer", str(tok),
            "--extra-inputs", "ignore_eos:true", "--ui-type", "none", "--export-level", "records",
            "--output-artifact-dir", str(out), *extra]


class TreeCpu:
    """CPU seconds so far of a process and its live descendants (/proc; what exited is counted in its parent's
    cutime once reaped). Each look reads only the tree's processes and the ones new since the last look."""

    def __init__(self, root: int):
        self.root = root
        self.seen: set[int] = set()
        self.tree: set[int] = {root}

    def __call__(self) -> float:
        ticks = 0
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            pid = int(d)
            if pid in self.seen and pid not in self.tree:
                continue
            try:
                f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if pid not in self.seen:
                self.seen.add(pid)
                if int(f[1]) in self.tree:  # a child of the tree (parents are seen before their children, mostly)
                    self.tree.add(pid)
            if pid in self.tree:
                ticks += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])  # utime stime cutime cstime
        return ticks / os.sysconf("SC_CLK_TCK")


class Sched:
    """The run-queue statistics of a set of process trees (the deployment): CPU seconds its threads ran and
    seconds they waited for a CPU while runnable (/proc/PID/task/TID/schedstat), over the threads alive now."""

    def __init__(self, roots: list[int]):
        self.trees = [TreeCpu(r) for r in roots]

    def __call__(self) -> tuple[float, float]:
        run = wait = 0
        for t in self.trees:
            t()  # (finds the tree's new processes)
            for pid in t.tree:
                try:
                    tasks = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tasks:
                    try:
                        r, w, _ = open(f"/proc/{pid}/task/{tid}/schedstat").read().split()
                    except (OSError, ValueError):
                        continue
                    run, wait = run + int(r), wait + int(w)
        return run / 1e9, wait / 1e9


def cpu_busy() -> list[float]:
    """Busy seconds so far of each CPU (/proc/stat: all but idle and iowait)."""
    out = []
    for line in open("/proc/stat"):
        if line.startswith("cpu") and line[3].isdigit():
            f = [int(x) for x in line.split()[1:]]
            out.append((sum(f[:8]) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK"))
    return out


def timed(cmd: list[str], pin: bool, work: Path, server: Sched) -> tuple[subprocess.CompletedProcess, float, float,
                                                                         list]:
    """Run a tool; (result, wall s, CPU s of the tool and of every child it waited for: this process's
    RUSAGE_CHILDREN grows by exactly that when the tool is reaped, samples every 0.2 s: time.time, the tool's
    process tree's CPU s so far, the deployment's run and run-queue wait s, each CPU's busy s)."""
    if pin:
        cmd = ["taskset", "-c", CLIENT_CPU, *cmd]
    cpu0, t0 = children_cpu(), time.time()
    with open(work / "out", "w+") as out, open(work / "err", "w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        samples, look = [], TreeCpu(p.pid)
        while p.poll() is None:
            samples.append((time.time(), look(), *server(), *cpu_busy()))
            time.sleep(0.2)
        wall = time.time() - t0
        cpu = children_cpu() - cpu0
        samples.append((time.time(), cpu, *server(), *cpu_busy()))  # at its end: all its CPU, reaped
        out.seek(0)
        err.seek(0)
        res = subprocess.CompletedProcess(cmd, p.returncode, out.read(), err.read())
    return res, wall, cpu, samples


def between(samples: list, t0: float, t1: float) -> dict | None:
    """What the samples nearest before t0 and after t1 say of that span: the tool's CPU, the deployment's
    CPU and its wait for a CPU, each CPU's busy seconds (all in seconds)."""
    before = [s for s in samples if s[0] <= t0]
    after = [s for s in samples if s[0] >= t1]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    d = [round(y - x, 2) for x, y in zip(a[1:], b[1:])]
    return {"seconds": round(b[0] - a[0], 2), "tool_cpu": d[0], "server_cpu": d[1], "server_runqueue_wait": d[2],
            "cpu_busy": d[3:]}


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def aiperf_numbers(out: Path) -> tuple[dict, list[dict]]:
    path = next(out.rglob("profile_export_aiperf.json"))
    d = json.loads(path.read_text())
    m = {k: v for k, v in d.items() if isinstance(v, dict)}
    if "records" in d and isinstance(d["records"], dict):
        m.update(d["records"])
    summary = {"output_throughput": m["output_token_throughput"]["avg"],
               "median_ttft_ms": m["time_to_first_token"]["p50"],
               "median_tpot_ms": m["inter_token_latency"]["p50"],
               "requests": m.get("request_count", {}).get("avg"),
               "duration_s": (m.get("benchmark_duration") or {}).get("avg")}
    recs = []
    for p in out.rglob("profile_export.jsonl"):
        for line in p.read_text().splitlines():
            r = json.loads(line)
            meta, met = r.get("metadata", {}), r.get("metrics", {})
            if meta.get("benchmark_phase", "profiling") != "profiling":
                continue  # the warm-up's records are in the same file

            def val(k: str, met: dict = met) -> float | None:
                v = met.get(k)
                return v.get("value") if isinstance(v, dict) else v

            recs.append({"request_id": meta.get("x_request_id") or meta.get("request_id"),
                         "start_ns": meta.get("request_start_ns"), "ttft_ms": val("time_to_first_token"),
                         "e2e_ms": val("request_latency"), "output_tokens": val("output_sequence_length"),
                         "raw": {k: v for k, v in meta.items() if "ns" in k or "id" in k}})
    return summary, recs


def atomdeck_numbers(stdout: str) -> tuple[dict, list[dict]]:
    doc = json.loads(stdout)
    r = doc["results"][0]
    summary = {k: r[k] for k in ("output_throughput", "median_ttft_ms", "median_tpot_ms", "duration")} \
        | {"requests": r["completed"], "failed": r["failed"]}
    req = Path(doc["saved"]).with_suffix(".requests.jsonl")
    recs = [json.loads(x) for x in req.read_text().splitlines()]
    return summary, [{"index": x["index"], "ttft_ms": x["ttft"] * 1e3, "e2e_ms": x["e2el"] * 1e3,
                      "output_tokens": x["output_tokens"], "chunks": x["chunks"]} for x in recs]


def wire_of(path: Path, t0: float, t1: float) -> list[dict]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            w = json.loads(line)
        except ValueError:
            continue
        if t0 <= w["t_post"] <= t1 and w.get("t_first") is not None:
            out.append(w)
    return out


def med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


def compare(tool: str, recs: list[dict], wire: list[dict], prompt_index: dict[str, int], conc: int) -> dict:
    """Each of the tool's requests against the wire's record of the same request."""
    pairs = []
    if tool == "aiperf":
        by_id = {w["request_id"]: w for w in wire if w.get("request_id")}
        pairs = [(r, by_id[r["request_id"]]) for r in recs if r.get("request_id") in by_id]
    else:  # one dataset line per request of the step; the warm-up's are earlier: the last wire request of a prompt
        by_prompt = {}
        for w in sorted(wire, key=lambda w: w["t_post"]):
            i = prompt_index.get(w.get("prompt") or "")
            if i is not None:
                by_prompt[i] = w
        pairs = [(r, by_prompt[r["index"]]) for r in recs if r["index"] in by_prompt]
    ws = [w for _, w in pairs]
    if not ws:
        return {"matched": 0}
    span = max(w["t_done"] or w["t_last"] for w in ws) - min(w["t_post"] for w in ws)
    events = sum(w["events"] for w in ws)
    wire_ttft = [(w["t_first"] - w["t_post"]) * 1e3 for w in ws]
    wire_e2e = [((w["t_done"] or w["t_last"]) - w["t_post"]) * 1e3 for w in ws]
    d_ttft = [r["ttft_ms"] - (w["t_first"] - w["t_post"]) * 1e3 for r, w in pairs if r["ttft_ms"] is not None]
    d_e2e = [r["e2e_ms"] - ((w["t_done"] or w["t_last"]) - w["t_post"]) * 1e3 for r, w in pairs
             if r["e2e_ms"] is not None]
    tpot = [((w["t_last"] - w["t_first"]) * 1e3) / (w["events"] - 1) for w in ws if w["events"] > 1]
    ends = sorted((w["t_end"] or w["t_done"] or w["t_last"]) for w in ws)
    posts = sorted(w["t_post"] for w in ws)
    # the closed loop's refill: with `conc` in flight, request conc+i can be sent only once i responses ended
    refill = [(posts[conc + i] - ends[i]) * 1e3 for i in range(len(posts) - conc)]
    boot = random.Random(1)  # the median TTFT of this run's requests resampled: how much one run's median can say
    meds = sorted(statistics.median(boot.choices(wire_ttft, k=len(wire_ttft))) for _ in range(1000))
    return {"matched": len(pairs), "wire_requests": len(wire),
            "wire_mean_in_flight": round(sum(e2 / 1e3 for e2 in wire_e2e) / span, 2) if span > 0 else None,
            "wire_refill_ms": {"median": med(refill), "p90": round(sorted(refill)[int(0.9 * (len(refill) - 1))], 2)}
            if refill else None,
            "wire_ttft_ms": {"p10": round(sorted(wire_ttft)[int(0.1 * (len(ws) - 1))], 1),
                             "p90": round(sorted(wire_ttft)[int(0.9 * (len(ws) - 1))], 1),
                             "median_95ci": [round(meds[25], 1), round(meds[974], 1)]},
            "window": (min(w["t_post"] for w in ws), max(w["t_done"] or w["t_last"] for w in ws)),
            "wire_output_throughput": round(events / span, 1) if span > 0 else None,
            "wire_span_s": round(span, 3), "wire_median_ttft_ms": med(wire_ttft), "wire_median_e2e_ms": med(wire_e2e),
            "wire_median_tpot_ms": med(tpot),
            "tool_minus_wire_ttft_ms": {"median": med(d_ttft), "min": round(min(d_ttft), 2) if d_ttft else None,
                                        "max": round(max(d_ttft), 2) if d_ttft else None},
            "tool_minus_wire_e2e_ms": {"median": med(d_e2e)},
            "tokens": {"tool": sum(r["output_tokens"] or 0 for r, _ in pairs), "wire_events": events,
                       "wire_usage": sum(w["usage"] or 0 for w in ws),
                       "requests_tool_ne_wire": sum((r["output_tokens"] or 0) != w["events"] for r, w in pairs)}}


async def main(args: argparse.Namespace) -> dict:
    from atomdeck.core.design.workspace import load_workspace
    from atomdeck.core.run.run import Run

    venv, conc, n = Path(args.venv), args.concurrency, args.requests
    os.environ.pop("ATOMDECK_SIM_SPEED", None)  # the demo pace
    if args.pin:  # the deployment inherits this process's CPU: launch it from CPU 1
        os.sched_setaffinity(0, {int(SERVER_CPU)})
    work = Path(tempfile.mkdtemp(prefix="atomdeck-crosscheck-"))
    tok = work / "tokenizer"
    build_tokenizer(venv, tok)
    data = work / "prompts.jsonl"
    prompts = random_prompts(n, ISL, 1.0, random.Random(0))
    write_dataset(data, prompts, osl=OSL)
    prompt_index = {json.loads(line)["text"][:80]: i for i, line in enumerate(data.read_text().splitlines())}
    ws = load_workspace("demo-1p1d", "local")
    ws.inventory = ws.cluster.static_inventory()
    run = await Run.launch(ws, ws.assess())
    runs: dict[str, list[dict]] = {"atomdeck": [], "aiperf": []}
    commands: dict[str, str] = {}
    wire_path = work / "wire.jsonl"
    wire = None
    try:
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=120)
        assert state.status == "serving", state.diagnosis
        await run.close()
        url, model = run.plan.router.url, run.recipe.model.client_name
        pinned = {name: open(f"/proc/{h.pid}/status").read().split("Cpus_allowed_list:")[1].split()[0]
                  for name, h in run.handles.items() if h.pid and os.path.exists(f"/proc/{h.pid}/status")}
        server = Sched([h.pid for h in run.handles.values() if h.pid])
        if args.pin:  # this process samples the clients' CPU from here on: on their core, not the server's
            os.sched_setaffinity(0, {int(CLIENT_CPU)})
        if not args.no_wire:
            port = int(url.rsplit(":", 1)[1])
            wire = subprocess.Popen([*(["taskset", "-c", SERVER_CPU] if args.pin else []), sys.executable,
                                     str(BENCH / "wire.py"), str(port), str(wire_path)],
                                    stdout=subprocess.PIPE, text=True)
            assert wire.stdout is not None and wire.stdout.readline().strip() == "ready"
        for rep in range(args.reps):  # alternate the tools (and which goes first), so load drift hits both
            order = ("atomdeck", "aiperf") if rep % 2 == 0 else ("aiperf", "atomdeck")
            for tool in order:
                if tool == "atomdeck":
                    cmd = atomdeck_cmd(run.id, data, conc, n)
                    commands["atomdeck"] = shlex.join(["atomdeck", *cmd[3:]])
                else:
                    out = work / f"aiperf-{rep}"
                    cmd = aiperf_cmd(venv, url, model, data, tok, out, conc, n, shlex.split(args.aiperf_args))
                    commands["aiperf"] = shlex.join(["aiperf", *cmd[1:]])
                t0 = time.time()
                res, wall, cpu, samples = timed(cmd, args.pin, work, server)
                t1 = time.time()
                if res.returncode != 0:
                    raise SystemExit(f"{tool} failed ({res.returncode}): {res.stderr[-2000:]}")
                summary, recs = atomdeck_numbers(res.stdout) if tool == "atomdeck" else aiperf_numbers(out)
                await asyncio.sleep(0.3)  # the capture's last lines
                entry = summary | {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "rep": rep}
                if wire is not None:
                    entry["wire"] = compare(tool, recs, wire_of(wire_path, t0, t1), prompt_index, conc)
                    w = entry["wire"]
                    if w.get("matched"):  # the CPU while its measured requests were at the server
                        entry["measured_span"] = between(samples, w["window"][0], w["window"][1])
                    del w["window"]
                runs[tool].append(entry)
                print(rep, tool, json.dumps(entry), file=sys.stderr)
    finally:
        if wire is not None:
            wire.terminate()
            tail = wire.communicate(timeout=10)[0]
            print("wire:", tail.strip(), file=sys.stderr)
        await run.teardown(grace=2)
    keys = ("output_throughput", "median_ttft_ms", "median_tpot_ms")
    mean = {tool: {k: sum(x[k] for x in xs) / len(xs) for k in keys} for tool, xs in runs.items()}
    diff = {k: round(100 * (mean["atomdeck"][k] - mean["aiperf"][k]) / mean["aiperf"][k], 1) for k in keys}
    res = {"workload": {"isl": ISL, "osl": OSL, "concurrency": conc, "requests": n, "reps": args.reps},
           "pinned": {"server_cpu": SERVER_CPU, "client_cpu": CLIENT_CPU, "deployment": pinned} if args.pin else None,
           "runs": runs, "mean": mean, "diff_pct": diff, "within_10pct": all(abs(v) <= 10 for v in diff.values()),
           "commands": commands}
    if wire is not None:  # each tool against the wire, over its reps
        res["vs_wire_pct"] = {tool: {
            "output_throughput": round(100 * (statistics.mean(x["output_throughput"] for x in xs)
                                              / statistics.mean(x["wire"]["wire_output_throughput"] for x in xs) - 1), 1),
            "median_ttft": round(100 * (statistics.mean(x["median_ttft_ms"] for x in xs)
                                        / statistics.mean(x["wire"]["wire_median_ttft_ms"] for x in xs) - 1), 1),
            "median_tpot": round(100 * (statistics.mean(x["median_tpot_ms"] for x in xs)
                                        / statistics.mean(x["wire"]["wire_median_tpot_ms"] for x in xs) - 1), 1)}
            for tool, xs in runs.items() if xs and all(x["wire"].get("matched") for x in xs)}
    return res


if __name__ == "__main__":
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    ap = argparse.ArgumentParser()
    ap.add_argument("venv", nargs="?", default="/work/aiperf-venv")
    ap.add_argument("concurrency", nargs="?", type=int, default=8)
    ap.add_argument("requests", nargs="?", type=int, default=64)
    ap.add_argument("--pin", action="store_true", help="deployment on CPU 1, each client on CPU 0")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-wire", action="store_true", help="no packet capture of the router's port")
    ap.add_argument("--aiperf-args", default="", help="more aiperf options, e.g. '--workers-max 1'")
    ap.add_argument("--name", default="", help="results section (default crosscheck_cN[_pinned])")
    a = ap.parse_args()
    if not a.no_wire and os.geteuid() != 0:
        raise SystemExit("the capture of the router's port (bench/wire.py) needs root; run as root or with --no-wire")
    result = asyncio.run(main(a))
    print(json.dumps(result, indent=2))
    save(a.name or f"crosscheck_c{a.concurrency}" + ("_pinned" if a.pin else ""), result)
