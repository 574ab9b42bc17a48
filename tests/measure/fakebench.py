"""Made-up bench reports for looks (snapshot, screenshots): three layouts of the demo model on one
workload, with every key a real report has. Numbers are plausible shapes, not measurements."""

from __future__ import annotations

from atomdeck.core.config.paths import runs_dir
from atomdeck.core.measure.results import BENCH_DIR
from atomdeck.core.measure.workload import Workload
from atomdeck.core.run.rundir import RunDir

MODEL = "atomdeck/demo-tiny-8b"
WORKLOAD = Workload(isl=1024, osl=128, concurrencies=[1, 4, 16, 64], num_prompts=64)
# layout -> (total, prefill, decode GPUs), median TPOT ms and TTFT ms per concurrency
LAYOUTS = {
    "1P1D TP8": ((16, 8, 8), {1: (10.5, 260), 4: (11.8, 300), 16: (15.9, 420), 64: (31.0, 1900)}),
    "2P1D DPA TP8": ((24, 16, 8), {1: (10.2, 240), 4: (10.9, 250), 16: (12.4, 280), 64: (18.5, 610)}),
    "2P2D TP8": ((32, 16, 16), {1: (10.1, 240), 4: (10.6, 250), 16: (11.5, 270), 64: (14.0, 520)}),
}


def step(conc: int, gpus: tuple[int, int, int], tpot: float, ttft: float, w: Workload = WORKLOAD) -> dict:
    e2e = ttft + tpot * (w.osl - 1)
    duration = w.num_prompts / conc * e2e / 1000
    out = w.num_prompts * w.osl / duration
    total = w.num_prompts * (w.isl + w.osl) / duration
    r = {"max_concurrency": conc, "request_rate": "inf", "num_prompts": w.num_prompts, "completed": w.num_prompts,
         "failed": 0, "short": 0, "duration": duration, "total_input_tokens": w.num_prompts * w.isl,
         "total_output_tokens": w.num_prompts * w.osl, "request_throughput": w.num_prompts / duration,
         "output_throughput": out, "total_token_throughput": total}
    for name, median in (("ttft", ttft), ("tpot", tpot), ("itl", tpot), ("e2el", e2e)):
        r.update({f"mean_{name}_ms": median * 1.03, f"median_{name}_ms": median, f"std_{name}_ms": median * 0.1,
                  f"p90_{name}_ms": median * 1.2, f"p99_{name}_ms": median * 1.5})
    r["interactivity"] = 1000 / tpot
    r.update({"total_gpus": gpus[0], "prefill_gpus": gpus[1], "decode_gpus": gpus[2],
              "output_throughput_per_gpu": out / gpus[0], "total_token_throughput_per_gpu": total / gpus[0],
              "errors": {}})
    return r


def report(run_id: str, layout: str, started: float) -> dict:
    gpus, steps = LAYOUTS[layout]
    return {"run": run_id, "layout": layout, "model": MODEL, "recipe": "demo", "router": "http://127.0.0.11:30000",
            "gpus": {"total_gpus": gpus[0], "prefill_gpus": gpus[1], "decode_gpus": gpus[2]},
            "workload": WORKLOAD.to_json(), "workload_key": WORKLOAD.key, "started": started,
            "finished": started + 60, "warmup": {"requests": 2, "failed": 0},
            "results": [step(c, gpus, *steps[c]) for c in WORKLOAD.concurrencies], "requests_file": ""}


def write_report(run_dir, rep: dict, name: str = "20250101-115930") -> None:
    import json

    d = run_dir / BENCH_DIR
    d.mkdir(exist_ok=True)
    (d / f"{name}.json").write_text(json.dumps(rep, indent=2))


