"""An agent process and raw HTTP GETs for the resource tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time

from .paths import ROOT
from .patience import hang_guard


class Process:
    """A child process whose stderr is collected line by line; `port` from its first port=N line."""

    def __init__(self, cmd: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
        env["PYTHONPATH"] = str(ROOT / "agent")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port = 0
        deadline = time.monotonic() + hang_guard(30)  # a hang guard (`patience`)
        while not self.port and time.monotonic() < deadline and self.proc.poll() is None:
            for line in list(self.lines):
                if m := re.search(r"\bport=(\d+)", line):
                    self.port = int(m.group(1))
            time.sleep(0.05)
        assert self.port, "did not start:\n" + "\n".join(self.lines[-20:])

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(hang_guard(20))
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(5)


def get(port: int, path: str = "/metrics", timeout: float = 5.0) -> tuple[int, bytes]:
    """(status, body) of one GET from 127.0.0.1; (0, b"") when no answer came in time. `timeout` is
    how long an answer usually takes; the deadline is a hang guard (`patience`)."""
    timeout = hang_guard(timeout)
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while (chunk := s.recv(65536)) and time.monotonic() < deadline:
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body
    except (OSError, ValueError, IndexError):
        return 0, b""
