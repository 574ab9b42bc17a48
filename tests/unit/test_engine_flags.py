"""The engine's own parser before launch (issue 17.3): flags checked against the real program's --help (here the
simulator's shims, which print their parsers' help like ATOM and AToMesh), cached by image."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest
from atomdeck.core.config.cluster import parse_cluster
from atomdeck.core.config.errors import PreflightError
from atomdeck.core.design.commands import LaunchContext, SimRuntime
from atomdeck.core.remote.engine_flags import (
    accepted_flags,
    check_engine_flags,
    closest,
    flags_in,
    help_command,
    program_of,
)
from atomdeck.core.remote.shell import LocalRunner

from .helpers import LAB, lab_assess


def _sim_ctx():
    from atomdeck.core.config.paths import sim_shim_dir

    return LaunchContext(sim=SimRuntime(shim_dir=str(sim_shim_dir()), python_bin=os.path.dirname(sys.executable), speed=0))


def _run_here(calls: list):
    async def run_on(node, argv):
        calls.append(argv)
        return await LocalRunner().run(argv, timeout=60)
    return run_on


def test_program_and_flags_of_a_command():
    argv = ["python3", "-m", "atom.entrypoints.openai_server", "--model", "m", "-tp", "8", "--x=1", "--y", "-1"]
    assert program_of(argv) == argv[:3]
    assert flags_in(argv) == ["--model", "-tp", "--x", "--y"]
    assert program_of(["atomesh", "launch", "--host", "h"]) == ["atomesh", "launch"]
    assert accepted_flags("  --[no-]cache  x\n  -h, --help") >= {"--cache", "--no-cache", "-h", "--help"}
    assert closest("--kv-cache-dtype", {"--kv_cache_dtype", "--kv-transfer-config"}) == "--kv_cache_dtype"


def test_every_flag_atomdeck_renders_is_accepted_by_the_shims():
    a = lab_assess("prefill: {args: {kv_cache_dtype: fp8, max-num-seqs: 8}}\n", ctx=_sim_ctx())
    assert a.ok, a.findings
    found = asyncio.run(check_engine_flags(a.plan, a.processes, _run_here([])))
    assert set(found) == {"python3 -m atom.entrypoints.openai_server", "atomesh launch"}


def test_unknown_flags_are_refused_with_the_closest_spelling_and_the_recipe_key():
    a = lab_assess("decode: {args: {kv-cache-dtype: fp8, max-num-seq: 8}}\n", ctx=_sim_ctx())
    with pytest.raises(PreflightError) as e:
        asyncio.run(check_engine_flags(a.plan, a.processes, _run_here([])))
    got = sorted((f.key, f.fix) for f in e.value.findings)
    assert got == [("decode.args.kv-cache-dtype", "spell it --kv_cache_dtype"),
                   ("decode.args.max-num-seq", "spell it --max-num-seqs")]
    assert all(f.rule == "preflight-flag" and f.node == "mia1-p01-g02" for f in e.value.findings)


def test_help_runs_once_per_image_then_comes_from_the_cache():
    cluster = LAB + "container: {runtime: docker}\n"
    a = lab_assess("image: rocm/atom:v1\n", cluster=cluster, ctx=_sim_ctx())
    worker = next(p for p in a.processes if p.role == "prefill")
    assert help_command(a.plan, worker) == ["docker", "run", "--rm", "--entrypoint", "", "rocm/atom:v1",
                                            "python3", "-m", "atom.entrypoints.openai_server", "--help"]
    sim = _sim_ctx().sim
    calls: list = []

    async def in_image(node, argv):  # no docker here: the image's programs are the simulator's shims
        calls.append(argv)
        prog = argv[argv.index("--entrypoint") + 3:]
        env = ["env", f"PYTHONPATH={sim.shim_dir}", f"PATH={sim.shim_dir}/bin:{os.path.dirname(sys.executable)}:/usr/bin:/bin"]
        return await LocalRunner().run(env + prog, timeout=60)

    asyncio.run(check_engine_flags(a.plan, a.processes, in_image))
    assert len(calls) == 2  # the worker's program and the router's, once each for three processes
    asyncio.run(check_engine_flags(a.plan, a.processes, in_image))
    assert len(calls) == 2  # the second launch on the same image asks nobody
    other = lab_assess("image: rocm/atom:v2\n", cluster=cluster, ctx=_sim_ctx())
    asyncio.run(check_engine_flags(other.plan, other.processes, in_image))
    assert len(calls) == 4 and "rocm/atom:v2" in calls[-1]  # a new image is asked again
    assert parse_cluster(cluster).container.runtime == "docker"
