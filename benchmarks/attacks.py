"""Every attack of issue 15, at full size, against a live agent on loopback; prints a table.

    python benchmarks/attacks.py                      # this checkout's agent
    python benchmarks/attacks.py --agent-path DIR     # another checkout's agent/ (e.g. a clone of main)
    python benchmarks/attacks.py --only idle,slowloris --json out.json
    python benchmarks/attacks.py --only issue20       # issue 20's rows (attacks20.py), in memory cgroups

For each attack a fresh agent (`dir:` of an empty folder, 60 s period) is started, attacked for a
bounded time while a normal client scrapes `/metrics` every 0.5 s (5 s time-out), sampled every
0.25 s (RSS of the agent and PSS of its process tree from /proc/PID/smaps_rollup, threads, fds),
then stopped with SIGTERM. A row
gives the normal client's scrape latency under attack (median / worst, and how many failed), the
agent's peak RSS, PSS, threads and fds, its exit code and how long SIGTERM took, and what the
attack is about. Loopback only; every loop is bounded in count and time; the attacker raises its
own fd limit. An agent above `--rss-cap` (8 GiB) is killed and reported so (the machine is shared).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from memcg import tree_pss_kb  # noqa: E402  (tests/ is where the repository's process helpers live)

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
    def __init__(self, args: list[str], agent_path: Path, *, nofile: int | None = None,
                 env: dict[str, str] | None = None, cgroup_procs: Path | None = None) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="ww-attack-"))
        (self.tmp / "traces").mkdir()
        cmd = [sys.executable, "-m", "warpwatch", "run", "--address", "0.0.0.0", "--port", "0",
               "--period", "60s", "--window", "1s", "--jitter", "0", *args]
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

        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=full_env, preexec_fn=limits)
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


def scrape_once(port: int, headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[int, float]:
    """(status or 0 on failure, seconds) of one GET /metrics from 127.0.0.1."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            lines = ["GET /metrics HTTP/1.1", "Host: x", "Connection: close",
                     *(f"{k}: {v}" for k, v in (headers or {}).items())]
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
def observe(agent: Agent, row: Row, headers: dict[str, str] | None = None,
            rss_cap: float | None = None) -> Iterator[None]:
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


# --------------------------------------------------------------------------------------------- attacks


def attack_idle(path: Path, rss_cap: float) -> list[Row]:
    """1,200 idle connections against an agent under ulimit -n 1024, held 15 s."""
    row = Row("idle: 1,200 idle connections, ulimit -n 1024")
    agent = Agent([], path, nofile=1024)
    with observe(agent, row):
        socks = connect_many(agent.port, 1200)
        time.sleep(15)
    row.note = f"{len(socks)} connected"
    close_all(socks)
    return [finish(agent, row)]


