"""Steady load through a run's router while an action runs on it (issue 38: zero failed requests): `concurrency`
threads each sending completions one after the other until stopped, every answer counted. For the action tests
and bench/actions.py."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field


@dataclass
class Load:
    url: str  # the router's base URL
    model: str
    concurrency: int = 8
    max_tokens: int = 16
    timeout: float = 60.0
    ok: int = 0
    failed: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for i in range(self.concurrency):
            t = threading.Thread(target=self._client, name=f"load-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout + 5)

    def wait_for(self, n: int, timeout: float = 30.0) -> None:
        """Until `n` requests answered (the load is really flowing)."""
        deadline = time.monotonic() + timeout
        while self.ok < n:
            assert time.monotonic() < deadline, f"only {self.ok} requests answered in {timeout}s: {self.failed[:3]}"
            time.sleep(0.05)

    def _client(self) -> None:
        body = json.dumps({"model": self.model, "prompt": "Tell me about the weather", "max_tokens": self.max_tokens,
                           "temperature": 0}).encode()
        while not self._stop.is_set():
            req = urllib.request.Request(f"{self.url}/v1/completions", body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    data = json.loads(r.read())
                if not (data.get("choices") or [{}])[0].get("text"):
                    raise ValueError(f"an answer without text: {str(data)[:200]}")
                with self._lock:
                    self.ok += 1
            except urllib.error.HTTPError as e:
                with self._lock:
                    self.failed.append(f"HTTP {e.code}: {e.read()[:200]!r}")
            except Exception as e:
                with self._lock:
                    self.failed.append(f"{type(e).__name__}: {e}")
