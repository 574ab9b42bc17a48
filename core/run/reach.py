"""Does a cluster answer? One bounded check per cluster, all at once, so that one that does not (its Slurm
controller stopped, its login host unreachable) is named and never holds up the others.

What is asked is what atomdeck itself needs of the cluster to watch and stop runs on it:
  - local: nothing (this machine);
  - slurm: `scontrol ping` where Slurm commands run (here, or on the login host over SSH): it reports each
    slurmctld UP or DOWN and exits non-zero when none answers;
  - ssh: `true` on the login host when nodes are reached through it, else on the first listed node.
A check that takes longer than its timeout is "no answer within N s" (the connection may hang, not fail).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ..config.cluster import Cluster
from ..config.errors import AtomdeckError

TIMEOUT_S = 8.0  # above the SSH connect timeout the shipped clusters use (5 s), below a person's patience
CLOSE_S = 2.0  # closing a connection that hangs is not waited for longer


@dataclass(frozen=True)
class Reach:
    cluster: str
    answers: bool
    detail: str  # what answered, or what did not and why
    took_s: float
    at: float  # when the check ended (time.time())

    def to_json(self) -> dict:
        return {"answers": self.answers, "detail": self.detail, "took_s": round(self.took_s, 2), "at": self.at}

    @property
    def words(self) -> str:
        return "answers" if self.answers else f"NO ANSWER: {self.detail}"


def _what(cluster: Cluster) -> tuple[list[str], str]:
    """(argv, where it runs) of the check, where the runner will be made."""
    if cluster.launcher == "slurm":
        where = f"login host {cluster.login.host}" if cluster.login else "this machine"
        return ["scontrol", "ping"], where
    if cluster.login is not None and cluster.ssh.via_login:
        return ["true"], f"login host {cluster.login.host}"
    first = cluster.nodes[0].name if cluster.nodes else "?"
    return ["true"], f"node {first}"


def _runner(cluster: Cluster):
    from ..launch import control_runner

    if cluster.launcher == "slurm":
        return control_runner(cluster)
    from ..remote.ssh.runner import ssh_runner_for_login, ssh_runner_for_node

    if cluster.login is not None and cluster.ssh.via_login:
        return ssh_runner_for_login(cluster)
    if not cluster.nodes:
        raise AtomdeckError(f"cluster {cluster.name} lists no nodes to ask")
    return ssh_runner_for_node(cluster, cluster.nodes[0].name)


async def check(cluster: Cluster, timeout: float = TIMEOUT_S) -> Reach:
    """Ask the cluster once, within `timeout` seconds; never raises for a cluster that does not answer."""
    t0 = time.monotonic()

    def done(ok: bool, detail: str) -> Reach:
        return Reach(cluster.name, ok, detail, time.monotonic() - t0, time.time())

    if cluster.launcher == "local":
        return done(True, "this machine")
    argv, where = _what(cluster)
    runner = None
    try:
        async with asyncio.timeout(timeout):
            runner = _runner(cluster)
            res = await runner.run(argv, timeout=timeout)
    except TimeoutError:
        return done(False, f"{where}: no answer within {timeout:g} s")
    except AtomdeckError as e:
        return done(False, f"{where}: {e}")
    except OSError as e:
        return done(False, f"{where}: {e.strerror or e}")
    finally:
        if runner is not None:
            try:
                async with asyncio.timeout(CLOSE_S):
                    await runner.close()
            except (TimeoutError, OSError, AtomdeckError):
                pass
    text = " ".join((res.stdout or res.stderr).split())
    if res.ok:
        return done(True, f"{where}: {text}" if text else where)
    if argv[0] == "scontrol":
        return done(False, f"the Slurm controller does not answer ({where}: {text or res.explain()})")
    return done(False, f"{where}: {res.explain()}")


async def check_all(clusters: Iterable[Cluster], timeout: float = TIMEOUT_S) -> dict[str, Reach]:
    """Every cluster at once (by name; each at most `timeout` s, so all of them at most about that)."""
    todo = {c.name: c for c in clusters}
    found = await asyncio.gather(*(check(c, timeout) for c in todo.values()))
    return {r.cluster: r for r in found}
