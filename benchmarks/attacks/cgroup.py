"""The harness of the hostile rows (`hostile_inputs.py`, `hostile_daemon.py`): an agent in its own
memory cgroup, and what its log lines and /metrics say happened."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from support.memcg import MemoryCgroup
from support.memcg import unavailable as memcg_unavailable

from .kit import Agent, Row, finish, observe, scrape_body

CAP_MIB = 2048.0
"""Memory for each agent of these rows: the original code's unbounded growths die here."""
LOG_PAIR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


# --------------------------------------------------------------------------------------------- harness


def events(agent: Agent, name: str) -> list[dict[str, str]]:
    """The agent's `event=name` log lines as dicts (key=value text format)."""
    out = []
    for line in list(agent.lines):
        if f"event={name} " in line or line.endswith(f"event={name}"):
            out.append({k: v.strip('"') for k, v in LOG_PAIR.findall(line)})
    return out


def wait_until(check: Callable[[], bool], timeout_s: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return check()


def metric(body: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    m = (
        re.search(rf"^{re.escape(name)}(?:\{{{re.escape(want)}\}})? (\S+)$", body, re.M)
        if labels
        else re.search(rf"^{re.escape(name)} (\S+)$", body, re.M)
    )
    return float(m.group(1)) if m else None


def windows_total(agent: Agent) -> str:
    """`ok 2, timed_out 1` from /metrics (or from the log when the agent no longer answers)."""
    status, body = scrape_body(agent.port)
    counts: dict[str, int] = {}
    if status == 200:
        for outcome in ("ok", "empty", "failed", "timed_out"):
            counts[outcome] = int(metric(body, "warpwatch_windows_total", outcome=outcome) or 0)
    else:
        for w in events(agent, "window"):
            counts[w.get("outcome", "?")] = counts.get(w.get("outcome", "?"), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in counts.items() if v) or "none"


def errors_counted(agent: Agent) -> str:
    """`read/invalid_trace 1`: what the agent's warpwatch_errors_total counted, if it answers."""
    status, body = scrape_body(agent.port)
    if status != 200:
        return "/metrics unanswered"
    found = re.findall(r'^warpwatch_errors_total\{reason="([^"]+)",stage="([^"]+)"\} (\S+)$', body, re.M)
    return ", ".join(f"{stage}/{reason} {float(v):.0f}" for reason, stage, v in found if float(v)) or "none"


class Capped:
    """A fresh agent in a fresh memory cgroup (when one can be made here), its rows and its folder."""

    def __init__(self, row: Row, args: list[str], path: Path, rss_cap: float, **kwargs: object) -> None:
        self.row = row
        self.cap = min(CAP_MIB, rss_cap)
        self.cg: MemoryCgroup | None = None
        if not memcg_unavailable():
            self.cg = MemoryCgroup(int(self.cap * 1024**2)).__enter__()
        procs = self.cg.path / "cgroup.procs" if self.cg is not None else None
        try:
            self.agent = Agent(args, path, cgroup_procs=procs, **kwargs)  # type: ignore[arg-type]
        except BaseException:
            if self.cg is not None:
                self.cg.__exit__(None, None, None)
            raise

    @contextlib.contextmanager
    def observed(self) -> Iterator[Agent]:
        with observe(self.agent, self.row, rss_cap=self.cap):
            yield self.agent

    def dead(self) -> bool:
        return self.agent.proc.poll() is not None

    def finish(self, outcome: str) -> Row:
        oom = self.cg.oom_kills() if self.cg is not None else 0
        finish(self.agent, self.row)
        if oom:
            outcome = f"OOM-killed in its {self.cap:.0f} MiB cgroup; " + outcome
        elif isinstance(self.row.exit_code, int) and self.row.exit_code < 0 and self.row.exit_code != -signal.SIGTERM:
            outcome = f"agent died of {signal.Signals(-self.row.exit_code).name}; " + outcome
        self.row.note = (self.row.note + outcome).strip()
        if self.cg is not None:
            self.cg.__exit__(None, None, None)
        if os.environ.get("ATTACKS_LOG_DIR"):  # the agent's log, to see why a row reads as it does
            log = Path(os.environ["ATTACKS_LOG_DIR"]) / (re.sub(r"\W+", "_", self.row.attack)[:60] + ".log")
            log.write_text("\n".join(self.agent.lines) + "\n")
        shutil.rmtree(self.agent.tmp, ignore_errors=True)
        return self.row


def window_for(agent: Agent, file: str) -> dict[str, str] | None:
    return next((w for w in events(agent, "window") if w.get("file") == file), None)


def describe(w: dict[str, str] | None, waited: float) -> str:
    if w is None:
        return f"no window in {waited:.0f} s"
    text = f"window {w.get('outcome')} in {float(w.get('seconds') or 0):.2f} s"
    if w.get("error"):
        text += f" ({w['error'][:90]})"
    return text
