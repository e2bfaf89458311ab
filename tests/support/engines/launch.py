"""Start an engine stand-in (`vllm_server.py`, `sglang_server.py`) as its own process."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from support.patience import hang_guard

HERE = Path(__file__).resolve().parent


class Engine:
    """A running stand-in: `url`, `alive()`, `state()`; `close()` ends it."""

    def __init__(self, script: str, *args: str, start_timeout_s: float = 30.0) -> None:
        start_timeout_s = hang_guard(start_timeout_s)
        self.args = [sys.executable, str(HERE / script), *args]
        env = {**os.environ, "PYTHONPATH": str(HERE)}
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + start_timeout_s
        line = b""
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            if sel.select(timeout=0.1):
                chunk = os.read(self.proc.stdout.fileno(), 256)
                if not chunk:
                    break
                line += chunk
        sel.close()
        if not line.startswith(b"PORT "):
            self.close()
            raise RuntimeError(f"stand-in {script} did not start: {line!r} {self.stderr()}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_exit(self, timeout_s: float = 5.0) -> int | None:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/_standin/state", timeout=5) as resp:
            doc: dict[str, Any] = json.load(resp)
        return doc

    def traffic(self) -> None:
        req = urllib.request.Request(self.url + "/_standin/traffic", data=b"", method="POST")
        urllib.request.urlopen(req, timeout=5).close()

    def post(self, path: str, body: dict[str, Any] | None = None) -> int:
        """A request as a person would send it (curl): the HTTP status."""
        data = json.dumps(body).encode() if body is not None else b""
        req = urllib.request.Request(
            self.url + path, data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()
