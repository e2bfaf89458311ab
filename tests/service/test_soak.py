"""A short soak of the real agent: 150 rounds (300 windows) in under 30 s leave nothing behind.

The same run as `benchmarks/soak.py replay` (which goes on for 1,000+ windows, and also soaks
the Kineto daemon source with real PyTorch processes), cut short: a trace replayed every 0.1 s
plus a small trace dropped into a `dir:` folder every 0.1 s and deleted once analysed. After a
warm-up, the agent's open file descriptors and threads must come back to where they were, the
folder must not grow, and its memory may grow only a little. No timing or absolute-RSS
assertions: the machine is shared.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from support.agent import ALEXNET
from support.patience import hang_guard

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from soak import AgentProcess, Feeder, soak

ROUNDS = 150
WARM = 20
FD_SLACK = 2
THREAD_SLACK = 2
RSS_GROWTH_MIB = 50


@pytest.mark.slow
def test_150_rounds_leave_fds_threads_and_the_trace_folder_where_they_were(tmp_path: Path) -> None:
    folder = tmp_path / "dropped"
    folder.mkdir()
    feeder = Feeder(folder, 0.1)
    agent = AgentProcess(
        "--source",
        f"replay:{ALEXNET}",
        "--source",
        f"dir:{folder}",
        "--delete-processed",
        "--period",
        "100ms",
        "--window",
        "5ms",
        "--jitter",
        "0",
        "--allow-high-duty",
        "--collect-timeout",
        "1s",
    )
    try:
        # Each round: one replayed window, and one for the files dropped since the last round.
        samples = soak(
            agent, folder, lambda f: f.windows >= WARM + 2 * ROUNDS, warm_windows=WARM, every_s=1.0, looks=20
        )  # the fewest over 1 s: between rounds
        ok = agent.windows("ok")
        feeder.stop()
        # Every file dropped is deleted once analysed: the folder empties once the feeder stops
        # (a count bounded *while* it feeds would hold the agent to the feeder's pace: a loaded
        # machine's agent falls behind for a while and catches up).
        drained = time.monotonic() + hang_guard(10)
        while any(folder.iterdir()) and time.monotonic() < drained:
            time.sleep(0.1)
        left = sorted(f.name for f in folder.iterdir())
    finally:
        feeder.stop()
        rc = agent.stop()
    start, end = samples[0], samples[-1]
    assert rc == 0
    assert ok >= WARM + 2 * ROUNDS - 10, "\n".join(agent.lines[-20:])
    assert end.fds <= start.fds + FD_SLACK, samples
    assert end.threads <= start.threads + THREAD_SLACK, samples
    assert left == [], samples  # a file dropped every 0.1 s, deleted as analysed
    assert feeder.written >= ROUNDS
    assert end.rss_mib - start.rss_mib < RSS_GROWTH_MIB, samples
    assert not any("Traceback" in line for line in agent.lines)
