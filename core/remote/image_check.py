"""Pre-flight inside the engine's image: the image starts where the engine will run, and the Mooncake directory
and open-files limit the engine needs are there.

- docker / podman: `docker run` of the image with the engine's `--ulimit nofile` flags, once per image and flags
  (on the first node with a worker), cached by image: the same image answers the same.
- pyxis: an srun step with the node's own `--container-*` options on every node of the run, never cached. Each
  node imports the image itself (an enroot URI is pulled, a squashfs unpacked), which is what the run would do
  first; with a named container (container.pyxis.name) the run's steps then reuse what pre-flight created, and
  the launcher removes it if the launch does not go ahead. The open-files limit is the node's (enroot keeps the
  step's limits): the node check covers it.

A pull can take many minutes: each check may take container.pull_timeout_s, and run_checks says every
PROGRESS_S which are still running.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..design.commands import ProcessSpec
from ..design.container import image_of
from ..design.findings import Finding
from ..design.plan import Plan

PROGRESS_S = 15.0  # how often a long image check (a pull) says it is still running

# Run inside the image, as the engine would run there: $1 = Mooncake directories
IMAGE_SCRIPT = r'''mooncake=$1
echo "nofile=$(ulimit -n) $(ulimit -Hn)"
missing=
for d in $mooncake; do [ -d "$d" ] || missing="$missing $d"; done
echo "mooncake_missing=$missing"
echo "preflight=done"
'''


def is_file_image(image: str) -> bool:
    """pyxis takes an image starting with '.' or '/' as a squashfs file on the node (args.c, slurmstepd: `strspn(
    image, "./") > 0`), anything else as an enroot URI to import; apptainer takes a path the same way."""
    return image[:1] in (".", "/")


@dataclass
class ImageCheck:
    """IMAGE_SCRIPT in the engine's image on one node."""

    image: str
    node: str  # docker/podman: the first node with a worker of this image; pyxis: every node
    ulimits: list[str]  # docker/podman: the engine's `--ulimit nofile=...` values (then container.extra_args')
    mooncake_dirs: list[str]
    nofile: int  # what the engine needs inside (0: not checked inside: pyxis keeps the node's limits)
    runtime: str = "docker"
    step_options: list[str] = field(default_factory=list)  # pyxis: the node's srun --container-* options
    result: dict[str, str] = field(default_factory=dict)
    cached: bool = False

    @property
    def key(self) -> str:
        if self.runtime == "pyxis":
            return json.dumps(["pyxis", self.node, self.image, self.mooncake_dirs])
        base = [self.image, self.ulimits, self.mooncake_dirs]
        return json.dumps(base if self.runtime == "docker" else [self.runtime, *base])

    @property
    def cacheable(self) -> bool:
        return self.runtime != "pyxis"

    def command(self) -> list[str]:
        script = ["sh", "-c", IMAGE_SCRIPT, "atomdeck-preflight", " ".join(self.mooncake_dirs)]
        if self.runtime == "pyxis":  # srun options: the launcher puts them in its srun step
            return [*self.step_options, *script]
        flags = [x for u in self.ulimits for x in ("--ulimit", u)]
        return [self.runtime, "run", "--rm", "--entrypoint", "", *flags, self.image, *script]

    def how(self) -> str:
        """How the check ran, for a message."""
        return f"pyxis (srun --container-image={self.image})" if self.runtime == "pyxis" else \
            f"`{self.runtime} run` of image {self.image}"


def image_checks_for(plan: Plan, processes: list[ProcessSpec], nofile: int) -> list[ImageCheck]:
    """What to check inside the image (containers only). docker/podman: one check per distinct image, nofile
    flags and Mooncake directories of the workers' `run` (ImageCheck.key). pyxis: one per node of the run."""
    runtime = plan.cluster.container.runtime
    if runtime not in ("docker", "podman", "pyxis") or not plan.recipe.image:
        return []
    image = image_of(plan)
    out: dict[str, ImageCheck] = {}
    for p in processes:
        dirs = sorted({d for d in p.env.get("LD_LIBRARY_PATH", "").split(":") if "mooncake" in d.lower()})
        if runtime == "pyxis":
            mine = [q for q in processes if q.node == p.node]
            dirs = sorted({d for q in mine if q.role != "router"
                           for d in q.env.get("LD_LIBRARY_PATH", "").split(":") if "mooncake" in d.lower()})
            ch = ImageCheck(image, p.node, [], dirs, 0, "pyxis", list(p.step_options))
        else:
            if p.role == "router" or not p.inner or p.inner[0] != runtime:
                continue
            ulimits = [v for k, v in zip(p.inner, p.inner[1:]) if k == "--ulimit" and v.startswith("nofile=")]
            ch = ImageCheck(image, p.node, ulimits, dirs, nofile, runtime)
        out.setdefault(ch.key, ch)
    return list(out.values())


def pyxis_error(text: str) -> str:
    """The line that says why pyxis could not start the container: enroot's own `[ERROR] ...` when pyxis printed
    its log, else pyxis's error, else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "[ERROR]" in ln:
            return ln[ln.index("[ERROR]") + len("[ERROR]"):].strip()
    for ln in lines:
        if "pyxis:" in ln and "error" in ln:
            return ln[ln.index("pyxis:"):]
    return lines[-1] if lines else "no output"


def image_check_findings(ch: ImageCheck) -> list[Finding]:
    r, n, img = ch.result, ch.node, ch.image
    if r.get("preflight") != "done":
        if ch.runtime == "pyxis":
            return [Finding("preflight-image", "error", f"pyxis could not start image {img} on {n}: "
                            f"{r.get('error', 'no output')}", "image",
                            "check the image path or URI (every node needs it) and that enroot can import it", n)]
        return [Finding("preflight-image", "error", f"`{ch.runtime} run` of image {img} did not run the pre-flight "
                        f"check on {n}: {r.get('error', 'no output')}", "image",
                        f"check that the image exists and that {ch.runtime} can run it on the node", n)]
    out = []
    for d in r.get("mooncake_missing", "").split():
        out.append(Finding("preflight-mooncake", "error",
                           f"LD_LIBRARY_PATH names {d} for Mooncake, but image {img} has no such directory",
                           "env.LD_LIBRARY_PATH", "point it at <site-packages>/mooncake of the image's Python", n))
    soft = r.get("nofile", "").partition(" ")[0]
    if ch.nofile and soft.isdigit() and int(soft) < ch.nofile:
        given = " ".join(f"--ulimit {u}" for u in ch.ulimits) or "no --ulimit nofile"
        out.append(Finding("preflight-nofile", "error",
                           f"the open-files limit inside image {img} is {soft} on {n} ({ch.runtime} run {given}); "
                           f"Mooncake needs {ch.nofile}",
                           "container.extra_args", f"pass --ulimit nofile={ch.nofile}:{ch.nofile} to {ch.runtime}",
                           n))
    return out
