"""The vllm/sglang sources when things go wrong: a missing rank, a server gone mid-window, a bearer token,
configuration and labels (happy paths, disabled profiling, slow flushes: test_servers.py)."""

from __future__ import annotations

import logging
import shutil
import threading
import time
from pathlib import Path

import pytest

from support.engines.threaded import ALEXNET, StandIn
from support.servers import FAST, LOGGER, TOKEN, PatientClock, _ok, _sglang, _vllm
from warpwatch.capture.registry import sglang_source, vllm_source
from warpwatch.capture.servers import ProfilingServerSource
from warpwatch.errors import CaptureError, ConfigError

# -- missing rank, server gone -----------------------------------------------------------
# The windows of these tests have budgets of 0.3-0.5 s. On the real clock such a budget also pays
# for the stand-in's stop and the agent's own work, and a starved worker once missed a rank file
# that was there: their sources measure time on a `PatientClock`, which the test moves where it
# would have slept.


class GoesAwayInTheWindow(PatientClock):
    """The server ends during the window: when the source lets the window's time pass (its first
    wait), however late a timer thread would have fired on a loaded machine."""

    def __init__(self, server: StandIn) -> None:
        super().__init__()
        self._server: StandIn | None = server

    def sleep(self, interrupt: threading.Event, seconds: float) -> bool:
        if self._server is not None:
            self._server.go_away()
            self._server = None
        return super().sleep(interrupt, seconds)


@pytest.mark.slow
@pytest.mark.parametrize("chunk_delay", [0.0, 1.0], ids=["quick-server", "stop-slower-than-the-budget"])
def test_missing_rank_file(trace_dir: Path, standins: list[StandIn], chunk_delay: float) -> None:
    """Rank 1 never writes: rank 0's window, and a timed-out one for rank 1. The same however long
    the stop takes to write rank 0 (here up to twice the 0.5-s budget: what a starved stand-in
    did once), because the source's clock stands still while it awaits the stop's answer (on the
    real clock the slower case gives two timed-out windows)."""
    server = _sglang(standins, trace_dir, write_ranks=(0,), chunks=2, chunk_delay=chunk_delay)
    clock = PatientClock()
    src = sglang_source(server.url, trace_dir, expected_files=2, flush_timeout_s=0.5, clock=clock, **FAST)
    windows = src.capture(0.05, 10)
    assert len(windows) == 2
    ok, missing = windows
    assert ok.labels == {"rank": "0"} and ok.path == server.written[0]
    assert missing.labels == {"rank": "1"}
    assert missing.path is None and missing.outcome == "timed_out"
    assert missing.error is not None and "rank 1" in missing.error


@pytest.mark.slow
def test_a_rank_that_never_writes_does_not_hold_back_the_next_window(trace_dir: Path, standins: list[StandIn]) -> None:
    """The window gives up on rank 1 (counted timed_out); its session stays open for late files, but
    once nothing more has come for settle_quiet_s the next window opens (not after late_timeout_s)."""
    server = _vllm(standins, trace_dir, write_ranks=(0,))
    src = vllm_source(
        server.url,
        trace_dir,
        expected_files=2,
        settle_quiet_s=0.2,
        late_timeout_s=3600,
        clock=(clock := PatientClock()),
        **{**FAST, "flush_timeout_s": 0.3},
    )
    assert [w.outcome for w in src.capture(0.05, 10)] == [None, "timed_out"]
    clock.advance(0.3)
    assert len(_ok(src.capture(0.05, 10))) == 1  # a new window, rank 0 again
    assert server.paths() == ["/start_profile", "/stop_profile"] * 2


@pytest.mark.slow
def test_a_rank_file_that_shows_after_its_window_is_still_collected(trace_dir: Path, standins: list[StandIn]) -> None:
    """A shared volume shows rank 1's file after the window took rank 0's as the whole answer:
    the next round hands it over with its own window's interval, before opening a new window."""
    server = _vllm(standins, trace_dir, write_ranks=(0,))
    clock = PatientClock()
    src = vllm_source(server.url, trace_dir, delete_processed=True, settle_quiet_s=0.2, clock=clock, **FAST)
    (first,) = src.capture(0.05, 10)
    assert first.labels == {"rank": "0"}
    late = trace_dir / f"{server.instance_id}-rank-1.{time.time_ns()}.pt.trace.json.gz"
    shutil.copy(ALEXNET, late)
    clock.advance(0.1)
    (mine,) = src.capture(0.05, 10)  # handed over; no new window while its session may grow
    assert mine.path == late and mine.labels == {"rank": "1"} and mine.requested == first.requested
    mine.done()
    assert not late.exists()
    clock.advance(0.25)
    assert [w.labels for w in src.capture(0.05, 10)] == [{"rank": "0"}]  # then the next window
    assert src.stats().files == {"worker": 2, "late": 1}
    assert server.paths() == ["/start_profile", "/stop_profile"] * 2


