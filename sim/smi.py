"""The `amd-smi` and `rocm-smi` stand-ins (shim/bin/amd-smi, shim/bin/rocm-smi): their JSON, key for key, from the
simulated node's GPUs (gpus.py).

amd-smi follows ROCm/amdsmi at amd-staging 0ceca28 (package 24.7.0, October 2024): amdsmi_cli/amdsmi_commands.py
(`metric_gpu`, `static_gpu`, `process`), amdsmi_cli/amdsmi_logger.py (`_print_json_output`: a list with one
object per GPU, `json.dumps(..., indent=4)`), amdsmi_cli/amdsmi_helpers.py (`unit_format`: `{"value", "unit"}`),
py-interface/amdsmi_interface.py (`amdsmi_get_gpu_activity`, `amdsmi_get_power_info`,
`amdsmi_get_gpu_process_list`), src/amd_smi/fdinfo.cc (a process's name is /proc/PID/comm) and
amdsmi_cli/amdsmi_parser.py (the flags). Newer amd-smi (ROCm 7) wraps the same objects as ``{"gpu_data": [...]}``
(amdsmi_logger.py `combine_arrays_to_json`); ``ATOMSIM_AMDSMI_WRAP=1`` prints that shape instead.

rocm-smi follows ROCm/rocm_smi_lib at rocm-6.2.2 (a1295714): python_smi_tools/rocm_smi.py (`printLog` ->
`formatJson`: ``{"card0": {"<metric name>": "<value as text>"}}``, one line; `showCurrentTemps`, `showPower`,
`showGpuUse`, `showMemInfo`, `showMemUse`) and rsmiBindings.py (`temp_type_lst`, `rsmi_power_type_dict`).

What the stand-ins leave out (they print only what atomdeck reads): amd-smi's other metric sections (clock, pcie,
ecc, fan, ...) and static sections (vbios, driver, board, ...); `metric` or `static` without section flags prints
the sections above only. Human-readable (non-JSON) output is not simulated.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import gpus as g

NA = "N/A"


def _v(value, unit: str) -> dict:
    return {"value": value, "unit": unit}


# ---- amd-smi --------------------------------------------------------------------------------------------------

def metric_usage(gpu: g.Gpu) -> dict:
    """amdsmi_get_gpu_activity (gfx/umc/mm activity) plus the metrics table's VCN/JPEG lists; a board whose
    metrics table has no partition statistics (num_partition N/A) gives N/A for the *_busy entries."""
    return {"gfx_activity": _v(gpu.activity, "%"), "umc_activity": _v(gpu.activity // 2, "%"),
            "mm_activity": NA, "vcn_activity": [NA] * 4, "jpeg_activity": [NA] * 32,
            "gfx_busy_inst": NA, "jpeg_busy": NA, "vcn_busy": NA, "gfx_busy_acc": NA}


def metric_power(gpu: g.Gpu) -> dict:
    # voltages read 0xFFFF (N/A) on MI300-class boards
    return {"socket_power": _v(gpu.power_w, "W"), "gfx_voltage": NA, "soc_voltage": NA, "mem_voltage": NA,
            "throttle_status": "UNTHROTTLED", "power_management": "ENABLED"}


def metric_temperature(gpu: g.Gpu) -> dict:
    # edge: N/A when the edge sensor's critical limit reads 0, as on MI300-class boards
    return {"edge": NA, "hotspot": _v(gpu.hotspot_c, "C"), "mem": _v(gpu.mem_c, "C")}


def metric_mem_usage(gpu: g.Gpu) -> dict:
    used_gtt = 14
    out = {"total_vram": gpu.total_mb, "used_vram": gpu.used_mb, "free_vram": gpu.total_mb - gpu.used_mb,
           "total_visible_vram": gpu.total_mb, "used_visible_vram": gpu.used_mb,
           "free_visible_vram": gpu.total_mb - gpu.used_mb,
           "total_gtt": g.GTT_TOTAL_MB, "used_gtt": used_gtt, "free_gtt": g.GTT_TOTAL_MB - used_gtt}
    return {k: _v(v, "MB") for k, v in out.items()}


METRIC_SECTIONS = (("usage", metric_usage), ("power", metric_power), ("temperature", metric_temperature),
                   ("mem_usage", metric_mem_usage))  # metric_gpu's order


def amd_metric(gpus: list[g.Gpu], wanted: set[str]) -> list[dict]:
    out = []
    for gpu in gpus:
        item: dict = {"gpu": gpu.index}
        for name, fn in METRIC_SECTIONS:
            if not wanted or name in wanted:
                item[name] = fn(gpu)
        out.append(item)
    return out


def amd_static(gpus: list[g.Gpu], wanted: set[str]) -> list[dict]:
    out = []
    for gpu in gpus:
        item: dict = {"gpu": gpu.index}
        if not wanted or "asic" in wanted:
            item["asic"] = {"market_name": "AMD Instinct MI355X", "vendor_id": "0x1002",
                            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]", "subvendor_id": "0x1002",
                            "device_id": "0x75a3", "subsystem_id": "0x75a3", "rev_id": "0x00",
                            "asic_serial": f"0x{0x5A17 + gpu.index:016X}", "oam_id": gpu.index,
                            "num_compute_units": 256, "target_graphics_version": "gfx950"}
        if not wanted or "bus" in wanted:
            item["bus"] = {"bdf": f"0000:{0x05 + 0x10 * gpu.index:02x}:00.0", "max_pcie_width": 16,
                           "max_pcie_speed": _v(32, "GT/s"), "pcie_interface_version": "Gen 5", "slot_type": "OAM"}
        if not wanted or "vram" in wanted:
            item["vram"] = {"type": "HBM3E", "vendor": NA, "size": _v(gpu.total_mb, "MB"), "bit_width": 8192}
        out.append(item)
    return out


def amd_process(gpus: list[g.Gpu]) -> list[dict]:
    """`amd-smi process --json`: per GPU a process_list of {"process_info": {...}} (name, pid, memory_usage,
    mem_usage, usage: the order `process` leaves after popping mem and engine_usage), or the placeholder."""
    out = []
    for gpu in gpus:
        procs = []
        for h in gpu.holders:
            vram = h.vram.get(gpu.index, 0)
            procs.append({"process_info": {
                "name": h.name or NA, "pid": h.pid,
                "memory_usage": {"gtt_mem": _v(0, "B"), "cpu_mem": _v(0, "B"), "vram_mem": _v(vram, "B")},
                "mem_usage": _v(vram, "B"),
                "usage": {"gfx": _v(0, "ns"), "enc": _v(0, "ns")}}})
        out.append({"gpu": gpu.index, "process_list": procs or [{"process_info": "No running processes detected"}]})
    return out


def _gpu_choice(spec: str) -> list[int]:
    try:
        return g.parse_gpu_list(spec)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid GPU index: {spec}") from None


def amd_smi_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="amd-smi", allow_abbrev=False)
    sub = p.add_subparsers(dest="command")
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    common.add_argument("--json", action="store_true")
    common.add_argument("-g", "--gpu", type=_gpu_choice, nargs="+")
    m = sub.add_parser("metric", parents=[common], allow_abbrev=False)
    for short, long in (("-u", "--usage"), ("-p", "--power"), ("-t", "--temperature"), ("-m", "--mem-usage")):
        m.add_argument(short, long, action="store_true")
    s = sub.add_parser("static", parents=[common], allow_abbrev=False)
    for short, long in (("-a", "--asic"), ("-b", "--bus"), ("-v", "--vram")):
        s.add_argument(short, long, action="store_true")
    pr = sub.add_parser("process", parents=[common], allow_abbrev=False)
    pr.add_argument("-G", "--general", action="store_true")
    a = p.parse_args(argv)
    if a.command is None:
        p.print_usage()
        return 0
    if not a.json:
        print("amd-smi (atomdeck simulator): only --json output is simulated", file=sys.stderr)
        return 2
    nodes = g.gpus()
    if a.gpu:
        chosen = {i for sel in a.gpu for i in sel}
        nodes = [x for x in nodes if x.index in chosen]
    if a.command == "metric":
        wanted = {n for n, on in (("usage", a.usage), ("power", a.power), ("temperature", a.temperature),
                                  ("mem_usage", a.mem_usage)) if on}
        data = amd_metric(nodes, wanted)
    elif a.command == "static":
        data = amd_static(nodes, {n for n in ("asic", "bus", "vram") if getattr(a, n)})
    else:
        data = amd_process(nodes)
    if os.environ.get("ATOMSIM_AMDSMI_WRAP", "") == "1":
        print(json.dumps({"gpu_data": data}, indent=4))
    else:
        print(json.dumps(data, indent=4))
    return 0


# ---- rocm-smi -------------------------------------------------------------------------------------------------

def rocm_smi_json(gpus: list[g.Gpu], temp: bool, power: bool, use: bool, meminfo: list[str], memuse: bool) -> dict:
    """rocm_smi.py's JSON_DATA, filled in main()'s order: showtemp, showpower, showuse, showmemuse, showmeminfo.
    A sensor that reads N/A is left out (printInfoLog prints nothing in JSON mode): edge, HBM 0-3 here."""
    data: dict = {}
    for gpu in gpus:
        card: dict[str, str] = {}
        if temp:
            card["Temperature (Sensor junction) (C)"] = str(float(gpu.hotspot_c))
            card["Temperature (Sensor memory) (C)"] = str(float(gpu.mem_c))
        if power:
            card["Current Socket Graphics Package Power (W)"] = str(float(gpu.power_w))
        if use:
            card["GPU use (%)"] = str(gpu.activity)
        if memuse:
            card["GPU Memory Allocated (VRAM%)"] = str(round(100 * gpu.used_mb / gpu.total_mb))
        for mem in meminfo:
            total = {"VRAM": gpu.total_mb, "VIS_VRAM": gpu.total_mb, "GTT": g.GTT_TOTAL_MB}[mem] * g.MIB
            used = {"VRAM": gpu.used_mb, "VIS_VRAM": gpu.used_mb, "GTT": 14}[mem] * g.MIB
            card[f"{mem} Total Memory (B)"] = str(total)
            card[f"{mem} Total Used Memory (B)"] = str(used)
        data[f"card{gpu.index}"] = card
    return data


def rocm_smi_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="rocm-smi", allow_abbrev=False)
    p.add_argument("-t", "--showtemp", action="store_true")
    p.add_argument("-P", "--showpower", action="store_true")
    p.add_argument("-u", "--showuse", action="store_true")
    p.add_argument("--showmemuse", action="store_true")
    p.add_argument("--showmeminfo", nargs="+", choices=["vram", "vis_vram", "gtt", "all"], metavar="TYPE")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if not a.json:
        print("rocm-smi (atomdeck simulator): only --json output is simulated", file=sys.stderr)
        return 2
    mem = [m.upper() for m in (a.showmeminfo or [])]
    if "ALL" in mem:
        mem = ["VRAM", "VIS_VRAM", "GTT"]
    data = {k: v for k, v in rocm_smi_json(g.gpus(), a.showtemp, a.showpower, a.showuse, mem,
                                           a.showmemuse).items() if v}
    if not data:
        print("WARNING:root:No JSON data to report", file=sys.stderr)  # logging.warning, then sys.exit(RETCODE)
        return 0
    print(json.dumps(data))
    return 0
