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


RUNTIMES = ("none", "docker", "podman", "pyxis", "apptainer")


def mount_problem(m: str) -> str:
    """Why a mount SRC:DST[:FLAGS] cannot be passed to every runtime ('' if it can): pyxis separates mounts with
    ',' (flags are joined with '+'), and its source must be an absolute or relative path (args.c add_mount)."""
    src, sep, rest = m.partition(":")
    dst = rest.split(":", 1)[0] if sep else src
    if not src or not dst or "," in m or not dst.startswith("/") or not src.startswith(("/", ".")):
        return (f"mount {m!r}: write SRC:DST[:FLAGS] with absolute paths and no comma, flags joined by '+' "
                "(e.g. /data/models:/models:ro)")
    return ""


def _mount_check(v: list[str]) -> list[str]:
    for m in v:
        if mount_problem(m):
            raise ValueError(mount_problem(m))
    return v


class PyxisSpec(_Strict):
    """pyxis (NVIDIA's SPANK plugin: srun runs the step in an enroot container) as the operator sets it.
    Each key becomes the srun option of pyxis's args.c named beside it (docs: README, "Containers")."""

    name: str | None = Field("atomdeck_{run}_{node}",
                             description="--container-name, a template of {run} {job} {node} {user}: the run's "
                                         "container on each node, removed and verified gone at teardown; null: "
                                         "unnamed (pyxis removes it when the step ends)")
    writable: bool | None = Field(None, description="true: --container-writable, false: --container-readonly, "
                                                    "null: the site's default (enroot's: read-only)")
    mount_home: bool = Field(False, description="false: --no-container-mount-home (as srt-slurm passes)")
    remap_root: bool | None = Field(None, description="true: --container-remap-root, false: "
                                                      "--no-container-remap-root, null: the site's default")
    entrypoint: bool = Field(False, description="false: --no-container-entrypoint (as srt-slurm passes)")
    env: list[str] = Field(default_factory=list,
                           description="--container-env: names of host variables that override the image's")
    enroot: str = Field("enroot", min_length=1, description="the enroot command on the nodes (teardown lists and "
                                                            "removes the run's containers with it)")
    runtime_path: str = Field("/run/pyxis", description="pyxis's runtime_path (plugstack.conf): imported images "
                                                        "are kept there while a step runs")

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not name.isidentifier():
                raise ValueError(f"container.pyxis.env: {name!r} is not a variable name")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is None:
            return v
        import string

        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(v) if f is not None}
        except ValueError as e:
            raise ValueError(f"container.pyxis.name {v!r}: {e}") from None
        unknown = fields - {"run", "job", "node", "user"}
        if unknown:
            raise ValueError(f"container.pyxis.name {v!r}: unknown field(s) {', '.join(sorted(unknown))}; "
                             "use {run} {job} {node} {user}")
        if not fields & {"run", "job"}:
            raise ValueError(f"container.pyxis.name {v!r} names no run: a later run would reuse this run's "
                             "container (pyxis skips the import); put {run} or {job} in it")
        return v


class ContainerSpec(_Strict):
    """How the engine and the router run in containers: the runtime, the cluster's default mounts, the image
    aliases (recipe `image:` may name one, as srt-slurm's `containers:` aliases)."""

    runtime: Literal["none", "docker", "podman", "pyxis", "apptainer"] = "none"
    images: dict[str, str] = Field(default_factory=dict,
                                   description="alias -> image path or URI (a recipe's image: may be an alias)")
    mounts: list[str] = Field(default_factory=list,
                              description="default mounts SRC:DST[:FLAGS] on every process, before the recipe's "
                                          "container_mounts (pyxis --container-mounts, docker/podman -v, "
                                          "apptainer --bind)")
    workdir: str | None = Field(None, description="working directory inside the container")
    devices: list[str] = Field(default_factory=lambda: ["/dev/dri", "/dev/kfd"],
                               description="docker/podman --device: the GPUs (and /dev/infiniband for an RDMA KV "
                                           "transfer); apptainer's --rocm and enroot's hooks find them themselves")
    shm_size: str = Field("128G", description="docker --shm-size (podman refuses it with --ipc host: not given)")
    mount_path: str = "/models"
    extra_args: list[str] = Field(default_factory=list)
    pull_timeout_s: float = Field(1800, gt=0, description="pre-flight's image check may pull the image: "
                                                          "how long it may take")
    pyxis: PyxisSpec = Field(default_factory=PyxisSpec)

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        return _mount_check(v)

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"container.workdir {v!r} must be an absolute path inside the container")
        return v

    def resolve_image(self, image: str | None) -> str | None:
        """The recipe's image, an alias of `images` replaced by what it names."""
        return self.images.get(image, image) if image else image


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