def _paths_of_rounds(src: ProfilingServerSource, clock: PatientClock, rounds: int) -> list[Path | None]:
    """The files handed over in `rounds` short windows, 50 ms apart on `clock` (a file goes once
    seen unchanged twice)."""
    paths: list[Path | None] = []
    for _ in range(rounds):
        paths += [w.path for w in src.capture(0.05, 10)]
        clock.advance(0.05)
    return paths


@pytest.mark.slow
def test_someone_elses_file_is_not_taken_for_a_late_rank(trace_dir: Path, standins: list[StandIn]) -> None:
    """SGLang names every rank's file with the session's profile id: a file with another id that
    appears after the window (a person's profile in the same folder) is neither read nor deleted."""
    server = _sglang(standins, trace_dir, write_ranks=(0,))
    clock = PatientClock()
    src = sglang_source(server.url, trace_dir, delete_processed=True, clock=clock, **{**FAST, "flush_timeout_s": 0.3})
    first, missing = src.capture(0.05, 10)  # the server reports two ranks: rank 1's file is late
    assert first.path is not None and missing.outcome == "timed_out"
    theirs = trace_dir / "1690000000.25-TP-1.trace.json.gz"
    shutil.copy(ALEXNET, theirs)
    ours = trace_dir / first.path.name.replace("-TP-0.", "-TP-1.")
    shutil.copy(ALEXNET, ours)
    paths = _paths_of_rounds(src, clock, 5)
    assert ours in paths and theirs not in paths
    assert theirs.exists()


@pytest.mark.slow
def test_a_later_file_of_a_worker_already_handed_over_is_not_taken_for_a_late_vllm_rank(
    trace_dir: Path, standins: list[StandIn]
) -> None:
    """vLLM's names carry no session id: while a timed-out window's session stayed open for its
    late ranks, any new trace file was taken as one of them, so a person's profile written into
    the folder meanwhile was read and deleted. Each worker writes one file per session: a second
    file of a worker already handed over is someone else's."""
    server = _vllm(standins, trace_dir, write_ranks=(0,))
    clock = PatientClock()
    src = vllm_source(
        server.url, trace_dir, delete_processed=True, expected_files=2, clock=clock, **{**FAST, "flush_timeout_s": 0.3}
    )
    first, missing = src.capture(0.05, 10)  # two workers expected: rank 1's file is late
    assert first.path is not None and missing.outcome == "timed_out"
    theirs = trace_dir / f"{server.instance_id}-rank-0.{time.time_ns()}.pt.trace.json.gz"
    ours = trace_dir / f"{server.instance_id}-rank-1.{time.time_ns()}.pt.trace.json.gz"
    shutil.copy(ALEXNET, theirs)
    shutil.copy(ALEXNET, ours)
    paths = _paths_of_rounds(src, clock, 5)
    assert ours in paths and theirs not in paths
    assert theirs.exists()


