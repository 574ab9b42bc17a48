"""The atomdeck Slurm + SSH lab (``tests/cluster/up.sh``) as seen from Python.

``Lab.detect()`` says whether the lab is up and usable (and why not); a ``Lab`` knows the
nodes, their IPs, the login host and the SSH files, and can break and repair single nodes:
kill/start a node's slurmd, take its link down/up, kill its SSH sessions, run a command inside
it. Everything here needs root (namespaces, signals to root daemons, the root-only client key).

The lab's shape comes from ``lab.env`` beside this file (the same file up.sh/down.sh read);
its location from ``$LAB`` (default ``/var/lib/atomdeck-lab``).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
UP_SH = HERE / "up.sh"
DOWN_SH = HERE / "down.sh"
LAB_ENV = HERE / "lab.env"
DEFAULT_LAB_DIR = Path("/var/lib/atomdeck-lab")
UTS_DIR = Path("/run/atomdeck-lab/uts")
NETNS_DIR = Path("/run/netns")
# daemons get a clean environment, never the caller's (pytest's, a venv's, CI's)
DAEMON_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/root",
}


class LabError(RuntimeError):
    """A lab operation failed (the message says what and why)."""


def read_env(path: Path = LAB_ENV) -> dict[str, str]:
    """Parse lab.env (KEY=VALUE lines, shell quoting, no expansions)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key):
            raise LabError(f"{path}: cannot parse line {line!r}")
        parts = shlex.split(value, comments=True)
        env[key] = " ".join(parts)
    return env