def attack_slowloris(path: Path, rss_cap: float) -> list[Row]:
    """2,000 half-sent requests, then all closed; and 5,000 half-sent while SIGTERM arrives."""
    rows = []
    row = Row("slowloris: 2,000 half-sent requests, then closed")
    agent = Agent([], path)
    with observe(agent, row):
        base_fds = agent.footprint()[3]
        socks = connect_many(agent.port, 2000, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        time.sleep(3)
        t0 = time.monotonic()
        close_all(socks)
        while agent.footprint()[3] > base_fds + 5 and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        drained = time.monotonic() - t0
    row.note = f"{len(socks)} opened; {drained:.1f}s after closing them the agent was back to its fds"
    rows.append(finish(agent, row))
    row = Row("slowloris: 5,000 half-sent requests, SIGTERM while open")
    agent = Agent([], path)
    with observe(agent, row):
        socks = connect_many(agent.port, 5000, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        time.sleep(3)
    rows.append(finish(agent, row))
    rows[-1].note = f"{len(socks)} opened"
    close_all(socks)
    return rows


def _big_headers(port: int, stop: threading.Event, mb: float) -> None:
    with contextlib.suppress(OSError):
        s = socket.socket()
        s.bind((LOOPBACK_ATTACKER, 0))
        s.settimeout(20)
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        line = b"X-Pad: " + b"p" * 65000 + b"\r\n"
        sent = 0
        while sent < mb * 1e6 and not stop.is_set():
            s.sendall(line)
            sent += len(line)
        stop.wait(10)
        s.close()


def attack_headers(path: Path, rss_cap: float) -> list[Row]:
    """20 and 300 clients each sending 6.3 MB of headers."""
    rows = []
    for clients in (20, 300):
        row = Row(f"headers: {clients} clients x 6.3 MB of headers")
        agent = Agent([], path)
        stop = threading.Event()
        with observe(agent, row):
            threads = [threading.Thread(target=_big_headers, args=(agent.port, stop, 6.3), daemon=True)
                       for _ in range(clients)]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(t.is_alive() for t in threads):
                if agent.footprint()[0] > rss_cap:
                    row.note = f"killed above {rss_cap:.0f} MiB"
                    agent.proc.kill()
                    break
                time.sleep(0.25)
            stop.set()
            for t in threads:
                t.join(15)
        rows.append(finish(agent, row))
    return rows


def attack_vanish(path: Path, rss_cap: float) -> list[Row]:
    """16 clients send GET /metrics and reset the connection at once, for 8 s."""
    row = Row("vanish: 16 clients reset before reading, 8 s")
    agent = Agent(["--log-format", "json"], path)
    stop = threading.Event()
    sent = [0]

    def flood() -> None:
        while not stop.is_set():
            for s in connect_many(agent.port, 1, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"):
                sent[0] += 1
                close_all([s], reset=True)

    with observe(agent, row):
        threads = [threading.Thread(target=flood, daemon=True) for _ in range(16)]
        for t in threads:
            t.start()
        time.sleep(8)
        stop.set()
        for t in threads:
            t.join(10)
    finish(agent, row)
    tb_lines = sum(1 for line in agent.lines if not line.startswith("{"))
    row.note = f"{sent[0]} requests; {tb_lines} lines that are not JSON records"
    return [row]


def _guesser(port: int, stop: threading.Event, auth: str) -> None:
    while not stop.is_set():
        status, _ = scrape_once_from(port, LOOPBACK_ATTACKER, {"Authorization": auth})
        if status == 0:
            stop.wait(0.01)


def scrape_once_from(port: int, source: str, headers: dict[str, str], timeout: float = 10.0) -> tuple[int, float]:
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as s:
            lines = ["GET /metrics HTTP/1.1", "Host: x", "Connection: close",
                     *(f"{k}: {v}" for k, v in headers.items())]
            s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return int(data.split(b" ", 2)[1]), time.monotonic() - t0
    except (OSError, ValueError, IndexError):
        return 0, time.monotonic() - t0


def attack_auth(path: Path, rss_cap: float) -> list[Row]:
    """Basic auth: a legitimate first scrape behind 32 guessers; a user-name oracle; SIGTERM while
    guesses are checked (10 runs)."""
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="ww-auth-"))
    cfg = bcrypt_config(tmp, 10)
    good = {"Authorization": basic("prom", "right")}
    row = Row("auth: first scrape behind 32 guessers (cost 10)")
    agent = Agent(["--web-config", str(cfg)], path)
    quiet = [scrape_once_from(agent.port, "127.0.0.1", {"Authorization": basic("prom", f"first{i}")})[1]
             for i in range(3)]
    stop = threading.Event()
    threads = [threading.Thread(target=_guesser, args=(agent.port, stop, basic("prom", "wrong")), daemon=True)
               for _ in range(32)]
    with observe(agent, row, good):
        for t in threads:
            t.start()
        time.sleep(2)
        first = scrape_once_from(agent.port, "127.0.0.1", {"Authorization": basic("first", "right")})
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(15)
    row.note = (f"first scrape with new credentials: status {first[0]} in {first[1] * 1000:.0f} ms "
                f"(quiet: {statistics.median(quiet) * 1000:.0f} ms)")
    rows.append(finish(agent, row))

    cfg5 = bcrypt_config(tmp, 5)  # htpasswd -B's cost
    row = Row("auth: user-name oracle, hash cost 5")
    agent = Agent(["--web-config", str(cfg5)], path)
    with observe(agent, row, good):
        known = [scrape_once_from(agent.port, "127.0.0.1", {"Authorization": basic("prom", f"x{i}")})[1]
                 for i in range(30)]
        unknown = [scrape_once_from(agent.port, "127.0.0.1", {"Authorization": basic(f"ghost{i}", "x")})[1]
                   for i in range(30)]
    row.note = (f"wrong password for a known user {statistics.median(known) * 1000:.1f} ms, unknown user "
                f"{statistics.median(unknown) * 1000:.1f} ms (median of 30)")
    rows.append(finish(agent, row))

    codes: list[int | str] = []
    peak = Row("auth: SIGTERM during 32 guessers' checks, 10 runs")
    for _ in range(10):
        agent = Agent(["--web-config", str(cfg)], path)
        stop = threading.Event()
        threads = [threading.Thread(target=_guesser, args=(agent.port, stop, basic("prom", "wrong")), daemon=True)
                   for _ in range(32)]
        run = Row("")
        with observe(agent, run):
            for t in threads:
                t.start()
            time.sleep(1.5)
        finish(agent, run)
        stop.set()
        for t in threads:
            t.join(15)
        codes.append(run.exit_code if run.exit_code is not None else "?")
        peak.rss_mib, peak.pss_mib = max(peak.rss_mib, run.rss_mib), max(peak.pss_mib, run.pss_mib)
        peak.threads, peak.fds = max(peak.threads, run.threads), max(peak.fds, run.fds)
        peak.stop_s = max(peak.stop_s or 0.0, run.stop_s or 0.0)
        peak.tracebacks += run.tracebacks
    peak.exit_code = ",".join(str(c) for c in codes)
    aborted = sum(1 for c in codes if c == -signal.SIGABRT or c == 134)
    peak.note = f"{aborted} of 10 runs aborted (SIGABRT)"
    rows.append(peak)
    return rows


def attack_daemon(path: Path, rss_cap: float) -> list[Row]:
    """50,000 fake senders and 20,000 malformed datagrams on the daemon socket; a client polling
    twice 40 s apart and then missing its poll."""
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))
    sock_dir = tmp / "s"
    row = Row("daemon: 50,000 fake senders + 20,000 malformed datagrams")
    agent = Agent(["--source", f"kineto-daemon:socket_dir={sock_dir}", "--trace-dir", str(tmp / "t")], path)
    daemon = str(sock_dir / "dynolog")
    with observe(agent, row):
        for i in range(50_000):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.bind("")  # autobind: a new abstract address for each
            with contextlib.suppress(OSError):
                s.sendto(struct.pack("<Q32s", 20, b"req") + struct.pack("<iiqi", 3, 1, 0, 1000 + i), daemon)
            s.close()
        junk = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        junk.bind("")
        for _ in range(20_000):
            with contextlib.suppress(OSError):
                junk.sendto(b"\0" * 40, daemon)
        junk.close()
        time.sleep(2)
        _, metrics = scrape_body(agent.port)
    client_lines = sum(1 for line in agent.lines if "Kineto client" in line or "event=daemon_client " in line)
    exported = [m for m in metrics.splitlines() if m.startswith("warpwatch_daemon_")]
    row.note = f"{client_lines} per-client log lines; exported: {'; '.join(exported) or 'nothing'}"
    rows.append(finish(agent, row))

    row = Row("daemon: client polled twice 40 s apart, then silent")
    agent = Agent(["--source", f"kineto-daemon:socket_dir={sock_dir}", "--trace-dir", str(tmp / "t"),
                   "--period", "50s"], path)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    c.bind("")
    c.settimeout(1)
    t0 = time.monotonic()
    with observe(agent, row):
        for i in range(2):
            if i:
                time.sleep(40)
            c.sendto(struct.pack("<Q32s", 20, b"req") + struct.pack("<iiqi", 3, 1, 0, os.getpid()), daemon)
            with contextlib.suppress(OSError):
                c.recv(4096)
        # the round at 50 s expects the client (its last poll is recent for a 40 s interval)
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not any("no trace config delivered" in line for line in agent.lines):
            time.sleep(0.2)
        held = time.monotonic() - t0 - 50
    c.close()
    rows.append(finish(agent, row))
    line = next((line for line in agent.lines if "no trace config delivered" in line), "")
    m = re.search(r"within ([0-9.]+) s", line)
    row.note = f"the window waited for it {m.group(1) if m else '?'} s (round ended {held:.0f} s after it began)"
    return rows


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


