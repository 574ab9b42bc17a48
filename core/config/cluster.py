"""Cluster: where and how processes run (launcher, login host, nodes, exclusions), from YAML."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..design.inventory import Node
from .errors import ConfigIssue
from .recipe import _env_check
from .yamlio import YamlDoc, parse_yaml, read_yaml, validate


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def parse_ssh_address(spec: str) -> tuple[str | None, str, int | None]:
    """`[user@]host[:port]`, `[user@][v6addr]:port` or `ssh://[user@]host[:port]` -> (user, host, port).

    Raises ValueError saying what to write: a bad port is caught when the cluster file loads, not at
    connect time."""
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://"):].rstrip("/")
    elif "://" in text:
        raise ValueError(f"{spec!r} is not an SSH address; write [user@]host[:port] or ssh://[user@]host[:port]")
    user, _, hostport = text.rpartition("@")
    port_text: str | None = None
    if hostport.startswith("["):
        host, close, rest = hostport[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise ValueError(f"cannot read {spec!r}; write an IPv6 address as [addr]:port")
        port_text = rest[1:] if rest else None
    elif hostport.count(":") == 1:
        host, port_text = hostport.split(":")
    else:
        host = hostport
    if not host or any(c.isspace() or c in "/@" for c in host) or "@" in user:
        raise ValueError(f"cannot read the SSH host in {spec!r}; write [user@]host[:port]")
    port: int | None = None
    if port_text is not None:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise ValueError(f"the port in {spec!r} must be a number from 1 to 65535, got {port_text!r}")
        port = int(port_text)
    return user or None, host, port


class LoginHost(_Strict):
    """The host that runs Slurm commands and fronts the nodes (ProxyJump); none = run them here."""

    host: Annotated[str, Field(min_length=1)]
    user: str | None = None
    port: int | None = Field(None, ge=1, le=65535, description="unset: the ssh config's Port, else 22")
    jump: str | None = Field(None, description="a further jump host, [user@]host[:port] or ssh://user@host:port")
    ssh_config: str | None = Field(None, description="OpenSSH config file; default ~/.ssh/config")
    known_hosts: str | None = Field(None, description="known_hosts file; default ~/.ssh/known_hosts")
    identity: str | None = None

    @field_validator("jump")
    @classmethod
    def _jump(cls, v: str | None) -> str | None:
        if v is not None:
            parse_ssh_address(v)
        return v


class SshSpec(_Strict):
    """How atomdeck reaches nodes over SSH (launcher ssh, and probes through the login host)."""

    user: str | None = None
    port: int | None = Field(None, ge=1, le=65535, description="unset: the ssh config's Port, else 22")
    via_login: bool = Field(True, description="jump through the login host to reach nodes")
    ssh_config: str | None = None
    known_hosts: str | None = None
    identity: str | None = None
    agent_forwarding: bool = False
    connect_timeout_s: float = Field(10, gt=0)
    keepalive_s: float = Field(15, gt=0)


class ExcludeRule(_Strict):
    node: Annotated[str, Field(min_length=1, description="node name or glob, e.g. mia1-p01-g37")]
    reason: Annotated[str, Field(min_length=1)]


class ModelDir(_Strict):
    pattern: Annotated[str, Field(min_length=1, description="host-name glob, e.g. mia1*")]
    path: Annotated[str, Field(min_length=1)]


class NodeIp(_Strict):
    """How to find the IP that other nodes (and the router) use to reach a node. Offline, `method` says
    where the plan's address comes from; at pre-flight each node is asked for its own addresses and one
    is picked: on `interface` (a name or glob, e.g. `ens*`), else in `subnet`, else the Slurm NodeAddr when
    the node has it, else the first of `hostname -I` (as InferenceX does). `static` keeps the cluster
    file's `addr` as written."""

    method: Literal["nodeaddr", "name", "static"] = "nodeaddr"
    interface: str | None = Field(None, min_length=1, description="pick the address on this interface")
    subnet: str | None = Field(None, description="pick the address in this network, e.g. 10.77.0.0/24")

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, v: str | None) -> str | None:
        if v is not None:
            import ipaddress

            try:
                ipaddress.ip_network(v, strict=False)
            except ValueError:
                raise ValueError(f"{v!r} is not a network; write it as ADDRESS/PREFIX, e.g. 10.0.0.0/16") from None
        return v


class ContainerSpec(_Strict):
    runtime: Literal["none", "docker"] = "none"
    shm_size: str = "128G"
    mount_path: str = "/models"
    extra_args: list[str] = Field(default_factory=list)