def _pairs(spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in spec.split():
        name, _, ip = item.partition("=")
        out[name] = ip
    return out


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie (PID 1 here reaps late: Z counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, comm) for every live process."""
    table: dict[int, tuple[int, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        rest = stat.rsplit(")", 1)[1].split()
        if rest[0] in ("Z", "X"):
            continue
        table[int(entry.name)] = (int(rest[1]), comm)
    return table


@dataclass(frozen=True)
class LabStatus:
    """Result of ``Lab.detect()``: ``ok`` and, if not, ``reason`` (one line, says what to do)."""

    lab: Lab
    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class Lab:
    root: Path
    cluster: str
    partition: str
    nodes: dict[str, str]  # node name -> IP, in lab.env order (drained node included)
    login: str
    login_ip: str
    host_ip: str
    bridge: str
    drained: str
    drain_reason: str
    gpus_per_node: int
    slurmd_timeout: int
    message_timeout: int
    env: dict[str, str] = field(repr=False, default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_env(cls, lab_dir: str | os.PathLike[str] | None = None) -> Lab:
        env = read_env()
        login_name, login_ip = next(iter(_pairs(env["LAB_LOGIN"]).items()))
        root = Path(lab_dir or os.environ.get("LAB") or DEFAULT_LAB_DIR)
        return cls(
            root=root,
            cluster=env["LAB_CLUSTER"],
            partition=env["LAB_PARTITION"],
            nodes=_pairs(env["LAB_NODES"]),
            login=login_name,
            login_ip=login_ip,
            host_ip=env["LAB_HOST_IP"],
            bridge=env["LAB_BRIDGE"],
            drained=env["LAB_DRAINED"],
            drain_reason=env["LAB_DRAIN_REASON"],
            gpus_per_node=int(env["LAB_GPUS_PER_NODE"]),
            slurmd_timeout=int(env["LAB_SLURMD_TIMEOUT"]),
            message_timeout=int(env["LAB_MESSAGE_TIMEOUT"]),
            env=env,
        )

    @classmethod
    def detect(cls, lab_dir: str | os.PathLike[str] | None = None) -> LabStatus:
        """Is the lab up and usable? ``LabStatus(lab, ok, reason)``; never raises."""
        lab = cls.from_env(lab_dir)
        try:
            reason = lab.problem()
        except Exception as exc:
            reason = f"lab probe failed: {type(exc).__name__}: {exc}"
        return LabStatus(lab, reason is None, reason or "")

    # ------------------------------------------------------------------ names and paths
    @property
    def node_names(self) -> list[str]:
        return list(self.nodes)

    @property
    def healthy_nodes(self) -> list[str]:
        """Nodes that should be usable (all but the drained one)."""
        return [n for n in self.nodes if n != self.drained]

    @property
    def hosts(self) -> list[str]:
        """Everything with its own namespace and sshd: the login host, then the nodes."""
        return [self.login, *self.nodes]

    def ip(self, host: str) -> str:
        if host == self.login:
            return self.login_ip
        try:
            return self.nodes[host]
        except KeyError:
            raise LabError(f"unknown lab host {host!r} (known: {', '.join(self.hosts)})") from None

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def jobs_dir(self) -> Path:
        """World-writable directory for job output files (sbatch -o)."""
        return self.root / "jobs"

    @property
    def ssh_dir(self) -> Path:
        return self.root / "ssh"

    @property
    def ssh_config(self) -> Path:
        return self.ssh_dir / "ssh_config"

    @property
    def client_key(self) -> Path:
        return self.ssh_dir / "id_lab"

    @property
    def known_hosts(self) -> Path:
        return self.ssh_dir / "known_hosts"

    def host_key_pub(self, host: str) -> Path:
        self.ip(host)
        return self.ssh_dir / f"hostkey-{host}.pub"

    def veth(self, host: str) -> str:
        """Host-side interface of the host's veth pair (on the bridge)."""
        self.ip(host)
        return "adl-" + host.rsplit("-", 1)[1]

    def pid_file(self, daemon: str, host: str | None = None) -> Path:
        return self.run_dir / (f"{daemon}-{host}.pid" if host else f"{daemon}.pid")

    def pid(self, daemon: str, host: str | None = None) -> int | None:
        """PID of a lab daemon (slurmctld, slurmdbd, slurmd, sshd) if it is alive."""
        try:
            pid = int(self.pid_file(daemon, host).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_alive(pid) else None

    # ------------------------------------------------------------------ health
    def problem(self) -> str | None:
        """None if the lab is up and usable, else why not (one line)."""
        if os.geteuid() != 0:
            return "not root: the lab (namespaces, node daemons, root's SSH key) needs root"
        for tool in ("sinfo", "srun", "ssh", "nsenter", "ip"):
            if shutil.which(tool) is None:
                return f"{tool} not installed (tests/cluster/up.sh installs it)"
        if not (self.run_dir / "up.ok").exists():
            return f"lab not up: no {self.run_dir / 'up.ok'} (run tests/cluster/up.sh)"
        if self.pid("slurmctld") is None:
            return "slurmctld is not running"
        for host in self.hosts:
            if not (NETNS_DIR / host).exists():
                return f"network namespace {host} is missing"
            if self.pid("sshd", host) is None:
                return f"sshd of {host} is not running"
        for node in self.nodes:
            if self.pid("slurmd", node) is None:
                return f"slurmd of {node} is not running (Lab.start_slurmd({node!r}))"
        try:
            states = self.node_states()
        except (LabError, subprocess.TimeoutExpired) as exc:
            return f"sinfo failed: {exc}"
        missing = set(self.nodes) - set(states)
        if missing:
            return f"sinfo does not list {', '.join(sorted(missing))}"
        bad = {n: s for n, s in states.items() if s.endswith("*")}
        if bad:
            return "nodes not responding: " + ", ".join(f"{n}={s}" for n, s in bad.items())
        return None

    def ensure_healthy(self, timeout: float = 30) -> None:
        """Repair what single-node tests break: links up, dead slurmd/sshd restarted, every
        node back to its normal state (idle, the drained one drained). Raises LabError."""
        for host in self.hosts:
            self.link_up(host)
            if self.pid("sshd", host) is None:
                self.start_sshd(host)
        for node in self.nodes:
            if self.pid("slurmd", node) is None:
                self.start_slurmd(node, wait=False)
        for node in self.nodes:  # responding again (no '*')
            self.wait_node_state(node, r"[a-z+]+", timeout)
        for node, state in self.node_states().items():
            if node == self.drained and not state.startswith(("drained", "draining")):
                self.run(
                    ["scontrol", "update", f"nodename={node}", "state=drain", f"reason={self.drain_reason}"],
                    check=True,
                )
            elif node != self.drained and re.fullmatch(r"down|drain(ed|ing)|fail(ing)?", state):
                self.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=True)
        for node in self.nodes:
            want = r"drained" if node == self.drained else r"idle|mixed|allocated|completing"
            self.wait_node_state(node, want, timeout)

    # ------------------------------------------------------------------ running things
    def run(
        self,
        argv: Sequence[str] | str,
        *,
        timeout: float = 60,
        check: bool = False,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command on this machine (text mode, output captured)."""
        if isinstance(argv, str):
            argv = ["sh", "-c", argv]
        proc = subprocess.run(
            list(argv),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            env=None if env is None else dict(env),
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and proc.returncode != 0:
            raise LabError(
                f"{shlex.join(argv)} exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()}"
            )
        return proc

    def ns_argv(self, host: str, argv: Sequence[str]) -> list[str]:
        """argv that runs ``argv`` inside the host's network + UTS namespace (nsenter --net, not
        ``ip netns exec``, which remounts /sys)."""
        self.ip(host)
        return [
            "nsenter",
            f"--net={NETNS_DIR / host}",
            f"--uts={UTS_DIR / host}",
            "--",
            *argv,
        ]

    def node_exec(
        self,
        node: str,
        argv: Sequence[str] | str,
        *,
        timeout: float = 60,
        check: bool = False,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside a lab host (node or login host): its IP, its host name.
        A string is run with ``sh -c``."""
        if isinstance(argv, str):
            argv = ["sh", "-c", argv]
        return self.run(self.ns_argv(node, argv), timeout=timeout, check=check, input=input, env=env)

    def ssh_argv(
        self, host: str, *command: str, jump: bool = False, options: Sequence[str] = ()
    ) -> list[str]:
        """OpenSSH argv using the lab's ssh_config (known_hosts checked); ``jump=True`` goes
        through the login host (ProxyJump)."""
        argv = ["ssh", "-F", str(self.ssh_config), *options]
        if jump:
            argv += ["-J", self.login]
        return [*argv, host, *command]

    def ssh(
        self, host: str, command: str, *, jump: bool = False, timeout: float = 30, options: Sequence[str] = ()
    ) -> subprocess.CompletedProcess[str]:
        return self.run(self.ssh_argv(host, command, jump=jump, options=options), timeout=timeout)

    # ------------------------------------------------------------------ Slurm view
    def node_states(self, timeout: float = 10) -> dict[str, str]:
        """node -> sinfo's %T state with its flag suffix (idle, idle*, down*, drained, mixed...)."""
        proc = self.run(["sinfo", "-h", "-N", "-o", "%N|%T"], timeout=timeout)
        if proc.returncode != 0:
            raise LabError(f"sinfo exited {proc.returncode}: {proc.stderr.strip()}")
        states: dict[str, str] = {}
        for line in proc.stdout.splitlines():
            name, _, state = line.partition("|")
            states[name.strip()] = state.strip()
        return states

    def node_state(self, node: str, timeout: float = 10) -> str:
        proc = self.run(["sinfo", "-h", "-N", "-n", node, "-o", "%T"], timeout=timeout)
        if proc.returncode != 0:
            raise LabError(f"sinfo exited {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""

    def wait_node_state(self, node: str, pattern: str, timeout: float = 30, interval: float = 0.1) -> str:
        """Poll sinfo until the node's %T state (e.g. ``idle``, ``idle*``, ``down*``) FULLY matches
        the regex ``pattern``; returns it. Raises TimeoutError naming the states seen."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while True:
            try:
                state = self.node_state(node)
            except (LabError, subprocess.TimeoutExpired) as exc:
                state = f"<{exc}>"
            if not seen or seen[-1] != state:
                seen.append(state)
            if rx.fullmatch(state):
                return state
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{node}: state did not match {pattern!r} within {timeout:g}s (seen: {' -> '.join(seen)})"
                )
            time.sleep(interval)

    # ------------------------------------------------------------------ breaking and repairing
    def _wait_dead(self, pid: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while pid_alive(pid):
            if time.monotonic() >= deadline:
                raise LabError(f"pid {pid} still alive after {timeout:g}s")
            time.sleep(0.02)

    def kill_slurmd(self, node: str, sig: int = signal.SIGKILL, timeout: float = 10) -> int:
        """Kill the node's slurmd (SIGKILL by default: a crash, no goodbye to slurmctld) and wait
        until it is gone. Job steps on the node (slurmstepd) keep running. Returns its PID."""
        self.ip(node)
        pid = self.pid("slurmd", node)
        if pid is None:
            raise LabError(f"slurmd of {node} is not running")
        os.kill(pid, sig)
        self._wait_dead(pid, timeout)
        return pid

    def start_slurmd(self, node: str, *, wait: bool = True, timeout: float = 30) -> int:
        """Start the node's slurmd (no-op if running); with ``wait``, until slurmctld no longer
        flags it as not responding. Returns its PID."""
        if node not in self.nodes:
            raise LabError(f"{node!r} is not a Slurm node of the lab")
        pid = self.pid("slurmd", node)
        if pid is None:
            (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
            self._start_daemon(node, ["/usr/sbin/slurmd", "-N", node], env=self.slurmd_env())
            pid = self._wait_pid("slurmd", node, timeout)
        if wait:
            self.wait_node_state(node, r"[a-z+]+", timeout)  # no '*' suffix: responding
        return pid

    def start_sshd(self, host: str, timeout: float = 10) -> int:
        pid = self.pid("sshd", host)
        if pid is None:
            self._start_daemon(
                host,
                [
                    "/usr/sbin/sshd",
                    "-f",
                    str(self.ssh_dir / f"sshd-{host}.conf"),
                    "-E",
                    str(self.log_dir / f"sshd-{host}.log"),
                ],
            )
            pid = self._wait_pid("sshd", host, timeout)
        return pid

    @property
    def enroot_bin(self) -> Path:
        """Where up.sh installs the enroot it builds (tests/cluster/pyxis.sh)."""
        return self.root / "containers" / "enroot" / "bin"

    def slurmd_env(self) -> dict[str, str]:
        """slurmd's environment: pyxis runs `enroot` from slurmd's PATH, so enroot's bin goes first (as up.sh)."""
        if not (self.enroot_bin / "enroot").exists():
            return dict(DAEMON_ENV)
        return {**DAEMON_ENV, "PATH": f"{self.enroot_bin}:{DAEMON_ENV['PATH']}"}

    def _start_daemon(self, host: str, argv: list[str], env: Mapping[str, str] = DAEMON_ENV) -> None:
        with open(self.log_dir / "daemons.out", "ab") as out:
            proc = subprocess.run(
                self.ns_argv(host, argv),
                check=False,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=dict(env),
                timeout=30,
            )
        if proc.returncode != 0:
            raise LabError(f"{shlex.join(argv)} in {host} exited {proc.returncode} (see {self.log_dir})")

    def _wait_pid(self, daemon: str, host: str, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (pid := self.pid(daemon, host)) is None:
            if time.monotonic() >= deadline:
                raise LabError(f"{daemon} of {host} did not start within {timeout:g}s (see {self.log_dir})")
            time.sleep(0.02)
        return pid

    def link_down(self, host: str) -> None:
        """Pull the host's cable: its veth on the bridge goes down. Packets are dropped silently
        (no RST): TCP connections hang until their timeouts, new connects time out."""
        self.run(["ip", "link", "set", self.veth(host), "down"], check=True, timeout=10)

    def link_up(self, host: str) -> None:
        self.run(["ip", "link", "set", self.veth(host), "up"], check=True, timeout=10)

    def link_is_up(self, host: str) -> bool:
        out = self.run(["ip", "-o", "link", "show", self.veth(host)], check=True, timeout=10).stdout
        return ",UP" in out or "<UP" in out

    def sshd_sessions(self, host: str) -> list[int]:
        """PIDs of the per-connection sshd processes of the host (the listener's sshd children
        and their sshd children), not the listener."""
        listener = self.pid("sshd", host)
        if listener is None:
            return []
        table = _proc_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _comm) in table.items():
            children.setdefault(ppid, []).append(pid)
        found: list[int] = []
        todo = list(children.get(listener, []))
        while todo:
            pid = todo.pop()
            if table.get(pid, (0, ""))[1] == "sshd":
                found.append(pid)
                todo.extend(children.get(pid, []))
        return sorted(found)

    def kill_sshd_sessions(self, host: str, sig: int = signal.SIGKILL, timeout: float = 10) -> list[int]:
        """Kill every SSH connection to the host from the server side (the listener stays, new
        connections work). The clients see the connection closed at once. Returns the PIDs."""
        pids = self.sshd_sessions(host)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        for pid in pids:
            self._wait_dead(pid, timeout)
        return pids

    def netns_pids(self, host: str) -> list[int]:
        """Live PIDs inside the host's network namespace (daemons, job steps, SSH sessions)."""
        out = self.run(["ip", "netns", "pids", host], timeout=10).stdout
        return [int(p) for p in out.split() if pid_alive(int(p))]

    # ------------------------------------------------------------------ lifecycle
    def up(self, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return self.run([str(UP_SH)], timeout=timeout, env={**os.environ, "LAB": str(self.root)})

    def down(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.run([str(DOWN_SH)], timeout=timeout, env={**os.environ, "LAB": str(self.root)})
