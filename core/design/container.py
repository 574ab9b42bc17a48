"""Container runtimes around a process: the argv (docker, podman, apptainer) or the srun options (pyxis) that run
the engine or the router in its image. Pure functions of the plan; commands.py calls them.

- docker / podman: `docker run` as InferenceX's job.slurm runs it (host network and IPC, GPUs, RDMA, model
  directory at container.mount_path), podman with the same options (podman's CLI takes docker's) but
  --shm-size, which podman 4.3 refuses with --ipc host (the host's /dev/shm is used).
- pyxis: the options of pyxis's args.c (NVIDIA/pyxis v0.24.0), given to the Slurm step that runs the node's
  processes: srun --container-image=... --container-mounts=... --container-name=... [...]. The command itself
  is unchanged (`env K=V... argv`), run inside the container.
- apptainer: `apptainer exec --rocm --bind SRC:DST[:ro] [--cwd DIR] IMAGE env K=V... argv`, the options of
  apptainer's cmd/internal/cli/action_flags.go (Debian has no apptainer: argv only, never run here).

Mounts everywhere are written SRC:DST[:FLAGS], FLAGS as pyxis writes them ("ro", "ro+rprivate": `+`
separates flags, since pyxis's `,` separates mounts); docker and podman get `,` in their place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..config.cluster import Cluster, mount_problem
from ..config.recipe import Recipe
from .findings import Finding
from .plan import Plan

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


@dataclass(frozen=True)
class Mount:
    src: str
    dst: str
    flags: str = ""  # pyxis's form: "ro", "ro+rprivate"

    @classmethod
    def parse(cls, text: str) -> Mount:
        src, _, rest = text.partition(":")
        dst, _, flags = rest.partition(":")
        return cls(src, dst or src, flags)

    def pyxis(self) -> str:
        return f"{self.src}:{self.dst}" + (f":{self.flags}" if self.flags else "")

    def docker(self) -> str:
        return f"{self.src}:{self.dst}" + (f":{self.flags.replace('+', ',')}" if self.flags else "")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def image_of(plan: Plan) -> str:
    """The recipe's image, an alias of the cluster's `container.images` resolved ("IMAGE" when none is set)."""
    return plan.cluster.container.resolve_image(plan.recipe.image) or "IMAGE"


def mounts(plan: Plan, node: str, nic: str, sim_mounts: tuple[str, ...] = ()) -> list[Mount]:
    """Every mount of a process on `node`, in order: the model directory at container.mount_path, the host RDMA
    libraries its NIC needs, the cluster's default mounts, the recipe's container_mounts, then what the
    simulator needs (read-only: its Python and the repository). A later mount of the same target is dropped."""
    c = plan.cluster.container
    out: list[Mount] = []
    model_dir = plan.cluster.model_dir(node)
    if model_dir:
        out.append(Mount(model_dir, c.mount_path))
    for host_path, target in RDMA_MOUNTS.get(nic, []):
        out.append(Mount.parse(f"{host_path}:{target}"))
    out += [Mount.parse(m) for m in (*c.mounts, *plan.recipe.container_mounts)]
    out += [Mount(p, p, "ro") for p in sim_mounts]
    seen: set[str] = set()
    keep = []
    for m in out:
        if m.dst not in seen:
            seen.add(m.dst)
            keep.append(m)
    return keep


def docker_run(plan: Plan, binary: str, node: str, name: str, nic: str, argv: list[str], env: dict[str, str],
               sim_mounts: tuple[str, ...] = ()) -> list[str]:
    """`docker run` (or `podman run`: the same options) as InferenceX's job.slurm runs it: host network and IPC,
    GPUs, RDMA, the mounts, the environment with -e, no entrypoint."""
    c = plan.cluster.container
    rdma = plan.recipe.mode == "disagg" and plan.recipe.mooncake.protocol in (None, "rdma")
    devices = [*c.devices, *(["/dev/infiniband"] if rdma else [])]
    out = [binary, "run", "--rm", "--init", "--stop-timeout", "10", "--name", name,
           *[x for d in devices for x in ("--device", d)],
           "--ulimit", "memlock=-1", "--ulimit", "stack=67108864", "--ulimit", "nofile=1048576:1048576",
           "--network", "host", "--ipc", "host", "--group-add", "video", "--cap-add", "SYS_PTRACE",
           "--security-opt", "seccomp=unconfined", "--privileged", "-v", "/sys:/sys"]
    if binary == "docker":  # podman 4.3: "cannot set shmsize when running in the {host } IPC Namespace"
        out += ["--shm-size", c.shm_size]
    for m in mounts(plan, node, nic, sim_mounts):
        out += ["-v", m.docker()]
    if c.workdir:
        out += ["-w", c.workdir]
    out += list(c.extra_args)
    for k, v in env.items():
        out += ["-e", f"{k}={v}"]
    out += ["--entrypoint", "", image_of(plan)]
    return out + argv


def pyxis_name(plan: Plan, node: str, run_id: str, job_id: str | None, user: str) -> str | None:
    """The run's container on `node` (--container-name), from container.pyxis.name; None: unnamed."""
    template = plan.cluster.container.pyxis.name
    if template is None:
        return None
    return slug(template.format(run=run_id, job=job_id or "JOBID", node=node, user=user))


