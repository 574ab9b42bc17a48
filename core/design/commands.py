"""Plan -> the exact processes to run: engine argv, env, and the container and launcher wrappers.

Everything here is a list of strings. A shell string is made only at the edge, by `shell_line`
(shlex.join), never by formatting.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from ..config.catalog import Catalog, ModelEntry
from ..config.secrets import redact_env, redact_tokens
from ..engines import engine as get_engine
from ..engines import frontend as get_frontend
from . import container as ct
from .plan import Endpoint, Plan


@dataclass(frozen=True)
class SimRuntime:
    """What the simulator needs on the path (demo and lab clusters only)."""

    shim_dir: str
    python_bin: str  # directory of the Python that has atomdeck installed
    base_path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    speed: float = 1.0
    mounts: tuple[str, ...] = ()  # host directories the simulator needs inside a container (its Python, the code)

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
    step_options: list[str] = field(default_factory=list)  # srun options of the Slurm step it runs in (pyxis)

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


def container_name(plan: Plan, ctx: LaunchContext, proc: str) -> str:
    """InferenceX's container_<engine>_<user>_<model>_<jobid>, plus the process (one container each)."""
    model = plan.recipe.model.path.rstrip("/").rsplit("/", 1)[-1]
    return ct.slug(f"container_{plan.recipe.engine}_{ctx.user}_{model}_{ctx.job_id or ctx.run_id}_{proc}")


RDMA_MOUNTS = ct.RDMA_MOUNTS


def node_nic(plan: Plan, ctx: LaunchContext, node: str) -> str:
    """The RDMA NIC type of a node: what pre-flight found there, else the cluster's rdma_nic when it names one."""
    return ctx.nic.get(node) or (plan.cluster.rdma_nic if plan.cluster.rdma_nic not in ("auto", "none") else "")


def docker_wrap(plan: Plan, ctx: LaunchContext, node: str, name: str, argv: list[str],
                env: dict[str, str]) -> list[str]:
    """`docker run` as InferenceX's job.slurm runs it: host network and IPC, GPUs, RDMA, model dir at /models."""
    return ct.docker_run(plan, "docker", node, name, node_nic(plan, ctx, node), argv, env, _sim_mounts(ctx))


def _sim_mounts(ctx: LaunchContext) -> tuple[str, ...]:
    return ctx.sim.mounts if ctx.sim else ()


def env_wrap(argv: list[str], env: dict[str, str]) -> list[str]:
    return ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else list(argv)


def launcher_wrap(plan: Plan, ctx: LaunchContext, node: str, name: str, log: str, inner: list[str],
                  step_options: list[str] | None = None) -> list[str]:
    """The command as the launcher runs it. On Slurm, `step_options` (pyxis's --container-*) go to srun."""
    kind = plan.cluster.launcher
    if kind == "slurm":
        return ["srun", "--jobid", ctx.job_id or "$JOBID", "--overlap", "-w", node, "-N1", "-n1",
                f"--job-name={name}", f"--output={log}", "--kill-on-bad-exit=1", *(step_options or []), *inner]
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
    step: list[str] = []
    runtime = plan.cluster.container.runtime
    nic = node_nic(plan, ctx, node)
    if runtime in ("docker", "podman"):
        cname = container_name(plan, ctx, name)
        inner = ct.docker_run(plan, runtime, node, cname, nic, argv, {**env, **runtime_env}, _sim_mounts(ctx))
    elif runtime == "apptainer":
        inner = ct.apptainer_exec(plan, node, nic, argv, {**env, **runtime_env}, _sim_mounts(ctx))
    else:
        inner = env_wrap(argv, {**env, **runtime_env})
        if runtime == "pyxis":  # one container per node and run: the node's processes share its step
            cname = ct.pyxis_name(plan, node, ctx.run_id, ctx.job_id, ctx.user)
            step = ct.pyxis_options(plan, node, nic, cname, _sim_mounts(ctx))
    return ProcessSpec(name=name, role=role, node=node, host=host, argv=argv, env=env, runtime_env=runtime_env,
                       launch_argv=launcher_wrap(plan, ctx, node, name, log, inner, step), inner=inner, ports=ports,
                       log=log, container=cname, conflicts=list(conflicts), step_options=step)


def render(plan: Plan, catalog: Catalog | None, ctx: LaunchContext | None = None) -> list[ProcessSpec]:
    """Every process of the plan, workers in rank order, then the router."""
    ctx = ctx or LaunchContext()
    model = _model_entry(plan, catalog)
    procs = [worker_process(plan, ep, model, ctx) for ep in plan.endpoints]
    procs.append(router_process(plan, ctx))
    return procs
