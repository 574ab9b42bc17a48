"""A start never runs twice (issue 17.4): the SSH connection cut in the middle of a start makes RemoteShell run
the start again over a fresh connection; the start token makes that second run report the first process."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from atomdeck.core.config.cluster import load_cluster
from atomdeck.core.config.paths import find_cluster
from atomdeck.core.design.commands import ProcessSpec
from atomdeck.core.launch.ssh import SshLauncher

from .runhelpers import node_pids

pytestmark = [pytest.mark.lab, pytest.mark.slow]

NODE = "mia1-p01-g02"


def _supervisors(lab, run_id: str, name: str) -> list[int]:
    """Processes of `name` that lead their own process group: one per started copy."""
    return node_pids(lab, NODE, f'tr "\\0" "\\n" < "$f" 2>/dev/null | grep -qx "ATOMDECK_RUN={run_id}:{name}" && '
                                f'[ "$(sed "s/.*) //" /proc/$p/stat | cut -d" " -f3)" = "$p" ]')


def test_a_start_cut_by_an_ssh_eof_starts_one_process(lab, tmp_path):
    run_id = f"cut-{uuid.uuid4().hex[:8]}"
    launcher = SshLauncher(run_id, str(tmp_path), load_cluster(find_cluster("lab-ssh")), {})
    logs = f"{launcher.remote_dir}/logs"
    spec = ProcessSpec(name="decode-0", role="decode", node=NODE, host="10.77.0.12", argv=["sleep", "600"], env={},
                       runtime_env={}, launch_argv=[], inner=["sleep", "600"], ports=[], log="")

    async def go():
        shell = launcher.shell(NODE)
        await shell.run(["mkdir", "-p", logs], check=True)
        # the pidfile is a FIFO: the start blocks writing it, after the process started and before it answers
        await shell.run(["mkfifo", f"{logs}/decode-0.pid"], check=True)
        start = asyncio.create_task(launcher.start(spec))
        deadline = time.monotonic() + 20
        while not await asyncio.to_thread(_supervisors, lab, run_id, "decode-0"):
            assert time.monotonic() < deadline and not start.done(), "the start never got going"
            await asyncio.sleep(0.05)
        killed = await asyncio.to_thread(lab.kill_sshd_sessions, NODE)  # the SSH EOF, mid-start
        assert killed
        lab.node_exec(NODE, ["rm", "-f", f"{logs}/decode-0.pid"], check=True)
        return await asyncio.wait_for(start, 60)

    h = None
    try:
        h = asyncio.run(go())
        assert _supervisors(lab, run_id, "decode-0") == [h.pid]
    finally:
        async def clean():
            if h is not None:
                await launcher.stop([h], 1)
            await launcher.release([NODE])
            await launcher.close()
        asyncio.run(clean())
        lab.node_exec(NODE, ["rm", "-rf", launcher.remote_dir])
    assert _supervisors(lab, run_id, "decode-0") == []
