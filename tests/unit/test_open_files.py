"""A watch lifts its process's soft limit on open files (it holds ~4 descriptors per process watched:
kept HTTP connections, log tails, node channels), so a big run does not fail on a login shell's 1,024.
Real processes, started with a low soft limit."""

from __future__ import annotations

import resource
import subprocess
import sys

PROBE = ("import resource; from atomdeck.core.run.watchers import raise_open_files_limit as r; "
         "print(r(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")


def run_with_soft(soft: int) -> tuple[int, int]:
    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    out = subprocess.run([sys.executable, "-c", PROBE], preexec_fn=lower, capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    return int(out[0]), int(out[1])


def test_a_low_soft_limit_is_lifted_toward_the_hard_one():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    want = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    assert run_with_soft(256) == (want, want)


def test_a_higher_soft_limit_is_left_alone():
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    high = hard if hard != resource.RLIM_INFINITY else 1 << 20
    returned, soft = run_with_soft(high)
    assert soft == high and returned == high
