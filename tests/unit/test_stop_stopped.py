"""Teardown of a stopped process group on this machine (issue 17.7): SIGCONT goes with SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

from atomdeck.core.launch.base import ProcHandle
from atomdeck.core.launch.local import stop_groups
from atomdeck.core.launch.procfs import group_members


def test_a_stopped_group_leaves_on_sigterm_not_after_the_grace_period():
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"],
                             start_new_session=True)
    try:
        os.killpg(child.pid, signal.SIGSTOP)
        while open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
            time.sleep(0.01)
        h = ProcHandle("decode-0", "local", "127.0.0.1", "local", pid=child.pid)
        (rep,) = asyncio.run(stop_groups([(h, child.pid)], 30.0, lambda _h, _members: True))
        assert rep.ok and rep.detail.startswith("SIGTERM, gone in"), rep.detail
        assert group_members(child.pid) == []
        assert child.wait(5) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