def attack_misc(path: Path, rss_cap: float) -> list[Row]:
    """Config, signals and protocol corners: each a yes/no in the note."""
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
    env["PYTHONPATH"] = str(path)
    for name, args in (("--period 1e12", ["--period", "1e12"]),):
        proc = subprocess.run([sys.executable, "-m", "warpwatch", "run", "--source", f"dir:{tmp}", "--port", "0",
                               *args], capture_output=True, text=True, env=env, timeout=60, check=False)
        rows.append(Row(f"config: {name}", exit_code=proc.returncode,
                        tracebacks=proc.stderr.count("Traceback"), note=proc.stderr.strip().splitlines()[-1][:140]))
    latin = tmp / "latin.yml"
    latin.write_bytes(b"source: dir:/caf\xe9\n")
    proc = subprocess.run([sys.executable, "-m", "warpwatch", "run", "--config", str(latin)], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    rows.append(Row("config: non-UTF-8 file", exit_code=proc.returncode, tracebacks=proc.stderr.count("Traceback"),
                    note=proc.stderr.strip().splitlines()[-1][:140]))

    sock_dir = tmp / "s"
    row = Row("signal: SIGHUP")
    agent = Agent(["--source", f"kineto-daemon:socket_dir={sock_dir}", "--trace-dir", str(tmp / "t")], path)
    with observe(agent, row):
        time.sleep(1)
    row.exit_code, stop_s = agent.stop(signal.SIGHUP)
    row.stop_s = round(stop_s, 2)
    row.note = (f"socket file left: {(sock_dir / 'dynolog').exists()}; "
                f"logged: {any('SIGHUP' in line for line in agent.lines)}")
    rows.append(row)

    proc2 = subprocess.Popen([sys.executable, "-m", "warpwatch", "run", "--source", f"dir:{tmp}", "--port", "0"],
                             stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(0.3)
    proc2.send_signal(signal.SIGINT)
    _, err = proc2.communicate(timeout=30)
    rows.append(Row("signal: SIGINT 0.3 s after start", exit_code=proc2.returncode, tracebacks=err.count("Traceback")))

    row = Row("protocol: HTTP/0.9 line, gzip;q=0")
    agent = Agent([], path)
    with observe(agent, row):
        t0 = time.monotonic()
        try:
            with socket.create_connection(("127.0.0.1", agent.port), timeout=15) as s:
                s.sendall(b"GET /metrics\r\n\r\n")
                first = s.recv(64)
        except OSError as exc:
            first = repr(exc).encode()
        waited = time.monotonic() - t0
        with socket.create_connection(("127.0.0.1", agent.port), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0\r\nConnection: close\r\n\r\n")
            head = s.recv(4096).partition(b"\r\n\r\n")[0]
    row.note = (f"HTTP/0.9 answered after {waited:.1f}s with {first[:24]!r}; "
                f"gzip;q=0 gets gzip: {b'content-encoding: gzip' in head.lower()}")
    rows.append(finish(agent, row))
    return rows


ATTACKS: dict[str, Callable[[Path, float], list[Row]]] = {
    "idle": attack_idle, "slowloris": attack_slowloris, "headers": attack_headers, "vanish": attack_vanish,
    "auth": attack_auth, "daemon": attack_daemon, "misc": attack_misc,
}


def table(rows: list[Row]) -> str:
    out = ["| attack | scrape p50 / max ms (failed/total) | RSS MiB | PSS MiB | threads | fds | exit (stop s) | "
           "tracebacks | note |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        scrape = (f"{r.scrape_p50_ms} / {r.scrape_max_ms} ({r.scrape_failed}/{r.scrapes})" if r.scrapes else "-")
        out.append(f"| {r.attack} | {scrape} | {r.rss_mib:.0f} | {r.pss_mib:.0f} | {r.threads} | {r.fds} | "
                   f"{r.exit_code} ({r.stop_s}) | {r.tracebacks} | {r.note} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agent-path", type=Path, default=ROOT / "agent",
                        help="the agent/ folder of the checkout to attack (default: this one)")
    parser.add_argument("--only", default=",".join([*ATTACKS, "issue20"]),
                        help="comma-separated: " + ",".join(ATTACKS) + ", issue20 (all of attacks20.py's) "
                        "or any of them by name (default: all)")
    parser.add_argument("--rss-cap", type=float, default=8192.0,
                        help="MiB above which the agent is killed (issue 20's rows: also the memory cgroup "
                        "each agent runs in, at most 2048)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    from attacks20 import ATTACKS20, ISSUE20

    ATTACKS.update(ATTACKS20)
    names = [n for name in args.only.split(",") for n in (ISSUE20 if name == "issue20" else [name])]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the attacker holds thousands of sockets
    rows: list[Row] = []
    for name in names:
        t0 = time.monotonic()
        try:
            rows += ATTACKS[name](args.agent_path, args.rss_cap)
        except Exception as exc:  # one attack's failure must not lose the others' rows
            rows.append(Row(name, note=f"attack failed: {type(exc).__name__}: {exc}"))
        print(f"# {name}: {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.modules.setdefault("attacks", sys.modules["__main__"])  # attacks20 imports this module by name
    sys.exit(main())

