"""A whole launch as a bash script an operator can read, keep and run by hand.

Secret-looking values are never written: the script reads them from the environment it runs in.
"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

from ..config.secrets import is_secret
from .commands import ProcessSpec, shell_line
from .lint import Assessment


def _secret_refs(p: ProcessSpec) -> list[str]:
    return sorted(k for k in p.all_env() if is_secret(k))


def export_script(a: Assessment, now: datetime | None = None) -> str:
    """The launch as bash: every process started in the background with its log, in rank order."""
    if a.plan is None:
        raise ValueError("no plan: fix the findings first")
    now = now or datetime.now(UTC)
    plan = a.plan
    lines = [
        "#!/usr/bin/env bash",
        f"# atomdeck launch script: recipe {a.recipe.name} on cluster {a.cluster.name} ({plan.shape})",
        f"# generated {now.strftime('%Y-%m-%d %H:%M:%S UTC')}; router on {plan.router.node} :{plan.router.port};"
        f" clients ask for model {shlex.quote(a.recipe.model.client_name)}",
        "set -euo pipefail",
        'LOGS=${LOGS:-./logs}; mkdir -p "$LOGS"',
    ]
    if a.cluster.launcher == "slurm":
        lines.append(': "${JOBID:?set JOBID to the Slurm allocation '
                     '(sbatch --parsable ... --wrap \'sleep infinity\')}"')
    secrets = sorted({k for p in a.processes for k in _secret_refs(p)})
    for k in secrets:
        lines.append(f': "${{{k}:?export {k} before running this script}}"')
    for f in a.findings:
        lines.append(f"# {f.severity}: {f.rule}: {f.message}")
    lines.append("")
    for p in a.processes:
        lines.append(f"# {p.name} on {p.node} ({p.host}), ports {' '.join(map(str, p.ports))}")
        lines.append(f'{_command(p)} > "$LOGS/{p.name}.log" 2>&1 &')
        lines.append(f"echo \"started {p.name} (pid $!)\"")
    lines += ["", "wait"]
    return "\n".join(lines) + "\n"


def _command(p: ProcessSpec) -> str:
    """shlex.join of the launch argv, except that `K=V` for a secret K becomes `K="${K}"`: the shell
    fills it in at run time, so the value is never written down."""
    env = p.all_env()
    out = []
    for token in p.launch_argv:
        k = token.split("=", 1)[0] if "=" in token else ""
        if k and is_secret(k) and k in env and token == f"{k}={env[k]}":
            out.append(f'{k}="${{{k}}}"')
        else:
            out.append(shell_line([token]))
    return " ".join(out)


def plan_json(a: Assessment) -> dict:
    procs = [p.redacted() for p in a.processes]
    return {
        "recipe": a.recipe.name,
        "cluster": a.cluster.name,
        "shape": a.plan.shape if a.plan else None,
        "processes": [{"name": p.name, "role": p.role, "node": p.node, "host": p.host, "argv": p.argv,
                       "env": p.all_env(), "launch_argv": p.launch_argv, "ports": p.ports} for p in procs],
        "barrier": [{"node": c.node, "host": c.host, "port": c.port, "role": c.role, "kind": c.kind}
                    for c in (a.plan.barrier if a.plan else ())],
        "findings": [f.to_json() for f in a.findings],
    }
