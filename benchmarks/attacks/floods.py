"""Floods at full size against the agent's ports: idle connections, slowloris, huge headers,
vanishing clients and password guessing (`guessing.py`) on the metrics port, fake senders and
malformed datagrams on the daemon socket; then config, signal and protocol corners. Each a function
that returns its rows; `FLOODS` names them all."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .guessing import attack_auth
from .kit import (
    LOOPBACK_ATTACKER,
    Agent,
    Row,
    close_all,
    connect_many,
    finish,
    observe,
    scrape_body,
)


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
            threads = [
                threading.Thread(target=_big_headers, args=(agent.port, stop, 6.3), daemon=True) for _ in range(clients)
            ]
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
    agent = Agent(
        ["--source", f"kineto-daemon:socket_dir={sock_dir}", "--trace-dir", str(tmp / "t"), "--period", "50s"], path
    )
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


def attack_misc(path: Path, rss_cap: float) -> list[Row]:
    """Config, signals and protocol corners: each a yes/no in the note."""
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
    env["PYTHONPATH"] = str(path)
    for name, args in (("--period 1e12", ["--period", "1e12"]),):
        proc = subprocess.run(
            [sys.executable, "-m", "warpwatch", "run", "--source", f"dir:{tmp}", "--port", "0", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        rows.append(
            Row(
                f"config: {name}",
                exit_code=proc.returncode,
                tracebacks=proc.stderr.count("Traceback"),
                note=proc.stderr.strip().splitlines()[-1][:140],
            )
        )
    latin = tmp / "latin.yml"
    latin.write_bytes(b"source: dir:/caf\xe9\n")
    proc = subprocess.run(
        [sys.executable, "-m", "warpwatch", "run", "--config", str(latin)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    rows.append(
        Row(
            "config: non-UTF-8 file",
            exit_code=proc.returncode,
            tracebacks=proc.stderr.count("Traceback"),
            note=proc.stderr.strip().splitlines()[-1][:140],
        )
    )

    sock_dir = tmp / "s"
    row = Row("signal: SIGHUP")
    agent = Agent(["--source", f"kineto-daemon:socket_dir={sock_dir}", "--trace-dir", str(tmp / "t")], path)
    with observe(agent, row):
        time.sleep(1)
    row.exit_code, stop_s = agent.stop(signal.SIGHUP)
    row.stop_s = round(stop_s, 2)
    row.note = (
        f"socket file left: {(sock_dir / 'dynolog').exists()}; logged: {any('SIGHUP' in line for line in agent.lines)}"
    )
    rows.append(row)

    proc2 = subprocess.Popen(
        [sys.executable, "-m", "warpwatch", "run", "--source", f"dir:{tmp}", "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
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
    row.note = (
        f"HTTP/0.9 answered after {waited:.1f}s with {first[:24]!r}; "
        f"gzip;q=0 gets gzip: {b'content-encoding: gzip' in head.lower()}"
    )
    rows.append(finish(agent, row))
    return rows


FLOODS: dict[str, Callable[[Path, float], list[Row]]] = {
    "idle": attack_idle,
    "slowloris": attack_slowloris,
    "headers": attack_headers,
    "vanish": attack_vanish,
    "auth": attack_auth,
    "daemon": attack_daemon,
    "misc": attack_misc,
}
