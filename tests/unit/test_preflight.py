"""Pre-flight: the node script's output turned into findings that name the node."""

from __future__ import annotations

import subprocess
import time

import pytest
from atomdeck.core.config.errors import PreflightError
from atomdeck.core.remote.preflight import SCRIPT, NodeCheck, findings_from, model_host_path, parse

from .helpers import LAB, lab_assess


def test_script_runs_here_and_reports_busy_ports(tmp_path):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    port = s.getsockname()[1]
    try:
        out = subprocess.run(["sh", "-c", SCRIPT, "pf", f"{port} 1", str(tmp_path), "true"], capture_output=True,
                             text=True, timeout=20).stdout
    finally:
        s.close()
    r = parse(out)
    assert r["preflight"] == "done" and r["model"] == "present" and r["runtime"] == "ok"
    assert r["busy_ports"].split() == [str(port)]
    assert r["nic"] in ("none", "mlx5", "ionic", "bnxt_re")


def test_findings_name_the_node_and_the_problem():
    ch = NodeCheck("g02", [8020], "/it-share/data/DeepSeek-V4-Pro", "x")
    ch.result = parse("preflight=done\nmodel=missing\nbusy_ports= 8020\nruntime=missing docker: the Docker daemon "
                      "is not reachable\ngpu_json={\"card0\": {\"GPU Memory Allocated (VRAM%)\": \"37\"}, "
                      "\"card1\": {\"GPU Memory Allocated (VRAM%)\": \"3\"}}\nnic=ionic\n")
    got = {f.rule: f.message for f in findings_from(ch, "/models/DeepSeek-V4-Pro")}
    assert got == {
        "preflight-model": "model path /it-share/data/DeepSeek-V4-Pro is missing on g02",
        "preflight-ports": "port(s) 8020 already in use on g02",
        "preflight-runtime": "the worker's runtime cannot start on g02: docker: the Docker daemon is not reachable",
        "preflight-gpu": "1/2 GPUs on g02 already hold VRAM (GPU 0; up to 37%, by rocm-smi): another job, or a "
                         "leftover process",
    }
    assert findings_from(NodeCheck("g03", [], "", ""), "m")[0].rule == "preflight"  # no output at all


def test_the_script_names_other_runs_on_this_node_not_its_own_nor_another_network_namespaces():
    """A process carrying another run's marker in this network namespace is named; this launch's own run, and a
    process in another network namespace (the lab's nodes share one process table), are not."""
    env = {"PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen(["sleep", "60"], env={**env, "ATOMDECK_RUN": mark})
             for mark in ("other-run:decode-0", "other-run:prefill-0", "this-run:@node")]
    procs.append(subprocess.Popen(["unshare", "--net", "sleep", "60"], env={**env, "ATOMDECK_RUN": "apart-run:x"}))
    try:
        time.sleep(0.3)  # (unshare has made its namespace and run sleep)
        out = subprocess.run(["sh", "-c", SCRIPT, "pf", "", "", "", "", "this-run"], capture_output=True, text=True,
                             timeout=20).stdout
    finally:
        for p in procs:
            p.kill()
            p.wait()
    named = parse(out)["atomdeck_runs"].split()
    assert "other-run" in named and named.count("other-run") == 1, named
    assert "this-run" not in named and "apart-run" not in named, named
    ch = NodeCheck("g02", [], "", "")
    ch.result = parse("preflight=done\natomdeck_runs= r1 r2 r3 r4\n")
    (f,) = findings_from(ch, "m")
    assert (f.rule, f.node, f.key) == ("preflight-busy", "g02", "--nodes")
    assert f.message == ("processes of another atomdeck run are running on g02: r1, r2, r3 and 1 more (launched from "
                         "another machine or state directory)")