class StaticNode(_Strict):
    name: Annotated[str, Field(min_length=1)]
    addr: str | None = None
    gpus: int = Field(8, ge=0)
    state: str = "IDLE"
    reason: str = ""
    partition: str | None = None


class SimulatorSpec(_Strict):
    """Run the bundled ATOM/AToMesh simulator instead of the real programs (demo and lab)."""

    enabled: bool = False
    speed: float = Field(1.0, ge=0, description="startup pace: delays are divided by it; 0 = none")


class SlurmSpec(_Strict):
    time_limit: str = "08:00:00"
    job_name: str = "atomdeck"
    extra_sbatch: list[str] = Field(default_factory=list)
    run_root: str | None = Field(None, description="shared directory for step logs; default the run dir")


class Cluster(_Strict):
    name: Annotated[str, Field(min_length=1)]
    description: str = ""
    launcher: Literal["local", "ssh", "slurm"]
    login: LoginHost | None = None
    ssh: SshSpec = Field(default_factory=SshSpec)
    partition: str | None = None
    account: str | None = None
    gpus_per_node: int = Field(8, ge=1)
    node_ip: NodeIp = Field(default_factory=NodeIp)
    model_dirs: list[ModelDir] = Field(default_factory=list)
    container: ContainerSpec = Field(default_factory=ContainerSpec)
    rdma_nic: Literal["auto", "ionic", "bnxt_re", "mlx5", "none"] = "auto"
    nofile: int | None = Field(None, ge=1, description="the open-files limit (ulimit -n) the engine needs; "
                               "default 65536 (Mooncake, as InferenceX sets it), 4096 with the simulator")
    exclude: list[ExcludeRule] = Field(default_factory=list)
    nodes: list[StaticNode] = Field(default_factory=list)
    simulator: SimulatorSpec = Field(default_factory=SimulatorSpec)
    slurm: SlurmSpec = Field(default_factory=SlurmSpec)
    remote_dir: str = Field("/tmp/atomdeck", description="per-run directory root on nodes (ssh launcher)")
    env: dict[str, Any] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict) -> dict:
        return _env_check(v)

    def exclusion(self, node: str) -> ExcludeRule | None:
        """The first exclusion rule matching a node name, if any."""
        for rule in self.exclude:
            if fnmatch.fnmatchcase(node, rule.node):
                return rule
        return None

    def model_dir(self, node: str) -> str | None:
        for md in self.model_dirs:
            if fnmatch.fnmatchcase(node, md.pattern):
                return md.path
        return None

    def static_inventory(self) -> list[Node]:
        """Nodes listed in the cluster file (local and ssh clusters, or an offline slurm cluster)."""
        out = []
        for n in self.nodes:
            states = tuple(s for s in n.state.upper().replace("*", "+NOT_RESPONDING").split("+") if s)
            out.append(Node(name=n.name, addr=n.addr or n.name, states=states, gpus=n.gpus,
                            partitions=(n.partition or self.partition or "",) if (n.partition or self.partition)
                            else (), reason=n.reason, source="static"))
        return out


def cluster_issues(cluster: Cluster, source: str, doc: YamlDoc | None = None) -> list[ConfigIssue]:
    issues = []

    def add(path: tuple, msg: str) -> None:
        issues.append(ConfigIssue(source, ".".join(str(p) for p in path), msg,
                                  doc.line_of(path) if doc else None))

    if cluster.launcher in ("local", "ssh") and not cluster.nodes:
        add(("nodes",), f"a {cluster.launcher} cluster needs its nodes listed; add nodes: [{{name: ..., addr: ...}}]")
    seen: set[str] = set()
    for i, n in enumerate(cluster.nodes):
        if n.name in seen:
            add(("nodes", i, "name"), f"node {n.name} is listed twice; keep one")
        seen.add(n.name)
    if cluster.launcher == "local":
        for i, n in enumerate(cluster.nodes):
            if n.addr and not n.addr.startswith("127."):
                add(("nodes", i, "addr"), f"a local cluster simulates nodes on loopback; use 127.0.0.N, not {n.addr}")
    if cluster.container.runtime == "docker" and cluster.simulator.enabled:
        add(("container", "runtime"), "the simulator runs without containers; set container.runtime: none")
    return issues


def cluster_from_doc(doc: YamlDoc) -> Cluster:
    return validate(Cluster, doc, cluster_issues)


def load_cluster(path: Path | str) -> Cluster:
    return cluster_from_doc(read_yaml(Path(path)))


def parse_cluster(text: str, source: str = "<cluster>") -> Cluster:
    return cluster_from_doc(parse_yaml(text, source))
