"""Accuracy cross-check: `atomdeck bench` and NVIDIA's aiperf side by side on the same deployment (the demo
1P1D through its router, simulator at the demo pace), the same prompts (one dataset file) and the same
concurrency. Goal: output throughput, median TTFT and median TPOT within 10 %.

aiperf lives only in a bench venv, never in atomdeck's dependencies:
    python3 -m venv /work/aiperf-venv && /work/aiperf-venv/bin/pip install aiperf tokenizers
It runs offline with a local tokenizer: a WordLevel tokenizer over the simulator's vocabulary (built
here with `tokenizers`, saved with a tokenizer_config.json), so aiperf counts tokens as the simulator does.

    .venv/bin/python bench/crosscheck.py [AIPERF_VENV] [CONCURRENCY REQUESTS]
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from atomdeck.core.measure.workload import random_prompts, write_dataset
from atomdeck.sim.engine import VOCAB
from common import save

ISL, OSL, CONC, N, REPS = 256, 64, 8, 64, 3

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


def atomdeck_cmd(run_id: str, data: Path) -> list[str]:
    return [sys.executable, "-m", "atomdeck.core.cli.main", "bench", run_id, "--dataset", str(data), "--osl", str(OSL),
            "--concurrency", str(CONC), "--num-prompts", str(N), "--warmup", "2", "--json"]


def aiperf_cmd(venv: Path, url: str, model: str, data: Path, tok: Path, out: Path) -> list[str]:
    return [str(venv / "bin/aiperf"), "profile", "--model", model, "--url", url, "--endpoint-type", "completions",
            "--streaming", "--input-file", str(data), "--custom-dataset-type", "single_turn", "--concurrency",
            str(CONC), "--request-count", str(N), "--warmup-request-count", "2", "--tokenizer", str(tok),
            "--extra-inputs", "ignore_eos:true", "--ui-type", "none", "--output-artifact-dir", str(out)]


def aiperf_numbers(out: Path) -> dict:
    path = next(out.rglob("profile_export_aiperf.json"))
    d = json.loads(path.read_text())
    m = {k: v for k, v in d.items() if isinstance(v, dict)}
    if "records" in d and isinstance(d["records"], dict):
        m.update(d["records"])
    return {"output_throughput": m["output_token_throughput"]["avg"],
            "median_ttft_ms": m["time_to_first_token"]["p50"],
            "median_tpot_ms": m["inter_token_latency"]["p50"],
            "requests": m.get("request_count", {}).get("avg")}


async def main(venv: Path) -> dict:
    from atomdeck.core.design.workspace import load_workspace
    from atomdeck.core.run.run import Run

    os.environ.pop("ATOMDECK_SIM_SPEED", None)  # the demo pace
    work = Path(tempfile.mkdtemp(prefix="atomdeck-crosscheck-"))
    tok = work / "tokenizer"
    build_tokenizer(venv, tok)
    data = work / "prompts.jsonl"
    write_dataset(data, random_prompts(N, ISL, 1.0, random.Random(0)), osl=OSL)
    ws = load_workspace("demo-1p1d", "local")
    ws.inventory = ws.cluster.static_inventory()
    run = await Run.launch(ws, ws.assess())
    runs: dict[str, list[dict]] = {"atomdeck": [], "aiperf": []}
    commands = {}
    try:
        state = await run.watch(until=lambda s: s.status in ("serving", "failed"), timeout=120)
        assert state.status == "serving", state.diagnosis
        await run.close()
        url, model = run.plan.router.url, run.recipe.model.client_name
        for rep in range(REPS):  # alternate the tools, so load drift on this shared machine hits both
            cmd = atomdeck_cmd(run.id, data)
            commands["atomdeck"] = shlex.join(["atomdeck", *cmd[3:]])
            res = subprocess.run(cmd, capture_output=True, text=True, check=True)
            r = json.loads(res.stdout)["results"][0]
            runs["atomdeck"].append({k: r[k] for k in ("output_throughput", "median_ttft_ms", "median_tpot_ms")}
                                    | {"requests": r["completed"], "failed": r["failed"]})
            out = work / f"aiperf-{rep}"
            cmd = aiperf_cmd(venv, url, model, data, tok, out)
            commands["aiperf"] = shlex.join(["aiperf", *cmd[1:]])
            t0 = time.time()
            subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs["aiperf"].append(aiperf_numbers(out) | {"wall_s": round(time.time() - t0, 1)})
            print(rep, runs["atomdeck"][-1], runs["aiperf"][-1], file=sys.stderr)
    finally:
        await run.teardown(grace=2)
    mean = {tool: {k: sum(x[k] for x in xs) / len(xs) for k in ("output_throughput", "median_ttft_ms",
                                                              "median_tpot_ms")} for tool, xs in runs.items()}
    diff = {k: round(100 * (mean["atomdeck"][k] - mean["aiperf"][k]) / mean["aiperf"][k], 1) for k in mean["aiperf"]}
    return {"workload": {"isl": ISL, "osl": OSL, "concurrency": CONC, "requests": N, "reps": REPS},
            "runs": runs, "mean": mean, "diff_pct": diff, "within_10pct": all(abs(v) <= 10 for v in diff.values()),
            "commands": commands}


if __name__ == "__main__":
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    venv = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/aiperf-venv")
    if len(sys.argv) > 3:
        CONC, N = int(sys.argv[2]), int(sys.argv[3])
    result = asyncio.run(main(venv))
    print(json.dumps(result, indent=2))
    save(f"crosscheck_c{CONC}", result)