def test_model_path_maps_to_the_nodes_model_dir_for_containers():
    a = lab_assess(cluster="name: c\nlauncher: slurm\ncontainer: {runtime: docker}\n"
                           "model_dirs: [{pattern: 'mia1*', path: /it-share/data}]\n",
                   model="/models/DeepSeek-V4-Pro")
    assert model_host_path(a.plan, "mia1-p01-g01") == "/it-share/data/DeepSeek-V4-Pro"
    b = lab_assess(model="/models/DeepSeek-V4-Pro")
    assert model_host_path(b.plan, "mia1-p01-g01") == "/models/DeepSeek-V4-Pro"
    c = lab_assess()
    assert model_host_path(c.plan, "mia1-p01-g01") == ""  # a hub id is not a path to check


def test_the_nodes_own_address_is_picked_by_interface_subnet_nodeaddr_or_first():
    from atomdeck.core.config.cluster import NodeIp
    from atomdeck.core.remote.preflight import pick_node_ip

    result = {"preflight": "done", "ips": "192.168.1.5 10.20.0.7 fd00::7",
              "ifaddrs": "lo=127.0.0.1 eno1=192.168.1.5 ens5np0=10.20.0.7 ens5np0=fd00::7 ens5np0=fe80::1"}
    ch = NodeCheck("g01", [], node_addr="mia1-p01-g01")
    ch.result = result
    assert pick_node_ip(ch, NodeIp(interface="ens*"))[0] == "10.20.0.7"
    assert pick_node_ip(ch, NodeIp(subnet="10.20.0.0/16"))[0] == "10.20.0.7"
    assert pick_node_ip(ch, NodeIp(subnet="fd00::/64"))[0] == "fd00::7"
    assert pick_node_ip(ch, NodeIp())[0] == "192.168.1.5"  # NodeAddr is a name: first of hostname -I
    ch.node_addr = "10.20.0.7"
    assert pick_node_ip(ch, NodeIp()) == ("10.20.0.7", "10.20.0.7 (its NodeAddr)")
    assert pick_node_ip(ch, NodeIp(interface="ib*")) == (
        None, "it has 192.168.1.5 on eno1, 10.20.0.7 on ens5np0, fd00::7 on ens5np0")
    ch.result = {"preflight": "done", "ips": "10.1.2.3"}  # no `ip` on the node
    assert pick_node_ip(ch, NodeIp(subnet="10.0.0.0/8"))[0] == "10.1.2.3"


def test_the_script_reports_this_machines_addresses():
    out = parse(subprocess.run(["sh", "-c", SCRIPT, "x", "", "", ""], capture_output=True, text=True).stdout)
    assert "ips" in out and "ifaddrs" in out and "lo=127.0.0.1" in out["ifaddrs"]


def test_inside_the_image_findings_mooncake_dir_open_files_and_rdma_devices():
    from atomdeck.core.remote.preflight import image_findings

    ch = NodeCheck("g01", [], mooncake_dirs=["/opt/x/mooncake"], rdma=True, nofile=65536)
    ch.result = {"mooncake_missing": " /opt/x/mooncake", "nofile": "1024 4096", "ib_dev": "no"}
    got = {f.rule: (f.key, f.message) for f in image_findings(ch)}
    assert got == {
        "preflight-mooncake": ("env.LD_LIBRARY_PATH",
                               "LD_LIBRARY_PATH names /opt/x/mooncake for Mooncake, but g01 has no such directory"),
        "preflight-nofile": ("cluster", "the open-files limit on g01 is 1024 (at most 4096); Mooncake needs 65536 "
                                        "and atomdeck can raise it only up to the hard limit"),
        "preflight-rdma": ("mooncake.protocol", "the KV transfer is RDMA but g01 has no /dev/infiniband")}
    ch.result = {"mooncake_missing": "", "nofile": "1024 unlimited", "ib_dev": "yes"}
    assert image_findings(ch) == []


