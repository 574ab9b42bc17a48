"""The engine's own parser, before launch: every flag atomdeck renders is checked against what the program
that will run accepts, read from its `--help` on one chosen node (inside the image when the cluster uses one).

An older ATOM rejects a hyphenated `--kv-cache-dtype` that a newer one accepts; finding out means a failed
launch minutes into an allocation. Accepted flags are cached by image (the same image answers the same), so
`--help` runs once per image; without an image it runs at every launch (what is installed may change).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..config.errors import PreflightError
from ..config.paths import state_dir
from ..config.recipe import flag_of, normalize_flag
from ..design.commands import ProcessSpec
from ..design.container import image_of
from ..design.findings import Finding
from ..design.plan import Plan
from .shell import Result

# a flag as help texts print it: argparse `--kv_cache_dtype {bf16,fp8}`, `-tp TP`, `--[no-]x`, clap `--prefill <URL>`
_FLAG = re.compile(r"(?<![\w-])(-{1,2}[A-Za-z][A-Za-z0-9_.-]*)")


def program_of(argv: list[str]) -> list[str]:
    """The program part of an engine command: `python3 -m MODULE` or the words before the first flag."""
    if len(argv) >= 3 and argv[1] == "-m":
        return argv[:3]
    out = []
    for a in argv:
        if a.startswith("-"):
            break
        out.append(a)
    return out


def flags_in(argv: list[str]) -> list[str]:
    """The flags an engine command passes (`--x=1` counts as `--x`; negative numbers are values)."""
    out = []
    for a in argv[len(program_of(argv)):]:
        if a.startswith("-") and len(a) > 1 and not re.fullmatch(r"-\d[\d.e+-]*", a):
            out.append(a.split("=", 1)[0])
    return out


def accepted_flags(help_text: str) -> set[str]:
    flags = set(_FLAG.findall(help_text))
    for name in re.findall(r"--\[no-\]([A-Za-z][A-Za-z0-9_.-]*)", help_text):
        flags |= {"--" + name, "--no-" + name}
    return flags


def help_command(plan: Plan, spec: ProcessSpec) -> list[str]:
    """The program's `--help`, run the way the process will run: in its image, or with its environment. With
    pyxis the step's --container-* options lead (the launcher's srun takes them: the same named container)."""
    prog = program_of(spec.argv)
    runtime = plan.cluster.container.runtime
    if runtime in ("docker", "podman") and plan.recipe.image:
        return [runtime, "run", "--rm", "--entrypoint", "", image_of(plan), *prog, "--help"]
    wrapper = spec.inner[:len(spec.inner) - len(spec.argv)] if spec.inner[-len(spec.argv):] == spec.argv else []
    return [*spec.step_options, *wrapper, *prog, "--help"]


def _cache_path(name: str = "engine-flags") -> Path:
    return state_dir() / f"{name}.json"


def cache_load(name: str = "engine-flags") -> dict:
    """A per-image cache in the state directory (`engine-flags`: accepted flags; `image-checks`: pre-flight)."""
    try:
        data = json.loads(_cache_path(name).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def cache_save(entries: dict, name: str = "engine-flags") -> None:
    path = _cache_path(name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**cache_load(name), **entries}, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a cache that cannot be written only costs a check next time


def _recipe_key(plan: Plan, spec: ProcessSpec, flag: str) -> str:
    """The recipe key a flag came from (`decode.args.kv-cache-dtype`), else what decides the program."""
    r = plan.recipe
    spec_args = r.router.args if spec.role == "router" else r.role(spec.role).args
    section = "router" if spec.role == "router" else ("aggregate" if spec.role == "worker" else spec.role)
    for key in spec_args:
        if flag_of(key) == flag:
            return f"{section}.args.{key}"
    return "image" if r.image else "engine"


def closest(flag: str, accepted: set[str]) -> str | None:
    """The accepted spelling nearest to `flag`: the same flag with `_`/`-` swapped first, else the closest."""
    same = [a for a in sorted(accepted) if normalize_flag(a) == normalize_flag(flag) and a.startswith("--")]
    if same:
        return same[0]
    near = difflib.get_close_matches(flag, sorted(accepted), n=1, cutoff=0.6)
    return near[0] if near else None


def unknown_flag_findings(plan: Plan, spec: ProcessSpec, accepted: set[str], where: str) -> list[Finding]:
    out = []
    prog = " ".join(program_of(spec.argv))
    for flag in dict.fromkeys(flags_in(spec.argv)):
        if flag in accepted:
            continue
        near = closest(flag, accepted)
        hint = f"did you mean {near}?" if near else "remove it"
        out.append(Finding("preflight-flag", "error",
                           f"{spec.name}: {flag} is not a flag of `{prog}` as {where} runs it ({hint})",
                           _recipe_key(plan, spec, flag), f"spell it {near}" if near else "remove it", spec.node))
    return out


async def check_engine_flags(plan: Plan, processes: list[ProcessSpec],
                             run_on: Callable[[str, list[str]], Awaitable[Result]]) -> dict[str, int]:
    """Run each distinct program's `--help` once (on the first chosen node; cached by image), then refuse the
    launch (PreflightError) naming every flag the program does not accept and its closest spelling. Returns
    how many flags each program accepts, by cache key (for the run's facts)."""
    image = image_of(plan) if plan.cluster.container.runtime != "none" and plan.recipe.image else None
    cache = cache_load() if image else {}
    node = plan.selection.all()[0]
    found: dict[str, set[str]] = {}
    fresh: dict[str, list[str]] = {}
    findings: list[Finding] = []
    for spec in processes:
        prog = " ".join(program_of(spec.argv))
        key = f"{image}|{prog}" if image else prog
        if key not in found:
            if key in cache:
                found[key] = set(cache[key])
            else:
                res = await run_on(node, help_command(plan, spec))
                text = res.stdout + "\n" + res.stderr
                flags = accepted_flags(text)
                if not res.ok or ("--help" not in flags and "-h" not in flags):
                    where = f"image {image}" if image else node
                    findings.append(Finding(
                        "preflight-help", "error",
                        f"`{prog} --help` did not answer on {where} (exit {res.rc}): "
                        f"{(res.stderr or res.stdout).strip()[-200:] or 'no output'}",
                        "image" if image else "engine", "check that the program is installed there", node))
                    found[key] = set()
                    continue
                found[key] = flags
                if image:
                    fresh[key] = sorted(flags)
        if found[key]:
            findings += unknown_flag_findings(plan, spec, found[key], f"image {image}" if image else node)
    if fresh:
        cache_save(fresh)
    if findings:
        raise PreflightError(findings)
    return {k: len(v) for k, v in found.items()}
