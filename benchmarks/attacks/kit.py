"""What every attack uses: the agent under attack, the normal client that scrapes it, the rows."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import resource
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from support.memcg import tree_pss_kb

ROOT = Path(__file__).resolve().parents[2]

LOOPBACK_ATTACKER = "127.0.0.2"
"""Attackers connect from here, the normal client from 127.0.0.1 (per-client fairness is by address)."""


@dataclass
class Row:
    attack: str
    scrape_p50_ms: float | None = None
    scrape_max_ms: float | None = None
    scrape_failed: int = 0
    scrapes: int = 0
    rss_mib: float = 0.0
    pss_mib: float = 0.0
    threads: int = 0
    fds: int = 0
    exit_code: int | str | None = None
    stop_s: float | None = None
    note: str = ""
    tracebacks: int = 0
    log_lines: int = 0


# --------------------------------------------------------------------------------------------- agent


class Agent:
    def __init__(
        self,
        args: list[str],
        agent_path: Path,
        *,
        nofile: int | None = None,
        env: dict[str, str] | None = None,
        cgroup_procs: Path | None = None,
    ) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ww-attack-"))
        (self.tmp / "traces").mkdir()
        cmd = [
            sys.executable,
            "-m",
            "warpwatch",
            "run",
            "--address",
            "0.0.0.0",
            "--port",
            "0",
            "--period",
            "60s",
            "--window",
            "1s",
            "--jitter",
            "0",
            *args,
        ]
        if not any(a == "--source" for a in args):
            cmd += ["--source", f"dir:{self.tmp / 'traces'}"]
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
        full_env["PYTHONPATH"] = str(agent_path)
        full_env.update(env or {})

        def limits() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            if cgroup_procs is not None:  # joined before exec: nothing of the agent runs outside it
                with open(cgroup_procs, "w") as fh:
                    fh.write(str(os.getpid()))

        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=full_env, preexec_fn=limits
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + 30
        self.port = 0
        while time.monotonic() < deadline and not self.port:
            for line in list(self.lines):
                m = re.search(r"event=listening .*port=(\d+)|\"event\": \"listening\".*\"port\": (\d+)", line)
                if m:
                    self.port = int(m.group(1) or m.group(2))
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        if not self.port:
            raise RuntimeError("agent did not start:\n" + "\n".join(self.lines[-20:]))

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def footprint(self) -> tuple[float, float, int, int]:
        """(RSS MiB of the agent, PSS MiB of its process tree, threads, fds) now."""
        pid = self.proc.pid
        rss = pss = 0.0
        threads = fds = 0
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Rss:"):
                    rss = int(line.split()[1]) / 1024
            pss = tree_pss_kb(pid) / 1024
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("Threads:"):
                    threads = int(line.split()[1])
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, pss, threads, fds

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> tuple[int | str, float]:
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc: int | str = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = f"hung>{timeout:g}s"
        self._reader.join(5)
        return rc, time.monotonic() - t0


# --------------------------------------------------------------------------------------------- measuring


def scrape_once(
    port: int, headers: dict[str, str] | None = None, timeout: float = 5.0, source: str | None = None
) -> tuple[int, float]:
    """(status or 0 on failure, seconds) of one GET /metrics to 127.0.0.1, from `source` (a
    loopback address: another client to the agent) or the default address."""
    t0 = time.monotonic()
    address = None if source is None else (source, 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=address) as s:
            lines = [
                "GET /metrics HTTP/1.1",
                "Host: x",
                "Connection: close",
                *(f"{k}: {v}" for k, v in (headers or {}).items()),
            ]
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError
        return int(data.split(b" ", 2)[1]), time.monotonic() - t0
    except (OSError, ValueError, IndexError):
        return 0, time.monotonic() - t0


@contextlib.contextmanager
def observe(
    agent: Agent, row: Row, headers: dict[str, str] | None = None, rss_cap: float | None = None
) -> Iterator[None]:
    """Scrape every 0.5 s and sample the footprint every 0.25 s while inside; an agent whose RSS
    or tree PSS goes above `rss_cap` MiB is killed (SIGKILL) and the note says so."""
    stop = threading.Event()
    times: list[float] = []

    def scraper() -> None:
        while not stop.is_set():
            status, seconds = scrape_once(agent.port, headers)
            row.scrapes += 1
            if status == 200:
                times.append(seconds)
            else:
                row.scrape_failed += 1
            stop.wait(0.5)

    def sampler() -> None:
        while not stop.is_set():
            rss, pss, threads, fds = agent.footprint()
            row.rss_mib, row.pss_mib = max(row.rss_mib, rss), max(row.pss_mib, pss)
            row.threads, row.fds = max(row.threads, threads), max(row.fds, fds)
            if rss_cap is not None and max(rss, pss) > rss_cap and agent.proc.poll() is None:
                agent.proc.kill()
                row.note = f"killed above --rss-cap {rss_cap:.0f} MiB; " + row.note
            stop.wait(0.25)

    workers = [threading.Thread(target=scraper, daemon=True), threading.Thread(target=sampler, daemon=True)]
    for w in workers:
        w.start()
    try:
        yield
    finally:
        stop.set()
        for w in workers:
            w.join(10)
        if times:
            row.scrape_p50_ms = round(statistics.median(times) * 1000, 1)
            row.scrape_max_ms = round(max(times) * 1000, 1)


def finish(agent: Agent, row: Row) -> Row:
    row.exit_code, stop_s = agent.stop()
    row.stop_s = round(stop_s, 2)
    row.tracebacks = sum(1 for line in agent.lines if line.startswith("Traceback"))
    row.log_lines = len(agent.lines)
    return row


def connect_many(port: int, n: int, payload: bytes = b"") -> list[socket.socket]:
    out = []
    for _ in range(n):
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK_ATTACKER, 0))
            s.settimeout(5)
            s.connect(("127.0.0.1", port))
            if payload:
                s.sendall(payload)
            out.append(s)
        except OSError:
            s.close()
    return out


def close_all(socks: list[socket.socket], reset: bool = False) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            if reset:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()


def bcrypt_config(tmp: Path, cost: int, password: bytes = b"right") -> Path:
    """Users `prom` (the observer's) and `first` (seen once, for a first scrape), both `password`."""
    import bcrypt

    cfg = tmp / f"web{cost}.yml"
    hashed = bcrypt.hashpw(password, bcrypt.gensalt(cost)).decode()
    cfg.write_text(f"basic_auth_users:\n  prom: '{hashed}'\n  first: '{hashed}'\n")
    return cfg


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def scrape_body(port: int) -> tuple[int, str]:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split(b" ", 2)[1]), body.decode("utf-8", "replace")
    except (OSError, ValueError, IndexError):
        return 0, ""