def test_the_supervisor_raises_the_open_files_limit_for_mooncake(tmp_path):
    import resource
    import sys

    from atomdeck.core.launch.base import SUPERVISOR

    out = tmp_path / "nofile"
    code = f"import resource; open({str(out)!r}, 'w').write(str(resource.getrlimit(resource.RLIMIT_NOFILE)[0]))"
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    want = 65536 if hard == resource.RLIM_INFINITY or hard >= 65536 else hard  # up to the hard limit
    p = subprocess.run(["sh", "-c", SUPERVISOR, "atomdeck:t:x", str(tmp_path / "exit"), sys.executable, "-c", code],
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)), timeout=30)
    assert p.returncode == 0 and out.read_text() == str(want) != "1024"


def test_the_wrapper_model_of_the_open_files_limit():
    from atomdeck.core.remote.preflight import wrapper_nofile

    assert wrapper_nofile("1024", "20000") == 20000  # 65536 refused: up to the hard limit
    assert wrapper_nofile("1024", "1048576") == 65536 and wrapper_nofile("1024", "unlimited") == 65536
    assert wrapper_nofile("200000", "1048576") == 200000 and wrapper_nofile("unlimited", "unlimited") is None
    ch = NodeCheck("g01", [], nofile=100000)
    ch.result = {"nofile": "1024 1048576"}
    (f,) = __import__("atomdeck.core.remote.preflight", fromlist=["x"]).image_findings(ch)
    assert (f.key, f.message) == ("nofile", "the open-files limit on g01 is 1024; atomdeck's wrapper raises it to "
                                            "65536, but the cluster's nofile asks for 100000")


def _docker_shim_env(tmp_path, monkeypatch):
    from atomdeck.sim import SHIM_DIR

    monkeypatch.setenv("PATH", f"{SHIM_DIR / 'docker'}:{__import__('os').environ['PATH']}")
    monkeypatch.setenv("ATOMSIM_DOCKER_IMAGES", str(tmp_path / "images"))
    root = tmp_path / "images" / "rocm_atom_v1" / "rootfs"
    (root / "opt" / "venv" / "mooncake").mkdir(parents=True)


def test_inside_the_image_runs_once_per_image_through_docker(tmp_path, monkeypatch):
    """Issue 17.10: with a container, the Mooncake directory and the open-files limit are checked in the image
    (the simulator's docker shim: only the image's files are visible) with the engine's own --ulimit flags."""
    import asyncio

    from atomdeck.core.remote.preflight import image_check_findings, image_checks_for, run_checks
    from atomdeck.core.remote.shell import Result

    _docker_shim_env(tmp_path, monkeypatch)
    on_host = tmp_path / "host" / "mooncake"
    on_host.mkdir(parents=True)
    cluster = LAB + "container: {runtime: docker, extra_args: [--ulimit, 'nofile=8192:8192']}\nnofile: 8192\n"
    env = f"env: {{LD_LIBRARY_PATH: '/opt/venv/mooncake:{on_host}'}}\nmooncake: {{protocol: tcp}}\n"
    a = lab_assess("image: rocm/atom:v1\n" + env, cluster=cluster)
    (ch,) = image_checks_for(a.plan, a.processes)  # prefill and decode share one image and one set of flags
    assert ch.ulimits == ["nofile=1048576:1048576", "nofile=8192:8192"] and ch.nofile == 8192
    calls = []

    async def here(node, argv):  # the node is this machine: run the command for real
        calls.append(argv)
        p = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.PIPE)
        out, err = await p.communicate()
        return Result(argv, p.returncode, out.decode(), err.decode())

    with pytest.raises(PreflightError) as e:
        asyncio.run(run_checks(a.plan, a.processes, here))
    got = {(f.rule, f.message) for f in e.value.findings if f.rule in ("preflight-mooncake", "preflight-nofile")}
    assert got == {("preflight-mooncake", f"LD_LIBRARY_PATH names {on_host} for Mooncake, but image rocm/atom:v1 "
                                          "has no such directory")}
    assert sum(c[:2] == ["docker", "run"] for c in calls) == 1
    ch.result = parse(subprocess.run(ch.command(), capture_output=True, text=True, timeout=60).stdout)
    assert ch.result["nofile"] == "8192 8192" and ch.result["mooncake_missing"] == str(on_host)
    ok = lab_assess("image: rocm/atom:v1\nenv: {LD_LIBRARY_PATH: /opt/venv/mooncake}\nmooncake: {protocol: tcp}\n",
                    cluster=cluster)
    (good,) = image_checks_for(ok.plan, ok.processes)
    good.result = parse(subprocess.run(good.command(), capture_output=True, text=True, timeout=60).stdout)
    assert image_check_findings(good) == []
    needy = lab_assess("image: rocm/atom:v1\nmooncake: {protocol: tcp}\n", cluster=cluster.replace("8192\n", "9000\n"))
    (low,) = image_checks_for(needy.plan, needy.processes)
    low.result = parse(subprocess.run(low.command(), capture_output=True, text=True, timeout=60).stdout)
    assert [f.message for f in image_check_findings(low)] == [
        "the open-files limit inside image rocm/atom:v1 is 8192 on mia1-p01-g01 (docker run --ulimit "
        "nofile=1048576:1048576 --ulimit nofile=8192:8192); Mooncake needs 9000"]


