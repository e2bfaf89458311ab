"""Hostile clients of the kineto-daemon source (rows of `python benchmarks/attacks`, listed in
`hostile_inputs.HOSTILE`):
real torch clients started with KINETO_USE_DAEMON=1 and protocol-faithful fake senders on a
private socket folder under /tmp."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .cgroup import Capped, events, wait_until, windows_total
from .kit import Agent, Row, close_all, scrape_body

CLIENT = """
import sys, time
import torch
deadline = time.time() + float(sys.argv[1])
a = torch.randn(64, 64)
while time.time() < deadline:
    a = (a @ a).tanh()
"""
"""A real PyTorch process: registers with the daemon at `import torch`, then polls it."""


# --------------------------------------------------------------------------------------------- daemon


def _req(pid: int, trace_bit: bool = True) -> bytes:
    """A Kineto "req" datagram for one pid (kineto-facts.md §3: 40-byte header, then the payload)."""
    return struct.pack("<Q32s", 20, b"req") + struct.pack("<iiqi", 3 if trace_bit else 1, 1, 0, pid)


class DaemonPeer:
    """A private socket folder, a trace folder and real torch clients polling it."""

    def __init__(self, poll_s: int | None = 1) -> None:
        # Unix socket paths have 107 bytes: a short folder under /tmp (Kineto writes only there).
        self.root = Path(tempfile.mkdtemp(prefix="ww20", dir="/tmp"))
        self.sock = self.root / "s"
        self.sock.mkdir()
        self.traces = self.root / "t"
        self.config = self.root / "kineto.conf"
        self.config.write_text(f"ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS={poll_s}\n" if poll_s else "\n")
        self.clients: list[subprocess.Popen[bytes]] = []
        self.fakes: list[socket.socket] = []

    def args(self, socket_dir: str | None = None, period: str = "8s", window: str = "300ms") -> list[str]:
        return [
            "--source",
            f"kineto-daemon:socket_dir={socket_dir or self.sock}",
            "--trace-dir",
            str(self.traces),
            "--period",
            period,
            "--window",
            window,
        ]

    def spawn(self, seconds: float, socket_dir: str | None = None) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WARPWATCH_", "KINETO_"))}
        env.update(
            KINETO_USE_DAEMON="1", KINETO_CONFIG=str(self.config), KINETO_IPC_SOCKET_DIR=socket_dir or str(self.sock)
        )
        log = open(self.root / f"client{len(self.clients)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, "-c", CLIENT, str(seconds)], env=env, stdout=log, stderr=log)
        log.close()
        self.clients.append(proc)
        return proc

    def fake(self, name: str) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.bind(str(self.sock / name))
        s.settimeout(1.0)
        self.fakes.append(s)
        return s

    @property
    def daemon(self) -> str:
        return str(self.sock / "dynolog")

    def close(self) -> None:
        for proc in self.clients:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        close_all(self.fakes)
        shutil.rmtree(self.root, ignore_errors=True)


def delivered(w: dict[str, str]) -> bool:
    """A window whose trace came: CPU-only torch records no kernel, so its windows are `empty`."""
    return w.get("outcome") in ("ok", "empty")


def client_windows(agent: Agent, pid: int) -> list[dict[str, str]]:
    """Windows of one traced process: Kineto names its file after the pid (`..._<pid>.json`), and a
    window that got no file names the pid in its error."""
    return [
        w
        for w in events(agent, "window")
        if re.search(rf"_{pid}\.json", w.get("file", "")) or w.get("error", "").startswith(f"pid {pid}:")
    ]


def daemon_counters(agent: Agent) -> str:
    """The daemon source's own counts of what it refused (older agents, 4ac2651 among them, have none)."""
    _, body = scrape_body(agent.port)
    found = re.findall(
        r'^warpwatch_daemon_(replies_dropped|clients_evicted)_total\{[^}]*reason="([^"]+)"[^}]*\} (\S+)$', body, re.M
    )
    return "; ".join(f"{what} {reason} {float(v):.0f}" for what, reason, v in found if float(v)) or "no drop counted"


def attack_daemon_slash(path: Path, rss_cap: float) -> list[Row]:
    """A real torch client and the agent both given KINETO_IPC_SOCKET_DIR ending in "/"."""
    peer = DaemonPeer()
    run = Capped(Row('daemon: socket dir ending in "/", real torch client'), peer.args(f"{peer.sock}/"), path, rss_cap)
    try:
        with run.observed() as agent:
            proc = peer.spawn(40, socket_dir=f"{peer.sock}/")
            t0 = time.monotonic()
            wait_until(lambda: proc.poll() is not None or len(client_windows(agent, proc.pid)) >= 2 or run.dead(), 35)
            took = time.monotonic() - t0
            counted = daemon_counters(agent)
        ok = sum(1 for w in client_windows(agent, proc.pid) if delivered(w))
        if proc.poll() is not None:
            how = signal.Signals(-proc.returncode).name if proc.returncode < 0 else f"exit {proc.returncode}"
            fate = f"torch client killed ({how}) {took:.0f} s after its start"
        else:
            fate = f"torch client alive after {took:.0f} s"
        return [run.finish(f"{fate}; its windows delivered: {ok} ({counted})")]
    finally:
        peer.close()


