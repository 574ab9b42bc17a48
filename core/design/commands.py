"""Plan -> the exact processes to run: engine argv, env, and the container and launcher wrappers.

Everything here is a list of strings. A shell string is made only at the edge, by `shell_line`
(shlex.join), never by formatting.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from ..config.catalog import Catalog, ModelEntry
from ..config.secrets import redact_env, redact_tokens
from ..engines import engine as get_engine
from ..engines import frontend as get_frontend
from .plan import Endpoint, Plan


@dataclass(frozen=True)
class SimRuntime:
    """What the simulator needs on the path (demo and lab clusters only)."""

    shim_dir: str
    python_bin: str  # directory of the Python that has atomdeck installed
    base_path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    speed: float = 1.0

    def env(self, host: str) -> dict[str, str]:
        return {
            "PYTHONPATH": self.shim_dir,
            "PATH": f"{self.shim_dir}/bin:{self.python_bin}:{self.base_path}",
            "ATOMSIM_SPEED": f"{self.speed:g}",
            "ATOMSIM_NODE_IP": host,
        }


@dataclass(frozen=True)
class LaunchContext:
    """Facts known only at launch time. Defaults give a readable offline rendering."""

    run_id: str = "RUN"
    job_id: str | None = None  # Slurm allocation; None offline ("$JOBID" is shown)
    user: str = "atomdeck"
    log_dir: str = "logs"
    nic: Mapping[str, str] = field(default_factory=dict)  # node -> RDMA NIC type found by pre-flight
    sim: SimRuntime | None = None
    login: str | None = None  # ssh: jump host for the display form of the command


@dataclass(frozen=True)
class ProcessSpec:
    name: str  # "prefill-0", "decode-0", "router"
    role: str  # prefill | decode | worker | router
    node: str
    host: str
    argv: list[str]  # the engine's own command
    env: dict[str, str]  # the production environment
    runtime_env: dict[str, str]  # added by atomdeck's runtime (simulator paths), not part of production
    launch_argv: list[str]  # the full wrapped command
    inner: list[str]  # the command on the node: container or env wrapper + argv (launch_argv minus srun/ssh)
    ports: list[int]  # ports this process listens on
    log: str  # log file path
    container: str | None = None
    conflicts: list[tuple[str, str]] = field(default_factory=list)  # owned flags others tried to set

    def all_env(self) -> dict[str, str]:
        return {**self.env, **self.runtime_env}

    def redacted(self) -> ProcessSpec:
        """A copy safe to show or store: secret-looking env values masked everywhere."""
        env = self.all_env()
        return replace(self, env=redact_env(self.env), runtime_env=redact_env(self.runtime_env),
                       argv=redact_tokens(self.argv, env), launch_argv=redact_tokens(self.launch_argv, env),
                       inner=redact_tokens(self.inner, env))

    def to_json(self) -> dict:
        d = asdict(self)
        d["conflicts"] = [list(c) for c in self.conflicts]
        return d


def shell_line(argv: list[str]) -> str:
    """The one place a command becomes a shell string."""
    return shlex.join(argv)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def container_name(plan: Plan, ctx: LaunchContext, proc: str) -> str:
    """InferenceX's container_<engine>_<user>_<model>_<jobid>, plus the process (one container each)."""
    model = plan.recipe.model.path.rstrip("/").rsplit("/", 1)[-1]
    return _slug(f"container_{plan.recipe.engine}_{ctx.user}_{model}_{ctx.job_id or ctx.run_id}_{proc}")


# Host RDMA userspace bind-mounted for NICs whose provider the image lacks (InferenceX job.slurm);
# mlx5 needs none. Pre-flight reads the NIC type from /sys/class/infiniband on each node.
RDMA_MOUNTS = {
    "ionic": [("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/lib/x86_64-linux-gnu/libibverbs.so.1"),
              ("/usr/lib/x86_64-linux-gnu/libionic.so.1", "/usr/lib/x86_64-linux-gnu/libionic.so.1"),
              ("/usr/lib/x86_64-linux-gnu/libibverbs/libionic-rdmav34.so",
               "/usr/lib/x86_64-linux-gnu/libibverbs/libionic-rdmav34.so"),
              ("/etc/libibverbs.d", "/etc/libibverbs.d:ro")],
    "bnxt_re": [("/usr/lib/x86_64-linux-gnu/libibverbs.so.1", "/lib/x86_64-linux-gnu/libibverbs.so.1"),
                ("/usr/local/lib/libbnxt_re-rdmav34.so", "/usr/lib/x86_64-linux-gnu/libibverbs/libbnxt_re-rdmav34.so"),
                ("/usr/local/lib/libbnxt_re.so", "/usr/lib/x86_64-linux-gnu/libbnxt_re.so"),
                ("/etc/libibverbs.d", "/etc/libibverbs.d:ro")],
    "mlx5": [],
}


