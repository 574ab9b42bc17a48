"""SshRunner against a real sshd (and the in-process server): the LocalRunner contract over SSH."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from atomdeck.core.remote.shell import CommandError, LocalRunner
from atomdeck.core.remote.ssh import SshRunner, SshTarget, close_all, remote_command

from .harness import USER, InprocServer, Sshd, ensure_sshd, processes_matching

pytestmark = pytest.mark.timeout(30)

# Strings a shell would love to reinterpret. NUL cannot travel in argv or the environment.
ODD = ["", " ", "  two  spaces ", "a b", "'", '"', "\\", "\\\\", "$HOME", "${HOME}", "$(id)", "`id`", "a;b",
       "a|b", "a&b", "a&&b", "<x>", ">out", "*", "?", "[a]", "~", "~root", "!", "!!", "#", "-n", "--", "-e",
       "\n", "a\nb", "\t", "é", "日本語", "💥", "%s", "%%", "{a,b}", "x=y", "'\"'\"'", "\\n", "\x01", "\x7f",
       "trailing ", "-", "=", "$'x'", "\r", "a\\'b"]


def _random_odd(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    alphabet = " \t\n'\"\\$`;|&<>()[]{}*?~!#%=-+,.:/@^aZ09é日💥\x01\x7f\r"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))) for _ in range(n)]


async def test_run_stdout_stderr_and_exit_codes(sshd, target):
    r = SshRunner(target(sshd))
    res = await r.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert (await r.run(["true"])).ok
    assert (await r.run(["sh", "-c", "kill -9 $$"])).rc == 137
    missing = await r.run(["atomdeck-no-such-command"])
    assert missing.rc == 127 and "atomdeck-no-such-command" in missing.stderr
    with pytest.raises(CommandError, match="exited 3"):
        await r.run(["sh", "-c", "exit 3"], check=True)


async def test_run_with_input(sshd, target):
    r = SshRunner(target(sshd))
    assert (await r.run(["cat"], input="line 1\nline 2\n")).stdout == "line 1\nline 2\n"
    assert (await r.run(["wc", "-c"], input="", timeout=5)).stdout.strip() == "0"  # EOF sent for ""


async def test_stream_lines_merge_stderr_and_keep_blank_lines(sshd, target):
    r = SshRunner(target(sshd))
    lines = [ln async for ln in r.stream(["sh", "-c", "echo a; echo; echo b >&2; printf 'no newline'"])]
    assert lines == ["a", "", "b", "no newline"]  # asyncssh's trailing '' at EOF is not a line
    many = [ln async for ln in r.stream(["seq", "1", "20000"])]
    assert many == [str(i) for i in range(1, 20001)]


@pytest.fixture(params=["sshd", "inproc"])
async def any_server(request, tmp_path, keys, target, known_hosts):
    """The same checks against OpenSSH (bash -c on the far side) and asyncssh's server (/bin/sh -c)."""
    if request.param == "sshd":
        ensure_sshd()
        d = Sshd(tmp_path / "odd-sshd", keys.host, [keys.client.pub]).start()
        yield target(d)
        d.stop()
    else:
        srv = await InprocServer().start(keys.host, Path(f"{keys.client.path}.pub"))
        kh = known_hosts(extra=f"[127.0.0.1]:{srv.port} {' '.join(keys.host.pub.split()[:2])}\n")
        yield SshTarget("127.0.0.1", port=srv.port, user=USER, identity=str(keys.client.path), known_hosts=kh)
        await close_all()
        await srv.stop()


async def test_env_and_argv_survive_shell_metacharacters(any_server):
    t = any_server
    r = SshRunner(t)
    values = ODD + _random_odd(150)
    # argv: printf gets every value back untouched
    res = await r.run(["printf", "%s\\0", *values])
    assert res.stdout.split("\0")[:-1] == values
    # env: `env K=V` inside the argv, quoted once by shlex.join
    for chunk in range(0, len(values), 50):
        env = {f"ATOMDECK_V{i}": v for i, v in enumerate(values[chunk:chunk + 50])}
        res = await r.run(["env", "-0"], env=env)
        got = dict(e.split("=", 1) for e in res.stdout.split("\0") if e.startswith("ATOMDECK_V"))
        assert got == env
    streamed = [ln async for ln in r.stream(["printf", "%s\\n", *(v for v in values if "\n" not in v
                                                                   and "\r" not in v)])]
    assert streamed == [v for v in values if "\n" not in v and "\r" not in v]


