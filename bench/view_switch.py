"""Switching views at 128 nodes: the real `atomdeck tui` in tmux at 160x50 on the synthetic 128-node cluster of
scale_console.py (its 64P64D recipe, no run), keys 1 (Nodes) and 4 (Run) in turn, each timed from sending the key
to the screen showing that view (tmux control mode, as the other console benches). The same switch is the
"keys while starting" row of scale_console.py, measured there with 129 simulators booting on the same 2 cores;
here the machine is quiet, so this is the console's own cost of a switch.

    bench/isolated .venv/bin/python bench/view_switch.py                        # 40 switches
    bench/isolated .venv/bin/python bench/view_switch.py --before OTHER/.venv/bin/atomdeck --rounds 3

--before: the `atomdeck` of another build (a venv of an older checkout), run in alternating rounds with this one
so that both see the same machine. Printed and saved as section "view-switch".
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from common import ATOMDECK, ConsoleProcs, console_in_tmux, pct, save
from scale_console import cluster_yaml, recipe_yaml


def _on_nodes(screen: str) -> bool:
    return "s000" in screen and "no run attached" not in screen


def _on_run(screen: str) -> bool:
    return "no run attached" in screen


def one_round(atomdeck: Path, n: int, switches: int, gap: float = 0.25) -> tuple[list[float], float]:
    """(seconds of each switch, the console's CPU seconds over them)."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        (tmp / "scale.yaml").write_text(cluster_yaml(n))
        (tmp / "scale-recipe.yaml").write_text(recipe_yaml(n))
        with console_in_tmux(tmp, f"{atomdeck} tui --offline --cluster {tmp / 'scale.yaml'} "
                                  f"--recipe {tmp / 'scale-recipe.yaml'}") as term:
            term.wait_for("s000", timeout=60)
            term.attach_control()
            for key, check in (("4", _on_run), ("1", _on_nodes)) * 2:  # each view drawn once before timing
                term.press_until_screen(key, check, timeout=30)
                time.sleep(gap)
            procs = ConsoleProcs(term)
            mark = procs.cpu_s()
            lat: list[float] = []
            for i in range(switches):
                key, check = ("4", _on_run) if i % 2 == 0 else ("1", _on_nodes)
                lat.append(term.press_until_screen(key, check, timeout=30))
                term.forget(gap)
                time.sleep(gap)
            cpu = procs.cpu_s()[0] - mark[0]
            term.keys("q")  # and a moment to exit by itself (a traced console writes its trace then)
            time.sleep(1.0)
            return lat, cpu


def _summary(lat: list[float], cpu: float) -> dict:
    return {"switches": len(lat), "p50_ms": round(pct(lat, 50) * 1000), "p95_ms": round(pct(lat, 95) * 1000),
            "max_ms": round(max(lat) * 1000), "console_cpu_ms_per_switch": round(cpu / len(lat) * 1000, 1),
            "all_ms": sorted(round(x * 1000) for x in lat)}


def main(n: int = 128, switches: int = 40, rounds: int = 1, before: Path | None = None) -> dict:
    mine: tuple[list[float], float] = ([], 0.0)
    theirs: tuple[list[float], float] = ([], 0.0)
    for _ in range(rounds):
        if before is not None:
            lat, cpu = one_round(before, n, switches)
            theirs = (theirs[0] + lat, theirs[1] + cpu)
        lat, cpu = one_round(ATOMDECK, n, switches)
        mine = (mine[0] + lat, mine[1] + cpu)
    out = {"nodes": n, **_summary(*mine)}
    if before is not None:
        out["before"] = {"atomdeck": str(before), **_summary(*theirs)}
    return out


if __name__ == "__main__":
    argv = sys.argv[1:]
    before = Path(argv[argv.index("--before") + 1]) if "--before" in argv else None
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 1
    res = main(rounds=rounds, before=before)
    save("view-switch", res)
    print(json.dumps(res, indent=2))