def docker_wrap(plan: Plan, ctx: LaunchContext, node: str, name: str, argv: list[str],
                env: dict[str, str]) -> list[str]:
    """`docker run` as InferenceX's job.slurm runs it: host network and IPC, GPUs, RDMA, model dir at /models."""
    c = plan.cluster.container
    rdma = plan.recipe.mode == "disagg" and plan.recipe.mooncake.protocol in (None, "rdma")
    out = ["docker", "run", "--rm", "--init", "--stop-timeout", "10", "--name", name,
           "--device", "/dev/dri", "--device", "/dev/kfd", *(["--device", "/dev/infiniband"] if rdma else []),
           "--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "--ulimit", "nofile=1048576:1048576",
           "--network", "host", "--ipc", "host", "--group-add", "video", "--cap-add", "SYS_PTRACE",
           "--security-opt", "seccomp=unconfined", "--privileged", "-v", "/sys:/sys", "--shm-size", c.shm_size]
    model_dir = plan.cluster.model_dir(node)
    if model_dir:
        out += ["-v", f"{model_dir}:{c.mount_path}"]
    nic = ctx.nic.get(node) or (plan.cluster.rdma_nic if plan.cluster.rdma_nic not in ("auto", "none") else "")
    for host_path, target in RDMA_MOUNTS.get(nic, []):
        out += ["-v", f"{host_path}:{target}"]
    out += list(c.extra_args)
    for k, v in env.items():
        out += ["-e", f"{k}={v}"]
    out += ["--entrypoint", "", plan.recipe.image or "IMAGE"]
    return out + argv


def env_wrap(argv: list[str], env: dict[str, str]) -> list[str]:
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)


def launcher_wrap(plan: Plan, ctx: LaunchContext, node: str, name: str, log: str, inner: list[str]) -> list[str]:
    kind = plan.cluster.launcher
    if kind == "slurm":
        return ["srun", "--jobid", ctx.job_id or "$JOBID", "--overlap", "-w", node, "-N1", "-n1",
                f"--job-name={name}", f"--output={log}", "--kill-on-bad-exit=1", *inner]
    if kind == "ssh":
        hop = ["-J", ctx.login] if ctx.login else []
        return ["ssh", *hop, node, "--", shell_line(inner)]
    return inner


def _model_entry(plan: Plan, catalog: Catalog | None) -> ModelEntry:
    from ..config.catalog import GENERIC

    return catalog.lookup(plan.recipe)[1] if catalog else GENERIC


def worker_process(plan: Plan, ep: Endpoint, model: ModelEntry, ctx: LaunchContext) -> ProcessSpec:
    eng = get_engine(plan.recipe.engine)
    opts = eng.options(plan, ep, model)
    argv = [*eng.command, *opts.tokens()]
    env = eng.env(plan, ep, model)
    ports = [ep.http_port, *ep.handshake_ports]
    if ep.engine_port is not None:
        ports.append(ep.engine_port)
    return _wrap(plan, ctx, ep.name, ep.role, ep.node, ep.host, argv, env, ports, opts.conflicts)


def router_process(plan: Plan, ctx: LaunchContext) -> ProcessSpec:
    fe = get_frontend(plan.recipe.router.type)
    opts = fe.options(plan)
    r = plan.router
    return _wrap(plan, ctx, "router", "router", r.node, r.host, [*fe.command, *opts.tokens()], fe.env(plan),
                 [r.port, r.prometheus_port], opts.conflicts)


def _wrap(plan: Plan, ctx: LaunchContext, name: str, role: str, node: str, host: str, argv: list[str],
          env: dict[str, str], ports: list[int], conflicts: list) -> ProcessSpec:
    runtime_env = ctx.sim.env(host) if ctx.sim else {}
    log = f"{ctx.log_dir}/{name}.log"
    cname = None
    if plan.cluster.container.runtime == "docker":
        cname = container_name(plan, ctx, name)
        inner = docker_wrap(plan, ctx, node, cname, argv, {**env, **runtime_env})
    else:
        inner = env_wrap(argv, {**env, **runtime_env})
    return ProcessSpec(name=name, role=role, node=node, host=host, argv=argv, env=env, runtime_env=runtime_env,
                       launch_argv=launcher_wrap(plan, ctx, node, name, log, inner), inner=inner, ports=ports, log=log,
                       container=cname, conflicts=list(conflicts))


def render(plan: Plan, catalog: Catalog | None, ctx: LaunchContext | None = None) -> list[ProcessSpec]:
    """Every process of the plan, workers in rank order, then the router."""
    ctx = ctx or LaunchContext()
    model = _model_entry(plan, catalog)
    procs = [worker_process(plan, ep, model, ctx) for ep in plan.endpoints]
    procs.append(router_process(plan, ctx))
    return procs