def test_expected_files_all_present_returns_early(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _sglang(standins, trace_dir)
    src = sglang_source(server.url, trace_dir, expected_files=2, flush_timeout_s=60, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 90)
    assert time.monotonic() - t < 60  # not held for the flush time-out, however loaded the machine
    assert len(_ok(windows)) == 2


@pytest.mark.slow
def test_server_goes_away_mid_window(
    trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    server = _vllm(standins, trace_dir)
    src = vllm_source(server.url, trace_dir, backoff_s=60, max_retries=2, clock=GoesAwayInTheWindow(server), **FAST)
    windows = src.capture(0.4, 10)
    assert len(windows) == 1
    (w,) = windows
    assert w.path is None and w.outcome == "failed"
    assert w.error is not None and "went away mid-window" in w.error and "/stop_profile" in w.error
    assert "refused" in w.error and "3 attempts" in w.error
    assert server.paths() == ["/start_profile"]
    assert not any(r.exc_info for r in caplog.records)  # one line, no traceback
    assert [r.levelno for r in caplog.records if r.levelno >= logging.WARNING] == [logging.WARNING]
    # Backing off: no window opened (an attempt would come back as a failed window, as above).
    assert src.capture(0.4, 10) == []
    assert server.paths() == ["/start_profile"]


def test_retries_of_a_stop_to_a_server_gone_stay_within_the_windows_budget(
    trace_dir: Path, standins: list[StandIn]
) -> None:
    """The stop's retries (for a server that refuses connections) paused 1 + 2 + 4 s whatever
    the window's budget after its stop (here the service's time-out, 1 s), so capture() ran 6 s
    past it and the service's bound on the round (the error said "after 4 attempts"). Now no
    retry starts after the budget is out: the first pause (1 s) would end past it, so the stop is
    tried once, however fast or slow the machine."""
    server = _vllm(standins, trace_dir)
    clock = GoesAwayInTheWindow(server)
    src = vllm_source(server.url, trace_dir, max_retries=3, retry_pause_s=1.0, poll_interval_s=0.05, clock=clock)
    [w] = src.capture(0.3, 1.0)
    assert w.outcome == "failed" and w.error is not None and "went away mid-window" in w.error
    assert "refused" in w.error and "attempts" not in w.error, w.error


def test_unreachable_server_fails_and_backs_off(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir)
    url = server.url
    server.go_away()
    src = vllm_source(url, trace_dir, max_retries=1, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None
    assert "cannot reach the server" in w.error and "2 attempts" in w.error
    assert src.capture(0.05, 5) == []


def test_start_refused_with_error(trace_dir: Path, standins: list[StandIn]) -> None:
    """SGLang answers 500 when a profile (someone else's) is already running."""
    server = _sglang(standins, trace_dir)
    server.in_progress = True
    server.output_dir = trace_dir
    src = sglang_source(server.url, trace_dir, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None and "HTTP 500" in w.error
    assert server.paths() == ["/start_profile"]  # we never stop a session we did not start


def test_close_mid_window_stops_profiling(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir)
    src = vllm_source(server.url, trace_dir, **FAST)
    threading.Timer(0.1, src.close).start()
    t = time.monotonic()
    assert src.capture(30, 10) == []
    assert time.monotonic() - t < 30  # the close ended the 30 s window, however loaded the machine
    assert server.paths() == ["/start_profile", "/stop_profile"]
    assert not server.active


# -- bearer token ------------------------------------------------------------------------


def test_bearer_token_sent_never_logged(
    trace_dir: Path,
    standins: list[StandIn],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    monkeypatch.setenv("GATEWAY_TOKEN", TOKEN)
    server = _sglang(standins, trace_dir, token=TOKEN)
    src = sglang_source(server.url, trace_dir, token_env="GATEWAY_TOKEN", **FAST)
    windows = src.capture(0.05, 10)
    assert len(_ok(windows)) == 2
    assert [r.headers.get("Authorization") for r in server.requests] == [f"Bearer {TOKEN}"] * 2
    assert TOKEN not in caplog.text
    assert all(TOKEN not in (w.error or "") for w in windows)


def test_missing_token_is_explained(trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture) -> None:
    server = _vllm(standins, trace_dir, token=TOKEN)
    src = vllm_source(server.url, trace_dir, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None
    assert "401" in w.error and "WARPWATCH_SERVER_TOKEN" in w.error and "is not set" in w.error
    assert server.paths() == ["/start_profile"]


# -- configuration and labels ------------------------------------------------------------


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        vllm_source("localhost:8000", tmp_path)
    with pytest.raises(ConfigError):
        vllm_source("http://localhost:8000", tmp_path, flush_timeout_s=0)
    with pytest.raises(ConfigError):
        sglang_source("http://localhost:30000", tmp_path, activities=["CPU"])
    with pytest.raises(ConfigError):
        sglang_source("http://localhost:30000", tmp_path, expected_files=0)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(CaptureError):
        vllm_source("http://localhost:8000", not_a_dir).start()
    vllm_source("http://localhost:8000/", tmp_path / "later").start()  # created by the server later


def test_labels_from_file_names(tmp_path: Path) -> None:
    v = vllm_source("http://h:1", tmp_path)
    assert v.dialect.labels_for("0a1b-rank-3.1723456789123456789.pt.trace.json.gz") == {"rank": "3"}
    assert v.dialect.labels_for("gpu-node-7_4242.1723456789123456789.pt.trace.json.gz") == {
        "process": "gpu-node-7_4242"
    }
    assert v.dialect.labels_for("worker0.pt.trace.json") == {"process": "worker0"}
    s = sglang_source("http://h:1", tmp_path)
    assert s.dialect.labels_for("1723456789.123-TP-1.trace.json.gz") == {"rank": "1"}
    assert s.dialect.labels_for("exp-1723456789.123-TP-2-DP-1-EP-3.trace.json.gz") == {
        "rank": "2",
        "dp_rank": "1",
        "ep_rank": "3",
    }
    assert s.dialect.labels_for("rank0.trace.json.gz") == {"process": "rank0"}
    assert not s.dialect.is_trace_name("merged-1723.1.trace.json.gz")
    assert not s.dialect.is_trace_name("1723.1-TP-0-memory.pickle")


@pytest.mark.slow
def test_a_link_out_of_the_trace_folder_is_never_taken_for_a_rank_file(
    trace_dir: Path, standins: list[StandIn], tmp_path: Path
) -> None:
    """The folder is listed with `confine`'s checks: a rank-named link to a file elsewhere is not
    followed, waited for, handed over nor given up."""
    server = _vllm(standins, trace_dir, write_ranks=(0,))
    clock = PatientClock()
    src = vllm_source(server.url, trace_dir, settle_quiet_s=0.2, late_timeout_s=0.3, clock=clock, **FAST)
    (first,) = src.capture(0.05, 10)
    assert first.labels == {"rank": "0"}
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(ALEXNET, outside / "secret.json.gz")
    link = trace_dir / f"{server.instance_id}-rank-1.{time.time_ns()}.pt.trace.json.gz"
    link.symlink_to(outside / "secret.json.gz")
    paths: list[Path | None] = []
    for _ in range(6):
        clock.advance(0.1)
        paths.extend(w.path for w in src.capture(0.05, 10))
    assert link not in paths
    assert src.stats().files.get("late", 0) == src.stats().files.get("abandoned", 0) == 0
