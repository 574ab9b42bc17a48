"""The persistent remote shell: exact output, exit codes, one login for many commands, recovery."""

from __future__ import annotations

import asyncio
import time

import pytest
from atomdeck.core.remote.node_shell import RemoteShell
from atomdeck.core.remote.shell import CommandError
from atomdeck.core.remote.ssh import SshRunner

from .test_ssh_runner import ODD, _random_odd

pytestmark = pytest.mark.timeout(60)


async def test_output_bytes_exit_codes_and_stderr_are_exact(sshd, target):
    sh = RemoteShell(SshRunner(target(sshd)))
    try:
        res = await sh.run(["sh", "-c", "printf 'a\\n\\nb'; printf 'err\\n' >&2; exit 7"])
        assert (res.rc, res.stdout, res.stderr) == (7, "a\n\nb", "err\n")
        for args in (ODD, _random_odd(40)):
            res = await sh.run(["printf", "%s\\0", *args])
            assert res.ok and res.stdout.split("\0")[:-1] == args
        assert (await sh.run(["sh", "-c", "kill -9 $$"])).rc == 137
        assert (await sh.run(["atomdeck-no-such-command"])).rc == 127
        with pytest.raises(CommandError):
            await sh.run(["false"], check=True)
        big = await sh.run(["sh", "-c", "head -c 300000 /dev/zero | tr '\\0' x"])
        assert big.stdout == "x" * 300000  # framing by byte count, not by lines
    finally:
        await sh.close()


async def test_many_commands_use_one_login_and_are_fast(sshd, target):
    runner = SshRunner(target(sshd))
    sh = RemoteShell(runner)
    try:
        await sh.run(["true"])
        before = sshd.log_text().count("session opened") if "session opened" in sshd.log_text() else None
        t0 = time.perf_counter()
        for i in range(30):
            assert (await sh.run(["echo", str(i)])).stdout == f"{i}\n"
        per = (time.perf_counter() - t0) / 30
        plain = time.perf_counter()
        await runner.run(["true"])
        plain = time.perf_counter() - plain
        assert sshd.logins() == 1
        if before is not None:
            assert sshd.log_text().count("session opened") <= before + 1
        assert per < plain, f"{per * 1000:.1f} ms per command in the shell vs {plain * 1000:.1f} ms plain"
    finally:
        await sh.close()


async def test_concurrent_callers_are_served_one_after_another(sshd, target):
    sh = RemoteShell(SshRunner(target(sshd)))
    try:
        results = await asyncio.gather(*(sh.run(["sh", "-c", f"sleep 0.0{i % 3}; echo {i}"]) for i in range(12)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    finally:
        await sh.close()


async def test_a_timeout_ends_the_shell_and_the_next_call_starts_a_new_one(sshd, target):
    sh = RemoteShell(SshRunner(target(sshd)))
    try:
        res = await sh.run(["sleep", "5"], timeout=0.5)
        assert res.rc == 124
        assert (await sh.run(["echo", "again"])).stdout == "again\n"
    finally:
        await sh.close()


async def test_a_dropped_connection_falls_back_then_recovers(sshd, target):
    sh = RemoteShell(SshRunner(target(sshd)))
    try:
        assert (await sh.run(["echo", "one"])).ok
        assert sshd.kill_connections()
        await asyncio.sleep(0.3)
        res = await sh.run(["echo", "two"])  # the shell is gone: one plain command after reconnecting
        assert res.stdout == "two\n"
        assert (await sh.run(["echo", "three"])).stdout == "three\n"
    finally:
        await sh.close()