async def test_timeout_kills_the_remote_process_group(sshd, target):
    r = SshRunner(target(sshd))
    marker = f"{900 + os.getpid() % 97}.{random.randint(10**6, 10**7)}"
    res = await r.run(["sh", "-c", f"sleep {marker}; echo never"], timeout=0.5)
    assert res.rc == 124 and "timed out" in res.stderr and "never" not in res.stdout  # the timeout, not the sleep
    await _gone(marker)


async def test_leaving_a_stream_kills_the_remote_command(sshd, target):
    r = SshRunner(target(sshd))
    marker = f"{800 + os.getpid() % 97}.{random.randint(10**6, 10**7)}"
    async for line in r.stream(["sh", "-c", f"echo started; sleep {marker}"]):
        assert line == "started"
        break
    await _gone(marker)


async def test_cancelled_run_kills_the_remote_command(sshd, target):
    r = SshRunner(target(sshd))
    marker = f"{700 + os.getpid() % 97}.{random.randint(10**6, 10**7)}"
    task = asyncio.ensure_future(r.run(["sleep", marker]))
    await _until(lambda: processes_matching(marker))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _gone(marker)


async def test_same_results_as_local_runner(sshd, target):
    """One API: the same argv gives the same Result locally and over SSH."""
    argv = ["sh", "-c", 'printf "%s|" "$0" "$@"; echo; echo warn >&2; exit 4', "x", "a b", "$c"]
    local, remote = await LocalRunner().run(argv), await SshRunner(target(sshd)).run(argv)
    assert (remote.rc, remote.stdout, remote.stderr) == (local.rc, local.stdout, local.stderr)


def test_remote_command_is_shlex_join():
    assert remote_command(["echo", "a b"], guard=False) == "echo 'a b'"
    assert remote_command(["echo", "hi"], {"A": "x y", "B": "$z"}, guard=False) == "env 'A=x y' 'B=$z' echo hi"
    guarded = remote_command(["tail", "-F", "--", "/tmp/x y"])
    assert guarded.startswith("sh -c ") and guarded.endswith("atomdeck split tail -F -- '/tmp/x y'")
    for bad in ({"1A": "x"}, {"A B": "x"}, {"A": "nul\0"}):
        with pytest.raises(ValueError):
            remote_command(["true"], bad)


def test_importing_core_does_not_import_asyncssh():
    code = ("import sys, atomdeck.core.remote.ssh.connection, atomdeck.core.remote.ssh.tail, atomdeck.core.launch;"
            "assert 'asyncssh' not in sys.modules, 'asyncssh imported eagerly'")
    subprocess.run([sys.executable, "-c", code], check=True)


async def _until(cond, timeout: float = 5.0, poll: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if v := cond():
            return v
        await asyncio.sleep(poll)
    raise AssertionError("condition not met in time")


async def _gone(marker: str) -> None:
    deadline = time.monotonic() + 20  # a guard for a condition, not a timing: the process goes when its channel closes
    while processes_matching(marker):
        assert time.monotonic() < deadline, f"remote process {marker} outlived its channel"
        await asyncio.sleep(0.05)



async def test_a_run_cancelled_at_any_moment_of_its_start_leaves_nothing(sshd, target):
    """Cancelled at every moment from the channel open to the command running (CI once cancelled
    inside the open, after sshd had started the command: the channel stayed open and the command
    outlived the run)."""
    r = SshRunner(target(sshd))
    await r.connect()
    markers = []
    for i in range(40):
        marker = f"{700 + os.getpid() % 97}.{random.randint(10**6, 10**7)}"
        markers.append(marker)
        task = asyncio.ensure_future(r.run(["sleep", marker]))
        await asyncio.sleep(0.001 * i)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for marker in markers:
        await _gone(marker)
