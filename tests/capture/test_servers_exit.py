"""Nothing left behind at exit (issue 46): the shutdown waits, within its grace, for a session still
being written (`ProfilingServerSource.finish`), and what it cannot wait for is named by the start
(vLLM's `profile_prefix`) and claimed by the next start (`leftovers`). In-process stand-ins
(tests/support/engines/threaded.py); the real vLLM: tests/capture/test_vllm_real_exit.py.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.agent import StubSource, service_for
from support.engines.threaded import ALEXNET, Recorded, StandIn, VllmStandIn
from support.patience import hang_guard, wait_for
from support.servers import FAST, PatientClock
from warpwatch.capture.registry import vllm_source
from warpwatch.capture.servers.leftovers import Leftovers, new_run_prefix
from warpwatch.capture.servers.vllm import VllmDialect

pytestmark = pytest.mark.skipif(not ALEXNET.exists(), reason="shared traces not present")


@pytest.fixture(autouse=True)
def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARPWATCH_SERVER_TOKEN", raising=False)


@dataclass
class NamingVllm(VllmStandIn):
    """vLLM 0.32's naming: the start's `profile_prefix` begins the session's file names
    (`{prefix}_{worker}.{time_ns}.pt.trace.json.gz`)."""

    prefix: str | None = None

    def handle(self, rec: Recorded) -> tuple[int, str, bytes]:
        if rec.path == "/start_profile":
            self.prefix = json.loads(rec.body).get("profile_prefix") if rec.body else None
            self.instance_id = f"{self.prefix}_7f3a9c21" if self.prefix else "7f3a9c21"
        return super().handle(rec)


def _naming(standins: list[StandIn], trace_dir: Path, **kw: object) -> NamingVllm:
    s = NamingVllm(trace_dir, **kw)  # type: ignore[arg-type]
    standins.append(s)
    return s


def traces(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".pt.trace.json" in p.name)


def test_the_start_names_the_session_and_the_labels_leave_the_name_out() -> None:
    prefix = new_run_prefix()
    assert prefix.startswith("warpwatch-") and len(prefix) == len("warpwatch-") + 8
    d = VllmDialect("/t")
    assert json.loads(d.start_body(prefix) or b"") == {"max_iterations": 16, "profile_prefix": prefix}
    assert json.loads(VllmDialect("/t", max_steps=0).start_body(prefix) or b"") == {"profile_prefix": prefix}
    assert VllmDialect("/t", max_steps=0).start_body(None) is None
    # Labels stay bounded across runs: the run's prefix is not part of them.
    assert d.labels_for(f"{prefix}_rank3.17.pt.trace.json.gz") == {"rank": "3"}
    assert d.labels_for(f"{prefix}_dp0_pp1_tp2_dcp0_ep0_rank4.17.pt.trace.json.gz") == {
        "dp_rank": "0",
        "pp_rank": "1",
        "tp_rank": "2",
        "dcp_rank": "0",
        "ep_rank": "0",
        "rank": "4",
    }
    assert d.labels_for(f"{prefix}_host_12.17.pt.trace.json.gz") == {"process": "host_12"}
    assert not d.is_worker_trace(f"{prefix}_host_12.async_llm.17.pt.trace.json.gz")


def test_an_earlier_runs_files_are_claimed_once_complete_and_no_other(tmp_path: Path) -> None:
    earlier, ours = "warpwatch-0123abcd", "warpwatch-89abcdef"
    complete = tmp_path / f"{earlier}_rank0.1.pt.trace.json.gz"
    shutil.copy(ALEXNET, complete)
    partial = tmp_path / f"{earlier}_rank1.2.pt.trace.json.gz"
    partial.write_bytes(gzip.compress(b'{"traceEvents": [')[:-8])  # being written: no gzip trailer
    kept = [f"{ours}_rank0.3.pt.trace.json.gz", "rank0.4.pt.trace.json.gz", "mine_rank0.5.pt.trace.json.gz"]
    kept += ["warpwatch-notahexid_rank0.6.pt.trace.json.gz", "rank0.profiler_out.txt"]
    for name in kept:
        shutil.copy(ALEXNET, tmp_path / name)
    (tmp_path / f"{earlier}_rank0.profiler_out.txt").write_text("a key_averages table")
    clock, counts = PatientClock(), Counter[str]()
    is_trace = VllmDialect(tmp_path).is_trace_name
    left = Leftovers("vllm:x", tmp_path, ours, is_trace, delete=True, late_timeout_s=60, clock=clock, counts=counts)
    assert left.is_earlier(complete.name) and not left.is_earlier(kept[0]) and not left.is_earlier(kept[1])

    assert left.claim() == 0  # first seen: not known to be complete yet
    assert left.claim() == 1  # complete: claimed, deleted unread
    assert not complete.exists() and partial.exists()
    assert not (tmp_path / f"{earlier}_rank0.profiler_out.txt").exists()
    clock.advance(59)
    assert left.claim() == 0
    clock.advance(1)
    assert left.claim() == 1  # never completed within late_timeout_s: claimed all the same
    # The earlier run's table went too (unchanged across two looks), uncounted: not a trace.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
    assert counts == {"leftover": 2}


def test_a_claimed_file_left_in_place_counts_once_and_what_is_gone_is_forgotten(tmp_path: Path) -> None:
    # Without delete_processed a claimed file stays in the folder: later looks pass over it. Once
    # it is gone the claim is forgotten, so a new file of that name is a new leftover (the record
    # of a run's files is the folder's, not a list that grows with every file ever seen).
    name = "warpwatch-0123abcd_rank0.1.pt.trace.json.gz"
    clock, counts = PatientClock(), Counter[str]()
    is_trace = VllmDialect(tmp_path).is_trace_name
    left = Leftovers(
        "vllm:x", tmp_path, "warpwatch-89abcdef", is_trace, delete=False, late_timeout_s=60, clock=clock, counts=counts
    )
    shutil.copy(ALEXNET, tmp_path / name)
    assert [left.claim() for _ in range(4)] == [0, 1, 0, 0]  # first seen, complete, then passed over
    (tmp_path / name).unlink()
    assert left.claim() == 0
    shutil.copy(ALEXNET, tmp_path / name)
    assert [left.claim() for _ in range(3)] == [0, 1, 0]
    assert counts == {"leftover": 2} and (tmp_path / name).exists()


def test_files_written_before_this_run_began_are_claimed_at_the_first_look(tmp_path: Path) -> None:
    # An earlier run's session, finished 10 s before this run starts: its whole trace and its table
    # are claimed by the start itself; a trace left half-written as long is not whole, so it waits.
    earlier = "warpwatch-0123abcd"
    whole, table = tmp_path / f"{earlier}_rank0.1.pt.trace.json.gz", tmp_path / f"{earlier}_rank0.profiler_out.txt"
    shutil.copy(ALEXNET, whole)
    table.write_text("a key_averages table")
    partial = tmp_path / f"{earlier}_rank1.2.pt.trace.json.gz"
    partial.write_bytes(gzip.compress(b'{"traceEvents": [')[:-8])
    for path in (whole, table, partial):
        when = path.stat().st_mtime - 10.0
        os.utime(path, (when, when))
    src = vllm_source("http://127.0.0.1:9", tmp_path, delete_processed=True, **FAST)
    src.start()
    assert src.stats().files == {"leftover": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == [partial.name]
    src.close()


def test_without_delete_processed_an_earlier_runs_files_are_counted_and_left(tmp_path: Path) -> None:
    shutil.copy(ALEXNET, tmp_path / "warpwatch-0123abcd_rank0.1.pt.trace.json.gz")
    src = vllm_source("http://127.0.0.1:9", tmp_path, delete_processed=False, **FAST)  # nobody there
    src.start()  # first seen
    (failed,) = src.capture(0.05, 5)  # claimed, before the start that fails
    assert failed.outcome == "failed" and failed.path is None
    assert src.stats().files == {"leftover": 1}
    assert traces(tmp_path) == ["warpwatch-0123abcd_rank0.1.pt.trace.json.gz"]


@pytest.mark.slow
def test_shutdown_waits_for_a_late_session_and_releases_its_files(
    trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    """The window timed out with its stop unanswered (the server still writing); `finish` awaits
    the stop and the files within its grace and deletes them unread."""
    hold = threading.Event()
    server = _naming(standins, trace_dir, chunks=2, write_hold=hold)
    src = vllm_source(server.url, trace_dir, delete_processed=True, flush_timeout_s=0.3, settle_quiet_s=0.2, **FAST)
    src.start()
    windows = src.capture(0.05, 30)
    assert windows and all(w.outcome == "timed_out" for w in windows), windows
    assert server.writes_done == 0
    caplog.set_level(logging.INFO, logger="warpwatch.capture.servers")
    threading.Timer(0.3, hold.set).start()
    src.finish(hang_guard(10))
    src.close()
    assert server.writes_done == 2
    assert traces(trace_dir) == []
    assert {k: v for k, v in src.stats().files.items() if v} == {"late": 2}
    (line,) = [r.getMessage() for r in caplog.records if "at exit" in r.getMessage()]
    assert "2 trace file(s) of ended sessions handed over unread (deleted); nothing left in flight" in line


@pytest.mark.slow
def test_what_outlasts_the_grace_is_claimed_by_the_next_start(
    trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    hold = threading.Event()
    server = _naming(standins, trace_dir, chunks=2, write_hold=hold)
    first = vllm_source(server.url, trace_dir, delete_processed=True, flush_timeout_s=0.3, **FAST)
    first.start()
    first.capture(0.05, 30)
    caplog.set_level(logging.INFO, logger="warpwatch.capture.servers")
    first.finish(0.2)  # the server still writes
    first.close()
    (line,) = [r.getMessage() for r in caplog.records if "at exit" in r.getMessage()]
    assert f"a session still being written; its files ({first.prefix}_*) are claimed by the agent's next" in line
    hold.set()  # written after the agent exited
    wait_for(lambda: server.writes_done == 2, 10, "the first run's files written")
    left = traces(trace_dir)
    assert len(left) == 2 and all(n.startswith(f"{first.prefix}_") for n in left), left

    second = vllm_source(server.url, trace_dir, delete_processed=True, **FAST)
    second.start()
    windows = second.capture(0.05, 30)
    # The earlier run's files are claimed (deleted unread), never taken for this window's.
    assert {k: v for k, v in second.stats().files.items() if v} == {"leftover": 2, "worker": 2}
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "1"}]
    assert all(w.path is not None and w.path.name.startswith(f"{second.prefix}_") for w in windows)
    for w in windows:
        w.done(True)
    assert traces(trace_dir) == []


class Finishing(StubSource):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, float]] = []

    def finish(self, timeout_s: float) -> None:
        self.calls.append(("finish", timeout_s))

    def close(self) -> None:
        self.calls.append(("close", 0.0))
        super().close()


def test_shutdown_gives_each_source_the_grace_left_before_closing_it() -> None:
    src = Finishing()
    svc = service_for(src, {"shutdown_grace_s": 3.0}, window=0.05)
    svc.startup()
    svc.shutdown()
    (finish, close) = src.calls
    assert finish[0] == "finish" and 0 < finish[1] <= 3.05 and close[0] == "close", src.calls
