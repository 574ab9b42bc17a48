"""The `amd-smi` and `rocm-smi` stand-ins (sim/smi.py, sim/gpus.py): the real tools' JSON shape (checked against
fixtures written from their sources, tests/data/smi), and numbers that follow the simulated processes: a TP rank
holds VRAM on its GPU while it lives, an orphan keeps it, and nodes see only their own GPUs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from .simhelpers import SHIM, wait_http
from .test_sim_proctree import children, tree, wait_tree

DATA = Path(__file__).resolve().parent.parent / "data" / "smi"
TOTAL_MB = 294912
IDLE_MB = 282


def shape(x):
    """The keys, nesting and value types of a JSON document (list items: the first one's shape)."""
    if isinstance(x, dict):
        return {k: shape(v) for k, v in x.items()}
    if isinstance(x, list):
        return [shape(x[0])] if x else []
    return type(x).__name__


def smi(tool: str, *args: str, gpu_dir: Path, ip: str = "127.0.39.1", **env: str) -> str:
    e = {k: v for k, v in os.environ.items() if not k.startswith("ATOMSIM_")}
    e.update(ATOMSIM_GPU_DIR=str(gpu_dir), ATOMSIM_NODE_IP=ip, **env)
    out = subprocess.run([str(SHIM / "bin" / tool), *args], env=e, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_amd_smi_metric_static_and_process_have_the_documented_shape(tmp_path):
    metric = json.loads(smi("amd-smi", "metric", "--usage", "--power", "--temperature", "--mem-usage", "--json",
                            gpu_dir=tmp_path))
    assert len(metric) == 8 and [m["gpu"] for m in metric] == list(range(8))
    assert shape(metric[0]) == shape(json.loads((DATA / "amd-smi-24.7-metric.json").read_text())[0])
    assert list(metric[0]) == ["gpu", "usage", "power", "temperature", "mem_usage"]  # metric_gpu's order
    assert metric[0]["mem_usage"]["used_vram"] == {"value": IDLE_MB, "unit": "MB"}
    static = json.loads(smi("amd-smi", "static", "--asic", "--bus", "--vram", "--json", gpu_dir=tmp_path))
    assert shape(static[0]) == shape(json.loads((DATA / "amd-smi-24.7-static.json").read_text())[0])
    process = json.loads(smi("amd-smi", "process", "--json", gpu_dir=tmp_path))
    assert process[0] == {"gpu": 0, "process_list": [{"process_info": "No running processes detected"}]}
    only = json.loads(smi("amd-smi", "metric", "-m", "--json", gpu_dir=tmp_path))
    assert list(only[0]) == ["gpu", "mem_usage"]  # a section flag prints that section only
    wrapped = json.loads(smi("amd-smi", "metric", "-m", "--json", gpu_dir=tmp_path, ATOMSIM_AMDSMI_WRAP="1"))
    assert wrapped == {"gpu_data": only}  # ROCm 7's combine_arrays_to_json


def test_rocm_smi_json_has_the_documented_shape(tmp_path):
    text = smi("rocm-smi", "--showmeminfo", "vram", "--showuse", "--showpower", "--showtemp", "--json",
               gpu_dir=tmp_path)
    assert "\n" not in text.strip()  # json.dumps(JSON_DATA): one line
    data = json.loads(text)
    fixture = json.loads((DATA / "rocm-smi-6.2.2.json").read_text())
    assert list(data) == [f"card{i}" for i in range(8)]
    assert list(data["card0"]) == list(fixture["card0"])  # keys and their order
    assert all(isinstance(v, str) for v in data["card0"].values())


def test_a_tp8_worker_holds_its_gpus_and_gives_them_back_when_it_ends(spawn, tmp_path):
    ip = "127.0.39.2"
    w = spawn.worker("tp8", ip, 8010, "kv_producer", "--gpu-memory-utilization", "0.85",
                     ATOMSIM_GPU_DIR=str(tmp_path))
    wait_http(f"http://{ip}:8010/health", proc=w)
    t = wait_tree(w.pid, 10)
    (core,) = children(t, w.pid)
    ranks = {t[p]["comm"]: p for p in children(t, core)}
    metric = json.loads(smi("amd-smi", "metric", "-m", "--json", gpu_dir=tmp_path, ip=ip))
    held = int(TOTAL_MB * 0.85)
    assert [m["mem_usage"]["used_vram"]["value"] for m in metric] == [IDLE_MB + held] * 8
    procs = json.loads(smi("amd-smi", "process", "--json", gpu_dir=tmp_path, ip=ip))
    for gpu in procs:
        (info,) = [p["process_info"] for p in gpu["process_list"]]
        assert info["name"] == f"ATOM::TP{gpu['gpu']}" and info["pid"] == ranks[info["name"]]
        assert info["memory_usage"]["vram_mem"]["unit"] == "B"
        assert info["memory_usage"]["vram_mem"]["value"] // (1024 * 1024) == held
    other = json.loads(smi("amd-smi", "metric", "-m", "--json", gpu_dir=tmp_path, ip="127.0.39.3"))
    assert {m["mem_usage"]["used_vram"]["value"] for m in other} == {IDLE_MB}  # another node: idle
    rocm = json.loads(smi("rocm-smi", "--showmeminfo", "vram", "--json", gpu_dir=tmp_path, ip=ip))
    assert int(rocm["card3"]["VRAM Total Used Memory (B)"]) // (1024 * 1024) == IDLE_MB + held

    w.signal(signal.SIGTERM)
    w.wait_exit()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        metric = json.loads(smi("amd-smi", "metric", "-m", "--json", gpu_dir=tmp_path, ip=ip))
        if {m["mem_usage"]["used_vram"]["value"] for m in metric} == {IDLE_MB}:
            break
        time.sleep(0.1)
    assert {m["mem_usage"]["used_vram"]["value"] for m in metric} == {IDLE_MB}, metric


def test_the_pins_orphans_keep_their_vram_after_the_server_is_killed(spawn, tmp_path):
    ip = "127.0.39.4"
    w = spawn.worker("pin", ip, 8010, "kv_consumer", ATOMSIM_GPU_DIR=str(tmp_path), ATOMSIM_ATOM_REV="pin")
    wait_http(f"http://{ip}:8010/health", proc=w)
    t = wait_tree(w.pid, 10)
    (core,) = children(t, w.pid)
    ranks = sorted(children(t, core))
    os.kill(w.pid, signal.SIGKILL)
    w.wait_exit()
    time.sleep(0.3)
    assert all(p in tree(p) for p in ranks), "the pin's ranks outlive their server"
    procs = json.loads(smi("amd-smi", "process", "--json", gpu_dir=tmp_path, ip=ip))
    pids = sorted(p["process_info"]["pid"] for gpu in procs for p in gpu["process_list"])
    assert pids == ranks  # every orphan still holds its GPU, named by its PID
    for p in [core, *ranks]:
        os.kill(p, signal.SIGKILL)


def test_visible_devices_put_a_tp4_worker_on_the_gpus_it_was_given(spawn, tmp_path):
    ip = "127.0.39.5"
    w = spawn.worker("tp4", ip, 8010, "kv_producer", tp=4, ATOMSIM_GPU_DIR=str(tmp_path),
                     HIP_VISIBLE_DEVICES="4,5,6,7")
    wait_http(f"http://{ip}:8010/health", proc=w)
    wait_tree(w.pid, 6)
    metric = json.loads(smi("amd-smi", "metric", "-m", "--json", gpu_dir=tmp_path, ip=ip))
    busy = [m["gpu"] for m in metric if m["mem_usage"]["used_vram"]["value"] > IDLE_MB]
    assert busy == [4, 5, 6, 7]


def test_hold_stands_in_for_another_job(tmp_path):
    e = {k: v for k, v in os.environ.items() if not k.startswith("ATOMSIM_")}
    e.update(ATOMSIM_GPU_DIR=str(tmp_path), ATOMSIM_NODE_IP="127.0.39.6", PYTHONPATH=str(SHIM))
    p = subprocess.Popen(["python3", "-c", "import atomsim_boot; atomsim_boot.ensure(); import sys; "
                          "from atomdeck.sim.gpus import hold_main; sys.exit(hold_main(sys.argv[1:]))",
                          "--gpus", "0-1", "--gb", "100"], env=e, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "holding"
        metric = json.loads(smi("amd-smi", "metric", "-m", "--json", gpu_dir=tmp_path, ip="127.0.39.6"))
        used = [m["mem_usage"]["used_vram"]["value"] for m in metric]
        assert used == [IDLE_MB + 102400] * 2 + [IDLE_MB] * 6
    finally:
        p.kill()
        p.wait()
