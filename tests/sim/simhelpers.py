"""Helpers for the simulator tests: spawn the production command lines, clean up process groups.

Each test module uses its own loopback block (127.0.2X.Y) so runs cannot collide.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "sim" / "shim"
MODEL = "deepseek-ai/DeepSeek-V4-Pro"

# atomdeck.sim, installed or straight from the checkout (the shims' own bootstrap).
sys.path.insert(0, str(SHIM))
import atomsim_boot

atomsim_boot.ensure()


def assert_in_order(text: str, needles: list[str]) -> None:
    """Every needle appears in ``text``, each after the previous one."""
    pos = 0
    for needle in needles:
        found = text.find(needle, pos)
        assert found >= 0, f"{needle!r} missing after position {pos}:\n{text[-4000:]}"
        pos = found + len(needle)


def worker_argv(port: int, role: str | None, ip: str, *extra: str, tp: int = 8, handshake: int = 6301) -> list[str]:
    """The worker command atomdeck generates (InferenceX flags, srt-slurm's kv-transfer-config)."""
    argv = ["python3", "-m", "atom.entrypoints.openai_server", "--model", MODEL, "--host", "0.0.0.0",
            "--server-port", str(port), "-tp", str(tp), "--trust-remote-code", "--kv_cache_dtype", "fp8",
            "--block-size", "16", "--no-enable_prefix_caching", *extra]
    if role:
        cfg = {"kv_role": role, "kv_connector": "mooncake", "proxy_ip": ip, "handshake_port": handshake,
               "protocol": "tcp"}
        argv += ["--kv-transfer-config", json.dumps(cfg, separators=(",", ":"))]
    return argv


def router_argv(port: int, prefills: list[str], decodes: list[str], *extra: str) -> list[str]:
    """InferenceX's AToMesh command."""
    argv = ["atomesh", "launch", "--host", "0.0.0.0", "--port", str(port), "--pd-disaggregation"]
    for url in prefills:
        argv += ["--prefill", url]
    for url in decodes:
        argv += ["--decode", url]
    return argv + ["--policy", "random", "--backend", "atom", "--log-level", "info", "--disable-health-check",
                   "--disable-circuit-breaker", "--prometheus-port", "29100", *extra]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_line(self, needle: str, timeout: float = 15.0) -> str:
        """Wait until ``needle`` appears in the log; return the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if needle in text:
                return text
            if self.popen.poll() is not None:
                time.sleep(0.1)
                text = self.text()
                if needle in text:
                    return text
                raise AssertionError(f"{self.name} exited {self.popen.returncode} before {needle!r}:\n{text[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"{self.name}: {needle!r} not seen in {timeout}s:\n{self.text()[-3000:]}")

    def wait_exit(self, timeout: float = 15.0) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} still running after {timeout}s:\n{self.text()[-3000:]}") from None

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def rss_kb(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0


class Spawner:
    """Starts processes in their own session with the shims on the path; kills leftovers."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[Proc] = []

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(SHIM / "bin"), os.path.dirname(sys.executable), env.get("PATH", "")])
        env["PYTHONPATH"] = str(SHIM)
        env["PYTHONUNBUFFERED"] = "1"
        for key in [k for k in env if k.startswith("ATOMSIM_")]:
            del env[key]
        env.pop("ATOM_HOST_IP", None)
        env["ATOMSIM_SPEED"] = "0"
        env.update(extra)
        return env

    def start(self, name: str, argv: list[str], **env: str) -> Proc:
        log = self.tmp / f"{name}.log"
        handle = log.open("wb")
        popen = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=self.env(**env),
                                 start_new_session=True, cwd=self.tmp)
        handle.close()
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def worker(self, name: str, ip: str, port: int, role: str | None, *extra: str, tp: int = 8,
               **env: str) -> Proc:
        return self.start(name, worker_argv(port, role, ip, *extra, tp=tp),
                          ATOMSIM_NODE_IP=ip, ATOM_HOST_IP=ip, **env)

    def router(self, name: str, ip: str, port: int, prefills: list[str], decodes: list[str], *extra: str,
               **env: str) -> Proc:
        return self.start(name, router_argv(port, prefills, decodes, *extra), ATOMSIM_NODE_IP=ip, **env)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                try:
                    os.killpg(proc.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.popen.wait(5)
            except subprocess.TimeoutExpired:
                pass


def http(method: str, url: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def get_json(url: str, timeout: float = 10.0):
    status, body = http("GET", url, timeout=timeout)
    return status, json.loads(body)


def wait_http(url: str, timeout: float = 15.0, proc: Proc | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http("GET", url, timeout=2)[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if proc is not None and proc.popen.poll() is not None:
            raise AssertionError(f"{proc.name} exited {proc.popen.returncode}:\n{proc.text()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"{url} not ready in {timeout}s")


def port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def sse_events(raw: bytes) -> list:
    """Parse an SSE body into JSON events (and the literal "[DONE]")."""
    events = []
    for line in raw.decode().splitlines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events
