"""Reading a node's GPUs (core/remote/gpus.py): amd-smi's JSON (24.x list, ROCm 7's {"gpu_data": ...}), rocm-smi's as
the fallback, a node with neither; the run's view of it (core/run/gpustate.py). Fixtures: tests/data/smi, written from
the tools' sources."""

from __future__ import annotations

import json
from pathlib import Path

from atomdeck.core.remote.gpus import NO_TOOL, parse, parse_amdsmi_metric, parse_amdsmi_process, parse_rocmsmi
from atomdeck.core.remote.shell import Result
from atomdeck.core.run.gpustate import GpuView, NodeGpuState, free_words, gpus_words

DATA = Path(__file__).resolve().parent.parent / "data" / "smi"


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_amd_smi_metric_gives_vram_activity_power_and_temperature():
    (g,) = parse_amdsmi_metric(text("amd-smi-24.7-metric.json"))
    assert (g.index, g.used_mb, g.total_mb, g.util_pct, g.power_w, g.temp_c) == (0, 265702, 294912, 12, 745, 61)
    assert g.busy  # 90 % > InferenceX's 10 %


def test_rocm_7_wraps_the_same_objects_in_gpu_data():
    wrapped = json.dumps({"gpu_data": json.loads(text("amd-smi-24.7-metric.json"))})
    assert parse_amdsmi_metric(wrapped) == parse_amdsmi_metric(text("amd-smi-24.7-metric.json"))


def test_na_values_and_a_warning_line_before_the_json():
    doc = '[{"gpu": 3, "usage": "N/A", "power": {"socket_power": "N/A"}, "temperature": {"edge": "N/A", ' \
          '"hotspot": "N/A", "mem": {"value": 40, "unit": "C"}}, "mem_usage": {"total_vram": "N/A", ' \
          '"used_vram": {"value": 2, "unit": "GB"}}}]'
    (g,) = parse_amdsmi_metric("WARNING: User is missing the following required groups: render, video\n" + doc)
    assert (g.index, g.used_mb, g.total_mb, g.util_pct, g.power_w, g.temp_c) == (3, 2048, None, None, None, 40)
    assert not g.busy  # no total: unknown, never flagged


def test_amd_smi_process_names_each_holder_with_its_pid():
    (p,) = parse_amdsmi_process(text("amd-smi-24.7-process.json"))
    assert (p.gpu, p.pid, p.name, p.vram_mb) == (0, 4242, "ATOM::TP0", 278301491200 // 2**20)


def test_rocm_smi_is_the_fallback():
    gpus = parse_rocmsmi(text("rocm-smi-6.2.2.json"))
    assert [(g.index, g.used_mb, g.total_mb, g.util_pct, g.power_w, g.temp_c) for g in gpus] == [
        (0, 278606331904 // 2**20, 294912, 12, 745, 61), (1, 282, 294912, 0, 180, 38)]
    res = Result([], 0, "@@tool rocm-smi\n" + text("rocm-smi-6.2.2.json"), "")
    ng = parse("n1", res)
    assert ng.tool == "rocm-smi" and len(ng.gpus) == 2 and ng.procs is None and not ng.error


def test_the_script_output_with_processes_and_without_any_tool():
    out = "@@tool amd-smi\n" + text("amd-smi-24.7-metric.json") + "@@process\n" + text("amd-smi-24.7-process.json")
    ng = parse("n1", Result([], 0, out, ""))
    assert ng.tool == "amd-smi" and [g.index for g in ng.gpus] == [0] and [p.pid for p in ng.procs or []] == [4242]
    none = parse("n2", Result([], 0, "@@tool none\n", ""))
    assert none.error == NO_TOOL and none.gpus == []
    broken = parse("n3", Result([], 0, "@@tool amd-smi\n@@failed metric 1\n", "amdsmi_init failed: AMDSMI_STATUS_INIT_ERROR"))
    assert "amd-smi printed no GPU data" in broken.error and "AMDSMI_STATUS_INIT_ERROR" in broken.error


def test_the_run_view_flags_memory_held_by_no_process_of_the_run_and_names_holders():
    ns = NodeGpuState("n1", "amd-smi", "", [GpuView(i, 281600, 294912, 0, 180, 38) for i in range(8)],
                      foreign=list(range(8)), holders=[(3, 4242, "ATOM::TP3", 281318)])
    assert ns.flag() == "8/8 GPUs hold 275 GB: another job, or an orphan (pid 4242 ATOM::TP3)"
    idle = NodeGpuState("n2", "amd-smi", "", [GpuView(i, 282, 294912) for i in range(8)])
    assert idle.flag() == "" and free_words(idle) == "2.2 TB free of 2.2 TB"
    assert gpus_words([GpuView(i, 250675, 294912, 12.0) for i in range(8)]) == "8 GPUs 245 GB each, 12 %"
    assert free_words(NodeGpuState("n3", "", NO_TOOL)) == NO_TOOL


def test_the_run_view_and_the_reader_share_the_idle_threshold():
    from atomdeck.core.remote import gpus
    from atomdeck.core.run import gpustate

    assert gpustate.VRAM_IDLE_PCT == gpus.VRAM_IDLE_PCT == 10  # InferenceX: VRAM <= 10 %
