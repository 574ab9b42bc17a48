"""Teardown through a login host, broken down: teardown.py's measurement (1P1D and 2P1D, serving, grace 5 s)
for the named clusters, N times, with the commands sent through the login host during the teardown counted
and `release()` timed. Prints JSON; leaves results/latest.json alone (a before/after comparison, issue 19).

    flock /tmp/atomdeck-lab-run.lock .venv/bin/python bench/teardown_commands.py 3 lab-login
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("XDG_STATE_HOME", tempfile.mkdtemp(prefix="atomdeck-bench-state-"))

# (imported after the state directory is chosen)
import teardown
from atomdeck.core.launch import slurm
from atomdeck.core.remote.ssh.runner import SshRunner
from atomdeck.core.run.run import Run

seen: dict = {"on": False, "commands": [], "release_s": 0.0}


def count(cls, name: str, wrap) -> None:
    setattr(cls, name, wrap(getattr(cls, name)))


def counted(f):
    async def run(self, argv, *a, **kw):
        if seen["on"]:  # what it was: the command, or the script's name for `sh -c SCRIPT NAME ...`
            seen["commands"].append(argv[3] if argv[:2] == ["sh", "-c"] and len(argv) > 3 else argv[0])
        return await f(self, argv, *a, **kw)
    return run


def timed(f):
    async def release(self, *a, **kw):
        t = time.perf_counter()
        try:
            return await f(self, *a, **kw)
        finally:
            seen["release_s"] = round(time.perf_counter() - t, 3)
    return release


def during(f):
    async def td(self, *a, **kw):
        seen.update(on=True, commands=[])
        try:
            return await f(self, *a, **kw)
        finally:
            seen["on"] = False
    return td


count(SshRunner, "run", counted)
count(slurm.SlurmLauncher, "release", timed)
count(Run, "teardown", during)
_one = teardown.one


async def one(recipe: str, cluster: str) -> dict:
    r = await _one(recipe, cluster)
    return {**r, "login_commands": len(seen["commands"]), "which": seen["commands"], "release_s": seen["release_s"]}


teardown.one = one

if __name__ == "__main__":
    reps, clusters = int(sys.argv[1]), sys.argv[2:] or ["lab-login"]
    out = []
    for _ in range(reps):
        out.append(asyncio.run(teardown.main(clusters)))
        out[-1]["load_1min"] = float(open("/proc/loadavg").read().split()[0])
    print(json.dumps(out, indent=1))