def test_busy_gpus_refuse_the_node_by_amd_smis_memory_numbers():
    """amd-smi's metric JSON (tests/data/smi, from amdsmi 24.7's source): a GPU at 90 % VRAM refuses the node."""
    from pathlib import Path

    metric = (Path(__file__).resolve().parent.parent / "data" / "smi" / "amd-smi-24.7-metric.json").read_text()
    ch = NodeCheck("g04", [], "", "")
    ch.result = parse("preflight=done\ngpu_tool=amd-smi\ngpu_json=" + metric.replace("\n", "") + "\n")
    (f,) = findings_from(ch, "m")
    assert f.rule == "preflight-gpu" and f.node == "g04"
    assert f.message == ("1/1 GPUs on g04 already hold VRAM (up to 90%, 259 GB, by amd-smi): another job, "
                         "or a leftover process")


def test_the_script_reads_the_simulated_amd_smi_and_a_held_gpu_refuses_the_node(tmp_path):
    """The pre-flight script itself, with the simulator's amd-smi first on its path: a process holding 100 GiB on
    GPUs 2 and 3 (another job) makes the node refuse; without it the node passes."""
    from atomdeck.core.config.paths import sim_shim_dir

    shim = sim_shim_dir()
    env = {"PATH": "/usr/bin:/bin", "ATOMSIM_GPU_DIR": str(tmp_path), "ATOMSIM_NODE_IP": "127.0.41.1",
           "PYTHONPATH": str(shim)}

    def findings():
        out = subprocess.run(["sh", "-c", SCRIPT, "pf", "", "", "", "", "run", "", str(shim / "bin")], env=env,
                             capture_output=True, text=True, timeout=30).stdout
        ch = NodeCheck("n1", [], "", "")
        ch.result = parse(out)
        assert ch.result["gpu_tool"] == "amd-smi", out
        return [f.message for f in findings_from(ch, "m") if f.rule == "preflight-gpu"]

    assert findings() == []
    hog = subprocess.Popen(["python3", "-c", "import atomsim_boot; atomsim_boot.ensure(); import sys; "
                            "from atomdeck.sim.gpus import hold_main; sys.exit(hold_main(sys.argv[1:]))",
                            "--gpus", "2-3", "--gb", "100"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "holding"
        assert findings() == ["2/8 GPUs on n1 already hold VRAM (GPU 2, 3; up to 35%, 100 GB, by amd-smi): another "
                              "job, or a leftover process"]
    finally:
        hog.kill()
        hog.wait()
