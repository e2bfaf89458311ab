"""Password guessing on the metrics port, at full size: a legitimate first scrape behind 32
guessers, a user-name oracle (wrong password for a known user against an unknown user), and SIGTERM
while guesses are checked. One of the floods (`floods.FLOODS["auth"]`)."""

from __future__ import annotations

import signal
import statistics
import tempfile
import threading
import time
from pathlib import Path

from .kit import LOOPBACK_ATTACKER, Agent, Row, basic, bcrypt_config, finish, observe, scrape_once


def _guesser(port: int, stop: threading.Event, auth: str) -> None:
    while not stop.is_set():
        status, _ = scrape_once_from(port, LOOPBACK_ATTACKER, {"Authorization": auth})
        if status == 0:
            stop.wait(0.01)


def scrape_once_from(port: int, source: str, headers: dict[str, str]) -> tuple[int, float]:
    """One scrape from the loopback address `source`, waiting up to 10 s (`kit.scrape_once`)."""
    return scrape_once(port, headers, timeout=10.0, source=source)


def attack_auth(path: Path, rss_cap: float) -> list[Row]:
    """Basic auth: a legitimate first scrape behind 32 guessers; a user-name oracle; SIGTERM while
    guesses are checked (10 runs)."""
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="ww-auth-"))
    cfg = bcrypt_config(tmp, 10)
    good = {"Authorization": basic("prom", "right")}
    row = Row("auth: first scrape behind 32 guessers (cost 10)")
    agent = Agent(["--web-config", str(cfg)], path)
    quiet = [
        scrape_once_from(agent.port, "127.0.0.1", {"Authorization": basic("prom", f"first{i}")})[1] for i in range(3)
    ]
    stop = threading.Event()
    threads = [
        threading.Thread(target=_guesser, args=(agent.port, stop, basic("prom", "wrong")), daemon=True)
        for _ in range(32)
    ]
    with observe(agent, row, good):
        for t in threads:
            t.start()
        time.sleep(2)
        first = scrape_once_from(agent.port, "127.0.0.1", {"Authorization": basic("first", "right")})
        time.sleep(3)
        stop.set()
        for t in threads:
            t.join(15)
    row.note = (
        f"first scrape with new credentials: status {first[0]} in {first[1] * 1000:.0f} ms "
        f"(quiet: {statistics.median(quiet) * 1000:.0f} ms)"
    )
    rows.append(finish(agent, row))

    cfg5 = bcrypt_config(tmp, 5)  # htpasswd -B's cost
    row = Row("auth: user-name oracle, hash cost 5")
    agent = Agent(["--web-config", str(cfg5)], path)
    with observe(agent, row, good):
        known = [
            scrape_once_from(agent.port, "127.0.0.1", {"Authorization": basic("prom", f"x{i}")})[1] for i in range(30)
        ]
        unknown = [
            scrape_once_from(agent.port, "127.0.0.1", {"Authorization": basic(f"ghost{i}", "x")})[1] for i in range(30)
        ]
    row.note = (
        f"wrong password for a known user {statistics.median(known) * 1000:.1f} ms, unknown user "
        f"{statistics.median(unknown) * 1000:.1f} ms (median of 30)"
    )
    rows.append(finish(agent, row))

    codes: list[int | str] = []
    peak = Row("auth: SIGTERM during 32 guessers' checks, 10 runs")
    for _ in range(10):
        agent = Agent(["--web-config", str(cfg)], path)
        stop = threading.Event()
        threads = [
            threading.Thread(target=_guesser, args=(agent.port, stop, basic("prom", "wrong")), daemon=True)
            for _ in range(32)
        ]
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
