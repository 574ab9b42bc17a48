"""Capture real Slurm 22.05 output from the running lab into tests/cluster/captures/ (for parser
tests), in a healthy, a busy and a degraded moment, and write captures/INDEX.md.

    sudo .venv/bin/python tests/cluster/capture.py     # the lab must be up (tests/cluster/up.sh)

It breaks nodes on purpose (kills g04's slurmd, takes g03's link down) and repairs them at the
end. Job ids differ from run to run; everything else is stable up to times and PIDs."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.cluster.lab import Lab

OUT = Path(__file__).resolve().parent / "captures"
G01, G02, G03, G04 = "mia1-p01-g01", "mia1-p01-g02", "mia1-p01-g03", "mia1-p01-g04"
index: list[tuple[str, str, str]] = []


def cap(lab: Lab, name: str, argv: list[str], moment: str, *, stderr: bool = False) -> str:
    proc = lab.run(argv, timeout=60)
    text = proc.stdout + (proc.stderr if stderr else "")
    (OUT / name).write_text(text)
    index.append(
        (name, shlex.join(argv) + (f"  (exit {proc.returncode}, stdout+stderr)" if stderr else ""), moment)
    )
    return text


def job_state(lab: Lab, job: str) -> str:
    return lab.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()


def wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def sacct_final(lab: Lab, job: str) -> None:
    def done() -> bool:
        out = lab.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"]).stdout.strip()
        return bool(out) and not out.startswith(("PENDING", "RUNNING"))

    wait(done, 20, f"sacct final state of {job}")


def main() -> None:
    status = Lab.detect()
    if not status.ok:
        raise SystemExit(f"lab not usable: {status.reason}")
    lab = status.lab
    lab.ensure_healthy()
    OUT.mkdir(exist_ok=True)
    for f in OUT.glob("*.txt"):
        f.unlink()
    sinfo_custom = ["sinfo", "-N", "-h", "-o", "%N|%T|%G|%P|%E"]

    # ---- healthy, idle
    m = "healthy: 4 idle nodes, g37 drained, no jobs"
    cap(lab, "healthy-sinfo-N-custom.txt", sinfo_custom, m)
    cap(lab, "healthy-sinfo.txt", ["sinfo"], m)
    cap(lab, "healthy-scontrol-show-node-oneliner.txt", ["scontrol", "show", "node", "-o"], m)
    cap(lab, "healthy-scontrol-show-partition-oneliner.txt", ["scontrol", "show", "partition", "-o"], m)
    cap(lab, "healthy-squeue-empty.txt", ["squeue"], m)
    cap(lab, "srun-on-drained-node.txt", ["srun", "-w", lab.drained, "--immediate=2", "true"], m, stderr=True)

    # ---- busy: a holding job with an overlap step running
    hold = lab.run(
        [
            "sbatch",
            "--parsable",
            "-N2",
            "-w",
            f"{G01},{G02}",
            "-J",
            "atomdeck-hold",
            "-o",
            f"{lab.jobs_dir}/hold-%j.out",
            "--wrap",
            "sleep 600",
        ],
        check=True,
    ).stdout.strip()
    wait(lambda: job_state(lab, hold) == "RUNNING", 30, "holding job RUNNING")
    step = subprocess.Popen(
        ["srun", "--jobid", hold, "--overlap", "-w", G01, "-N1", "-n1", "-J", "prefill-0", "sleep", "600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait(lambda: f"{hold}.0" in lab.run(["squeue", "-s", "-h", "-o", "%i"]).stdout, 30, "step 0 running")
    m = f"busy: holding job {hold} (-N2 g01,g02, sleep 600) + overlap step {hold}.0 'prefill-0' on g01"
    cap(lab, "busy-sinfo-N-custom.txt", sinfo_custom, m)
    cap(lab, "busy-squeue-custom.txt", ["squeue", "-h", "-o", "%i|%T|%N|%j|%M|%R"], m)
    cap(lab, "busy-squeue-steps.txt", ["squeue", "-s"], m)
    cap(lab, "busy-squeue-steps-custom.txt", ["squeue", "-s", "-h", "-o", "%i|%j|%N|%M"], m)
    cap(lab, "busy-scontrol-show-job-oneliner.txt", ["scontrol", "show", "job", "-o", hold], m)
    cap(lab, "busy-scontrol-show-step-oneliner.txt", ["scontrol", "show", "step", "-o", f"{hold}.0"], m)
    # accounting lags slurmctld by 2-3 s: before that sacct shows the job PENDING (or as a
    # placeholder named "allocation" when a step record arrived first)
    wait(
        lambda: lab.run(["sacct", "-n", "-X", "-P", "-j", hold, "-o", "State"]).stdout.strip() == "RUNNING",
        20,
        "sacct to show the holding job RUNNING",
    )
    cap(
        lab,
        "busy-sacct-steps.txt",
        ["sacct", "-P", "-j", hold, "-o", "JobID,JobName,State,NodeList,ExitCode"],
        m,
    )

    # ---- degraded: g04's slurmd dies under a running job; g03 loses its link
    victim = lab.run(
        [
            "sbatch",
            "--parsable",
            "-N1",
            "-w",
            G04,
            "--no-requeue",
            "-J",
            "victim",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 600",
        ],
        check=True,
    ).stdout.strip()
    wait(lambda: job_state(lab, victim) == "RUNNING", 30, "victim job RUNNING")
    lab.kill_slurmd(G04, signal.SIGKILL)
    lab.link_down(G03)
    try:
        lab.wait_node_state(G04, r"[a-z]+\*", 30)
        lab.wait_node_state(G03, r"[a-z]+\*", 30)
        m = f"degraded: g04 slurmd killed while job {victim} runs on it (not responding, not yet DOWN); g03 link down"
        cap(lab, "notresp-sinfo-N-custom.txt", sinfo_custom, m)
        cap(lab, "notresp-sinfo.txt", ["sinfo"], m)
        cap(lab, "notresp-scontrol-show-node-oneliner.txt", ["scontrol", "show", "node", "-o"], m)
        cap(lab, "notresp-scontrol-show-node-g04.txt", ["scontrol", "show", "node", G04], m)
        # NB: sinfo %T may say `mixed*` for a while after the node went DOWN (job CPUs still held
        # while the job completes); scontrol's State=DOWN+NOT_RESPONDING is the truth.
        for node in (G03, G04):
            wait(
                lambda node=node: "State=DOWN" in lab.run(["scontrol", "show", "node", "-o", node]).stdout,
                30,
                f"{node} DOWN",
            )
        m = f"degraded: g04 and g03 DOWN (Not responding); job {victim} on g04 ended NODE_FAIL (--no-requeue)"
        wait(lambda: job_state(lab, victim) == "", 30, "victim job gone from squeue")
        sacct_final(lab, victim)
        cap(lab, "down-sinfo-N-custom.txt", sinfo_custom, m)
        cap(lab, "down-sinfo.txt", ["sinfo"], m)
        cap(lab, "down-scontrol-show-node-oneliner.txt", ["scontrol", "show", "node", "-o"], m)
        cap(lab, "down-squeue-custom.txt", ["squeue", "-h", "-o", "%i|%T|%N|%j|%M|%R"], m)
        cap(
            lab,
            "down-sacct-node-fail.txt",
            ["sacct", "-P", "-j", victim, "-o", "JobID,JobName,State,NodeList,ExitCode"],
            m,
        )
        cap(lab, "down-scontrol-show-job-node-fail.txt", ["scontrol", "show", "job", "-o", victim], m)
        cap(lab, "srun-on-down-node.txt", ["srun", "-w", G04, "--immediate=2", "true"], m, stderr=True)
    finally:
        lab.link_up(G03)
        lab.start_slurmd(G04, wait=False)

    # ---- cancelled
    lab.run(["scancel", hold], check=True)
    step.wait(timeout=30)
    wait(lambda: job_state(lab, hold) == "", 30, "holding job gone")
    sacct_final(lab, hold)
    time.sleep(1)
    m = f"after scancel of holding job {hold} (its step {hold}.0 was running)"
    cap(
        lab,
        "cancelled-sacct-steps.txt",
        ["sacct", "-P", "-j", hold, "-o", "JobID,JobName,State,NodeList,ExitCode"],
        m,
    )
    cap(lab, "cancelled-sacct-default.txt", ["sacct", "-j", hold], m)
    cap(lab, "cancelled-scontrol-show-job-oneliner.txt", ["scontrol", "show", "job", "-o", hold], m)

    lab.ensure_healthy()
    lines = [
        "# Real Slurm 22.05.8 output from the lab (tests/cluster/up.sh)",
        "",
        "Regenerate: `sudo .venv/bin/python tests/cluster/capture.py` (lab up). Nodes mia1-p01-g01..g04",
        f'(8 GRES GPUs each), {lab.drained} drained ("{lab.drain_reason}"), partition {lab.partition},',
        f"SlurmdTimeout={lab.slurmd_timeout}, MessageTimeout={lab.message_timeout}. Files hold stdout only unless marked.",
        "",
        "| file | command | moment |",
        "|---|---|---|",
    ]
    lines += [f"| `{n}` | `{c}` | {mo} |" for n, c, mo in index]
    (OUT / "INDEX.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {len(index)} captures to {OUT}")


if __name__ == "__main__":
    main()
