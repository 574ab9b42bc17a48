"""`atomdeck sweep` (issue 40.4) on the local demo through the real CLI: three layouts brought up in turn on the
same nodes, benched, torn down; interrupted (SIGINT) during the second, nothing of it is left running, and the same
command again resumes, skipping the layout done; the JSON has the Pareto rows and the recommendation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from atomdeck.core.measure.errors import MeasureInputError
from atomdeck.core.measure.layouts import parse_layouts, searches_dir
from atomdeck.core.run.run import Run

from tests.leftovers import alive

from .test_bench_local import _sim_speed  # noqa: F401  (fixture)

ARGS = ["sweep", "demo-1p1d", "--nodes", "demo-n01,demo-n02,demo-n03", "--layouts", "1p1d,1p2d,2p1d",
        "--concurrency", "4", "--isl", "64", "--osl", "16", "--num-prompts", "8", "--warmup", "0"]


def cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "atomdeck.core.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=os.environ.copy())


def state(marker: str) -> dict:
    found = [p for p in searches_dir().glob("demo-1p1d-*/search.json") if marker in p.read_text()]
    return json.loads(max(found, key=lambda p: p.stat().st_mtime).read_text()) if found else {}


@pytest.mark.slow
def test_a_search_interrupted_mid_layout_resumes_skipping_what_it_did():
    args = [*ARGS, "--slo", "ttft_ms:60000,tpot_ms:1000"]
    p = cli(*args, "--fresh", "--json")
    deadline = time.monotonic() + 120
    doc: dict = {}
    while time.monotonic() < deadline:  # the first layout done, the second on its way up
        time.sleep(0.2)
        doc = state('"layout": "1p2d"')
        entries = {e["layout"]: e for e in doc.get("entries", [])}
        if entries.get("1p1d", {}).get("status") == "done" and entries.get("1p2d", {}).get("run"):
            break
    else:
        p.kill()
        pytest.fail(f"the first layout never finished: {doc}")
    second = entries["1p2d"]["run"]
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted; run the same command again to go on" in err
    assert not alive(Run.open(second)), "the interrupted layout's run was left running"
    doc = state('"layout": "1p2d"')
    first = {e["layout"]: e for e in doc["entries"]}["1p1d"]
    assert first["status"] == "done" and first["results"]

    again = cli(*args, "--json")
    out, err = again.communicate(timeout=240)
    assert again.returncode == 0, err
    assert "resuming, done: 1p1d" in err
    res = json.loads(out)
    assert [e["layout"] for e in res["entries"]] == ["1p1d", "1p2d", "2p1d"]
    assert all(e["status"] == "done" and not e["reason"] for e in res["entries"]), res["entries"]
    assert res["entries"][0]["run"] == first["run"]  # not measured again
    assert res["entries"][1]["run"] != second
    assert res["recommendation"]["layout"] in ("1p1d", "1p2d", "2p1d") and res["recommendation"]["per_gpu"] > 0
    assert "output tok/s per GPU (all GPUs)" in res["recommendation"]["words"]
    assert "[##############################] 3/3 steps" in err  # the progress bar over the whole search
    for e in res["entries"]:
        assert not alive(Run.open(e["run"]))


@pytest.mark.parametrize("text, words", [("1p1d,3x", "'3x' is not a layout"), ("0p1d", "'0p1d' is not a layout"),
                                         ("1p1d,1P1D", "1p1d given twice")])
def test_bad_layouts_are_named(text, words):
    with pytest.raises(MeasureInputError, match=words):
        parse_layouts(text)


def test_layouts_with_tp_and_dp_attention_set_both_roles():
    (lay,) = parse_layouts("2p1d-tp4-dpa")
    assert lay.name == "2p1d-tp4-dpa"
    assert lay.edits() == {"prefill.workers": 2, "decode.workers": 1, "prefill.tp": 4, "prefill.dp_attention": True,
                           "decode.tp": 4, "decode.dp_attention": True}