def pyxis_options(plan: Plan, node: str, nic: str, name: str | None, sim_mounts: tuple[str, ...] = ()) -> list[str]:
    """The srun options that run a step in the image through pyxis, in args.c's forms (`--opt=value`)."""
    c = plan.cluster.container
    px = c.pyxis
    out = [f"--container-image={image_of(plan)}"]
    ms = mounts(plan, node, nic, sim_mounts)
    if ms:
        out.append("--container-mounts=" + ",".join(m.pyxis() for m in ms))
    if c.workdir:
        out.append(f"--container-workdir={c.workdir}")
    if name:
        out.append(f"--container-name={name}")
    if px.writable is True:
        out.append("--container-writable")
    elif px.writable is False:
        out.append("--container-readonly")
    out.append("--container-mount-home" if px.mount_home else "--no-container-mount-home")
    if px.remap_root is not None:
        out.append("--container-remap-root" if px.remap_root else "--no-container-remap-root")
    out.append("--container-entrypoint" if px.entrypoint else "--no-container-entrypoint")
    if px.env:
        out.append("--container-env=" + ",".join(px.env))
    return out


def apptainer_exec(plan: Plan, node: str, nic: str, argv: list[str], env: dict[str, str],
                   sim_mounts: tuple[str, ...] = ()) -> list[str]:
    """`apptainer exec --rocm`: the GPUs, one --bind per mount (a comma inside one would split it), --cwd for
    the working directory; the environment as `env K=V` inside (apptainer's --env is a map flag whose
    values may not hold a comma). Host network and IPC are apptainer's defaults."""
    c = plan.cluster.container
    out = ["apptainer", "exec", "--rocm"]
    for m in mounts(plan, node, nic, sim_mounts):
        flags = m.flags.replace("+", ",")
        out += ["--bind", f"{m.src}:{m.dst}" + (f":{flags}" if flags else "")]
    if c.workdir:
        out += ["--cwd", c.workdir]
    out += list(c.extra_args)
    out.append(image_of(plan))
    if env:
        out += ["env", *(f"{k}={v}" for k, v in env.items())]
    return out + argv


def with_mount(options: list[str], path: str) -> list[str]:
    """pyxis options with `path` also mounted at its own path (the launcher's shared run directory), in the one
    --container-mounts option (pyxis takes the mounts of an srun in one comma-separated value)."""
    entry = f"{path}:{path}"
    out, done = [], False
    for o in options:
        if o.startswith("--container-mounts="):
            have = o.split("=", 1)[1].split(",")
            o = o if any(m.split(":")[1] == path for m in have if ":" in m) else f"{o},{entry}"
            done = True
        out.append(o)
    if not done:
        out.insert(1, f"--container-mounts={entry}")
    return out


def image_problem(image: str) -> str:
    """Why an image reference cannot work on the nodes ('' if it can): a squashfs file by a relative path
    (pyxis takes an image starting with '.' as a file relative to wherever the step starts, and one without
    '/' or '.' as a registry name: `img.sqsh` would be looked up in a registry)."""
    if image.endswith((".sqsh", ".squashfs", ".sif")) and not image.startswith("/") and "://" not in image:
        return f"image {image!r} is a file by a relative path"
    return ""


def container_findings(recipe: Recipe, cluster: Cluster) -> list[Finding]:
    """The container settings that cannot work, found before any plan: pyxis off Slurm, an image by a relative
    file path (the recipe's, or an alias's), a runtime without an image, a malformed recipe mount."""
    c = cluster.container
    out: list[Finding] = []
    if c.runtime == "pyxis" and cluster.launcher != "slurm":
        out.append(Finding("container-runtime", "error",
                           f"pyxis is a Slurm plugin (srun --container-*): cluster {cluster.name} launches with "
                           f"{cluster.launcher}, where nothing would read those options",
                           "cluster container.runtime", "set launcher: slurm, or container.runtime: docker or podman"))
    for alias, image in c.images.items():
        if image_problem(image):
            out.append(Finding("container-image", "error", f"{image_problem(image)} (alias {alias})",
                               f"cluster container.images.{alias}", "give the absolute path the nodes see"))
    if recipe.image and recipe.image not in c.images and image_problem(recipe.image):
        out.append(Finding("container-image", "error", image_problem(recipe.image), "image",
                           "give the absolute path the nodes see, or an alias of the cluster's container.images"))
    if c.runtime != "none" and not recipe.image:
        aliases = f" (aliases: {', '.join(sorted(c.images))})" if c.images else ""
        out.append(Finding("container-image", "warning",
                           f"cluster {cluster.name} runs the engine in {c.runtime} containers but the recipe names "
                           "no image: the commands say IMAGE", "image", f"set image: to a path, URI or alias{aliases}"))
    for i, m in enumerate(recipe.container_mounts):
        why = mount_problem(m)
        if why:
            out.append(Finding("container-mounts", "error", why, f"container_mounts.{i}",
                               "write SRC:DST[:FLAGS] with absolute paths, flags joined by '+' (e.g. /data:/data:ro)"))
    if recipe.container_mounts and c.runtime == "none":
        out.append(Finding("container-mounts", "warning",
                           f"container_mounts are set but cluster {cluster.name} runs no container: they are ignored",
                           "container_mounts", "remove them, or use a cluster with container.runtime set"))
    return out


def renamed(options: list[str], name: str) -> list[str]:
    """pyxis options with --container-name set to `name` (in its place)."""
    return [f"--container-name={name}" if o.startswith("--container-name=") else o for o in options]