def attack_daemon_late(path: Path, rss_cap: float) -> list[Row]:
    """A real client polling every 5 s (Kineto's default); the agent stopped 6 s (SIGSTOP) so its
    replies to the polls queued meanwhile are late; then the next windows."""
    peer = DaemonPeer(poll_s=None)
    run = Capped(
        Row("daemon: agent stalled 6 s, real client polling every 5 s"),
        peer.args(period="12s", window="300ms"),
        path,
        rss_cap,
    )
    try:
        with run.observed() as agent:
            proc = peer.spawn(150)
            first = wait_until(lambda: any(delivered(w) for w in client_windows(agent, proc.pid)), 45)
            before = len(client_windows(agent, proc.pid))
            agent.proc.send_signal(signal.SIGSTOP)
            time.sleep(6)
            agent.proc.send_signal(signal.SIGCONT)
            wait_until(lambda: len(client_windows(agent, proc.pid)) >= before + 2 or run.dead(), 75)
            after = [w.get("outcome", "?") for w in client_windows(agent, proc.pid)[before:]]
            counted = daemon_counters(agent)
        fate = "" if first else "no window delivered before the stall; "
        return [run.finish(f"{fate}windows after the stall: {', '.join(after) or 'none'} ({counted})")]
    finally:
        peer.close()


def attack_daemon_mute(path: Path, rss_cap: float) -> list[Row]:
    """40 senders x 20 polls that never read their replies (5x the default 208 KiB send buffer),
    then a fake client that reads and a real torch client."""
    peer = DaemonPeer()
    run = Capped(Row("daemon: 40 senders x 20 polls never reading"), peer.args(), path, rss_cap)
    try:
        with run.observed() as agent:
            for i in range(40):
                mute = peer.fake(f"mute{i}")
                for _ in range(20):
                    with contextlib.suppress(OSError):
                        mute.sendto(_req(200_000 + i), peer.daemon)
            good = peer.fake("good")
            answered = 0
            for _ in range(3):
                with contextlib.suppress(OSError):
                    good.sendto(_req(os.getpid(), trace_bit=False), peer.daemon)
                    good.recv(4096)
                    answered += 1
            proc = peer.spawn(60)
            t0 = time.monotonic()
            wait_until(lambda: any(delivered(w) for w in client_windows(agent, proc.pid)) or run.dead(), 40)
            took = time.monotonic() - t0
            mine = client_windows(agent, proc.pid)
            counted = daemon_counters(agent)
        ok = next((w for w in mine if delivered(w)), None)
        real = (
            f"torch client's window delivered {took:.0f} s after its start"
            if ok
            else f"no window delivered to the torch client in {took:.0f} s ({len(mine)} windows)"
        )
        return [run.finish(f"a reading client got {answered}/3 replies; {real} ({counted})")]
    finally:
        peer.close()


def attack_daemon_registry(path: Path, rss_cap: float) -> list[Row]:
    """1,100 one-datagram registrations (never read), then a real torch client."""
    peer = DaemonPeer()
    run = Capped(Row("daemon: 1,100 one-datagram registrations, then a real client"), peer.args(), path, rss_cap)
    try:
        with run.observed() as agent:
            for i in range(1100):
                with contextlib.suppress(OSError):
                    peer.fake(f"f{i}").sendto(_req(300_000 + i), peer.daemon)
            time.sleep(2)
            proc = peer.spawn(60)
            t0 = time.monotonic()
            wait_until(lambda: any(delivered(w) for w in client_windows(agent, proc.pid)) or run.dead(), 45)
            took = time.monotonic() - t0
            mine = client_windows(agent, proc.pid)
            total = windows_total(agent)
            counted = daemon_counters(agent)
        ok = any(delivered(w) for w in mine)
        real = (
            f"new client served: window delivered {took:.0f} s after its start"
            if ok
            else f"new client locked out: no window for it in {took:.0f} s"
        )
        return [run.finish(f"{real} (all windows: {total}; {counted})")]
    finally:
        peer.close()


def attack_daemon_gap(path: Path, rss_cap: float) -> list[Row]:
    """A fake sender polling twice 12 s apart (one gap), then silent, beside a real client polling
    every 1 s. The fake polls after the first round (the real client's first window) and before
    the next one, at 30 s: how long does that round wait for it?"""
    peer = DaemonPeer()
    run = Capped(Row("daemon: a fake poll gap of 12 s beside a real client"), peer.args(period="30s"), path, rss_cap)
    try:
        with run.observed() as agent:
            proc = peer.spawn(100)
            wait_until(lambda: bool(client_windows(agent, proc.pid)) or run.dead(), 25)
            pause = peer.fake("pause")
            for i in range(2):
                if i:
                    time.sleep(12)
                with contextlib.suppress(OSError):
                    pause.sendto(_req(400_001), peer.daemon)
                    pause.recv(4096)
            got = wait_until(lambda: bool(client_windows(agent, 400_001)) or run.dead(), 60)
            wait_until(lambda: len(client_windows(agent, proc.pid)) >= 2 or run.dead(), 10)
            fake = client_windows(agent, 400_001)
            mine = [w.get("outcome", "?") for w in client_windows(agent, proc.pid)]
        m = re.search(r"within ([0-9.]+) s", fake[0].get("error", "")) if fake else None
        waited = (
            f"the round waited {m.group(1)} s for the fake sender"
            if m
            else f"fake sender's window: {fake[0].get('error', '?')[:80]}"
            if fake
            else "the fake sender's window never ended"
            if not got
            else "?"
        )
        return [run.finish(f"{waited}; real client's windows: {', '.join(mine) or 'none'}")]
    finally:
        peer.close()