def earlier_run(run_id: str, layout: str, created: float) -> None:
    """A torn-down run that was benched: only its run.json and its bench report (what compare needs)."""
    rd = RunDir.create(run_id)
    meta = RunDir.initial_meta(run_id, "demo", "local", "local")
    meta.update(created=created, status="stopped", fake=True)
    rd.write_json("run.json", meta)
    write_report(runs_dir() / run_id, report(run_id, layout, created + 30), "20250101-100000")


def benched(run) -> None:
    """The attached fake run (1P1D) and two earlier layouts, all benched with the same workload."""
    earlier_run("20250101-090000-demo-2p1d-dpa-77aa", "2P1D DPA TP8", 1735722000.0)
    earlier_run("20250101-093000-demo-2p2d-88bb", "2P2D TP8", 1735723800.0)
    write_report(run.rd.path, report(run.id, "1P1D TP8", 1735729170.0))


def invalid(step_result: dict, reasons: list[str]) -> dict:
    """A step marked invalid by the gate (validity.py) with these reasons."""
    return {**step_result, "valid": False, "invalid_reasons": reasons}


def benched_with_trouble(run) -> None:
    """As `benched`, this run's last step invalid: decode-0 froze during it (the degraded fake run's story)."""
    earlier_run("20250101-090000-demo-2p1d-dpa-77aa", "2P1D DPA TP8", 1735722000.0)
    earlier_run("20250101-093000-demo-2p2d-88bb", "2P2D TP8", 1735723800.0)
    rep = report(run.id, "1P1D TP8", 1735729170.0)
    last = rep["results"][-1]
    rep["results"][-1] = invalid({**last, "completed": 23, "failed": 2, "num_prompts": 25,
                                  "halted": "stopped after 25 of 64 requests: decode-0 unresponsive"},
                                 ["health: decode-0 unresponsive at +4.1s (GET /health on demo-n02:8020: no answer "
                                  "within 0.5s; process alive, state T (stopped) (pid 4242 python3))",
                                  "failures: 2 of 25 request(s) failed (2x stopped: decode-0 unresponsive during "
                                  "the step)"])
    write_report(run.rd.path, rep)


def fake_search():
    """A finished layout search of the demo (three layouts, made-up steps as `report`'s), in the state directory."""
    from atomdeck.core.measure.layouts import Layout, Search, SearchSpec

    spec = SearchSpec("demo-1p1d", "local", ["demo-n01", "demo-n02", "demo-n03"],
                      [Layout(1, 1), Layout(1, 2), Layout(2, 1)], WORKLOAD, {"ttft": 1000.0, "tpot": 20.0})
    search = Search.open(spec, fresh=True)
    made = {"1p1d": ("1P1D TP8", (16, 8, 8)), "1p2d": ("2P2D TP8", (24, 8, 16)), "2p1d": ("2P1D DPA TP8", (24, 16, 8))}
    for i, e in enumerate(search.entries):
        layout, gpus = made[e.layout]
        rep = report(f"20250101-11{i}000-demo-1p1d-{i}a{i}b", layout, 1735729000.0 + i)
        steps = [r | {"total_gpus": gpus[0], "prefill_gpus": gpus[1], "decode_gpus": gpus[2],
                      "output_throughput_per_gpu": r["output_throughput"] / gpus[0], "good_requests": 64,
                      "valid": True, "invalid_reasons": []} for r in rep["results"]]
        if e.layout == "1p2d":
            steps[-1] = invalid(steps[-1], ["routing: the router sent no request to decode-1 (prefill-0 64, "
                                            "decode-0 64, decode-1 0)"])
        e.status, e.run, e.results = "done", rep["run"], steps
        e.gpus = {"total_gpus": gpus[0], "prefill_gpus": gpus[1], "decode_gpus": gpus[2]}
        e.reason = "; ".join(f"concurrency {r['max_concurrency']} INVALID: " + "; ".join(r["invalid_reasons"])
                             for r in steps if not r["valid"])
    search.progress.steps_done = search.progress.steps_total
    search.progress.phase, search.progress.words = "done", "search done"
    search.save()
    return search
