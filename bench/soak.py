"""Soak: a serving 2P1D (simulator sped up, ATOMDECK_SIM_SPEED) under steady load for a long time with the
console attached (the real `atomdeck tui` in tmux, on the run view). Every minute: RSS and open file
descriptors (/proc/PID/fd) of the console and of its watcher process. Reported: growth per hour after
the first 5 minutes (least-squares slope), fd change over the same span. Goal (issue 19): growth
< 5 MB per hour, no fd growth.

    bench/isolated .venv/bin/python bench/soak.py               # 30 minutes
    bench/isolated .venv/bin/python bench/soak.py --minutes 3   # a quick look (warm-up 1 minute)

The load: the load generator's streaming client (core/measure/client.py), `--concurrency` requests
in flight (default 2), ISL 128 / OSL 32, each stream a fresh random prompt; results are counted,
not kept. Benchmarks write numbers, they do not assert them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import ATOMDECK, ConsoleProcs, console_in_tmux, launch_to_serving, save, tear_down_from_console, watcher_pid

GOAL_MB_PER_H = 5.0


def slope_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) in value per hour."""
    if len(points) < 2:
        return None
    mt = statistics.fmean(t for t, _ in points)
    mv = statistics.fmean(v for _, v in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return None
    return 3600 * sum((t - mt) * (v - mv) for t, v in points) / den


async def load(router: str, model: str, concurrency: int, stop: asyncio.Event, counts: dict) -> None:
    import aiohttp
    from atomdeck.core.measure.client import stream_request
    from atomdeck.core.measure.workload import random_prompts

    rng = random.Random(0)
    timeout = aiohttp.ClientTimeout(total=60)

    async def one_lane(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            prompt = random_prompts(1, 128, 1.0, rng)[0]
            rec = await stream_request(session, router, model, prompt, 32, "completions", counts["sent"],
                                       time.perf_counter())
            counts["sent"] += 1
            counts["ok" if rec.success else "failed"] += 1
            if not rec.success:
                counts["last_error"] = rec.error
                await asyncio.sleep(1)
            await asyncio.sleep(0.5)  # steady, not flat out: the 2 cores are shared

    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(one_lane(session) for _ in range(concurrency)))


def summarize(samples: list[dict], warmup_s: float) -> dict:
    """Growth after the warm-up: the least-squares slope over all of it, and over its second half (a
    buffer that fills and then stays full shows as growth early and none late). Open fds come and go
    (health checks, scrapes): their growth is the floor of the second half against the floor of the
    first."""
    late = [s for s in samples if s["t_s"] >= warmup_s] or samples[-2:]
    half = late[len(late) // 2:] if len(late) >= 4 else late
    out: dict = {"warmup_s": warmup_s, "samples_after_warmup": len(late)}
    for who in ("console", "watcher"):
        pts = [(s["t_s"], s[f"{who}_rss_mb"]) for s in late if s[f"{who}_rss_mb"] is not None]
        g = slope_per_hour(pts)
        g2 = slope_per_hour([(s["t_s"], s[f"{who}_rss_mb"]) for s in half if s[f"{who}_rss_mb"] is not None])
        out[f"{who}_rss_growth_mb_per_h"] = round(g, 2) if g is not None else None
        out[f"{who}_rss_growth_2nd_half_mb_per_h"] = round(g2, 2) if g2 is not None else None
        out[f"{who}_rss_first_mb"] = pts[0][1] if pts else None
        out[f"{who}_rss_last_mb"] = pts[-1][1] if pts else None
        f = [s[f"{who}_fds"] for s in late if s[f"{who}_fds"] is not None]
        mid = len(f) // 2
        out[f"{who}_fds_min"], out[f"{who}_fds_max"] = (min(f), max(f)) if f else (None, None)
        out[f"{who}_fds_growth"] = (min(f[mid:]) - min(f[:mid])) if len(f) >= 2 else None
        span = late[-1]["t_s"] - late[0]["t_s"] if len(late) > 1 else 0
        cpu = late[-1][f"{who}_cpu_s"] - late[0][f"{who}_cpu_s"] if len(late) > 1 else 0
        out[f"{who}_cpu_pct"] = round(100 * cpu / span, 1) if span else None
    both = [out[f"{w}_rss_growth_mb_per_h"] for w in ("console", "watcher")]
    out["goal_growth_lt_5mb_per_h"] = all(g is not None and g < GOAL_MB_PER_H for g in both)
    out["goal_no_fd_growth"] = all(out[f"{w}_fds_growth"] is not None and out[f"{w}_fds_growth"] <= 0
                                   for w in ("console", "watcher"))
    return out


def soak(minutes: float = 30.0, every: float = 60.0, concurrency: int = 2, speed: str = "20",
         recipe: str = "demo-2p1d", log: Path | None = None) -> dict:
    from atomdeck.core.run.run import Run

    with tempfile.TemporaryDirectory() as d, \
            console_in_tmux(Path(d), f"{ATOMDECK} tui --recipe {recipe}", ATOMDECK_SIM_SPEED=speed) as term:
        launch_to_serving(term, "demo-n01", timeout=120, first=30)
        run_id = Run.list()[-1]["id"]
        run = Run.open(run_id)
        router, model = run.plan.router.url, run.recipe.model.client_name
        procs = ConsoleProcs(term)
        counts: dict = {"sent": 0, "ok": 0, "failed": 0}
        samples: list[dict] = []

        async def drive() -> None:
            stop = asyncio.Event()
            lanes = asyncio.create_task(load(router, model, concurrency, stop, counts))
            t0 = time.monotonic()
            n = 0
            while True:
                s = {"t_s": round(time.monotonic() - t0, 1), **procs.sample(),
                     "requests_ok": counts["ok"], "requests_failed": counts["failed"]}
                samples.append(s)
                print(json.dumps(s), file=sys.stderr, flush=True)
                if log:
                    with log.open("a") as f:
                        f.write(json.dumps(s) + "\n")
                n += 1
                if time.monotonic() - t0 >= minutes * 60 or lanes.done():
                    break
                await asyncio.sleep(max(0.0, t0 + n * every - time.monotonic()))
            stop.set()
            await asyncio.wait_for(lanes, 90)

        asyncio.run(drive())
        still_serving = "SERVING" in term.screen()
        watcher_same = watcher_pid(procs.console) == procs.watcher
        _, teardown_s = tear_down_from_console(term, timeout=120)
        warmup = 300.0 if minutes > 10 else min(60.0, minutes * 20)
        return {"minutes": minutes, "every_s": every, "recipe": recipe, "sim_speed": speed,
                "concurrency": concurrency, "requests_ok": counts["ok"], "requests_failed": counts["failed"],
                "last_error": counts.get("last_error"), "serving_at_end": still_serving,
                "same_watcher_throughout": watcher_same, "teardown_s": round(teardown_s, 2),  # the confirming key to verified clean,
                **summarize(samples, warmup), "samples": samples}


def rows(r: dict) -> list[str]:
    if not r or "console_rss_growth_mb_per_h" not in r:
        return []

    def g(v) -> str:
        return "-" if v is None else f"{v:+.1f} MB/h"

    ok = "yes" if r["goal_growth_lt_5mb_per_h"] else "**no**"
    fd_ok = "yes" if r["goal_no_fd_growth"] else "**no**"
    return [
        f"| soak: 2P1D serving {r['minutes']:g} min under load ({r['requests_ok']:,} requests, "
        f"{r['requests_failed']} failed), console on the run view: RSS growth after the first "
        f"{r['warmup_s'] / 60:.3g} min (second half) | console {g(r['console_rss_growth_mb_per_h'])} "
        f"({g(r['console_rss_growth_2nd_half_mb_per_h'])}; {r['console_rss_first_mb']:.0f} -> "
        f"{r['console_rss_last_mb']:.0f} MB), watcher {g(r['watcher_rss_growth_mb_per_h'])} "
        f"({g(r['watcher_rss_growth_2nd_half_mb_per_h'])}; {r['watcher_rss_first_mb']:.0f} -> "
        f"{r['watcher_rss_last_mb']:.0f} MB) | < 5 MB/h | {ok} |",
        f"| soak: open file descriptors, same span (floor of the 2nd half - floor of the 1st) | console "
        f"{r['console_fds_min']}-{r['console_fds_max']} ({r['console_fds_growth']:+d}), watcher "
        f"{r['watcher_fds_min']}-{r['watcher_fds_max']} ({r['watcher_fds_growth']:+d}) | no growth | {fd_ok} |",
        f"| soak: CPU while serving under that load | console {r['console_cpu_pct']}%, watcher "
        f"{r['watcher_cpu_pct']}% of a core | | |",
    ]


def main(minutes: float = 30.0, every: float = 60.0, concurrency: int = 2) -> dict:
    r = soak(minutes, every, concurrency)
    r["table"] = rows(r)
    return r


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--log", type=Path, help="append each sample (JSON line) to this file as it is taken")
    a = ap.parse_args()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` tears the run down
    os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))
    res = soak(a.minutes, a.every, a.concurrency, log=a.log)
    res["table"] = rows(res)
    save("soak", res)
    print(json.dumps({k: v for k, v in res.items() if k not in ("table", "samples")}, indent=2))
    print("\n".join(res["table"]))
