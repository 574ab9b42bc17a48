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


class LoginHost(_Strict):
    """The host that runs Slurm commands and fronts the nodes (ProxyJump); none = run them here."""

    host: Annotated[str, Field(min_length=1)]
    user: str | None = None
    port: int = Field(22, ge=1, le=65535)
    jump: str | None = Field(None, description="a further jump host, user@host[:port]")
    ssh_config: str | None = Field(None, description="OpenSSH config file; default ~/.ssh/config")
    known_hosts: str | None = Field(None, description="known_hosts file; default ~/.ssh/known_hosts")
    identity: str | None = None


class SshSpec(_Strict):
    """How atomdeck reaches nodes over SSH (launcher ssh, and probes through the login host)."""

    user: str | None = None
    port: int = Field(22, ge=1, le=65535)
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
    """How to find the IP that other nodes (and the router) use to reach a node."""

    method: Literal["nodeaddr", "name", "static"] = "nodeaddr"


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
