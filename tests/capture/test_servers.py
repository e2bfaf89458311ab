"""Capture through vLLM's and SGLang's profiling endpoints: the sources' behaviour (slow flushes,
missing ranks, back-off, tokens, labels) against in-process stand-ins (tests/support/engines/threaded.py).
The version families of each engine, as separate processes: tests/capture/test_servers_engines.py.
"""

from __future__ import annotations

import gzip
import json
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.engines.threaded import ALEXNET, Recorded, SglangStandIn, StandIn, VllmStandIn
from warpwatch.capture import CapturedWindow, Source
from warpwatch.capture.servers import SglangSource, VllmSource
from warpwatch.errors import CaptureError, ConfigError

pytestmark = pytest.mark.skipif(not ALEXNET.exists(), reason="shared traces not present")

LOGGER = "warpwatch.capture.servers"
TOKEN = "s3cret-t0ken-value"


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    d = tmp_path / "profiles"
    d.mkdir()
    return d


@pytest.fixture
def standins() -> Iterator[list[StandIn]]:
    made: list[StandIn] = []
    yield made
    for s in made:
        s.close()


@pytest.fixture(autouse=True)
def _no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARPWATCH_SERVER_TOKEN", raising=False)


FAST = {"poll_interval_s": 0.05, "retry_pause_s": 0.05, "request_timeout_s": 5.0}


def _vllm(standins: list[StandIn], trace_dir: Path, **kw: Any) -> VllmStandIn:
    s = VllmStandIn(trace_dir, **kw)
    standins.append(s)
    return s


def _sglang(standins: list[StandIn], trace_dir: Path, **kw: Any) -> SglangStandIn:
    s = SglangStandIn(trace_dir, **kw)
    standins.append(s)
    return s


def _ok(windows: list[CapturedWindow]) -> list[CapturedWindow]:
    return [w for w in windows if w.path is not None]


def _check_files(windows: list[CapturedWindow], standin: StandIn) -> None:
    for w in _ok(windows):
        rank = int(w.labels["rank"])
        assert w.path == standin.written[rank]
        assert w.error is None and w.outcome is None
        assert gzip.decompress(w.path.read_bytes()) == standin.sources[rank]


# -- happy paths -------------------------------------------------------------------------


def test_vllm_two_ranks(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir)
    # Older traces already in the folder are never this window's.
    old = trace_dir / f"{server.instance_id}-rank-0.1000.pt.trace.json.gz"
    shutil.copy(ALEXNET, old)
    (trace_dir / "profiler_out_0.txt").write_text("table")
    src = VllmSource(server.url, trace_dir, delete_processed=True, **FAST)
    assert isinstance(src, Source)
    assert src.name == f"vllm:{server.url}"
    src.start()

    t0 = time.time()
    windows = src.capture(0.2, 10)
    t1 = time.time()

    assert server.paths() == ["/start_profile", "/stop_profile"]
    assert all(r.body == b"" for r in server.requests)
    assert "Authorization" not in server.requests[0].headers
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "1"}]
    _check_files(windows, server)
    for w in windows:
        assert w.source == src.name
        assert w.requested is not None
        start_us, stop_us = w.requested
        assert t0 * 1e6 <= start_us < stop_us <= t1 * 1e6
        assert stop_us - start_us >= 0.2e6 - 1e4
    # delete_processed: the file goes once analysed; an unprocessed window keeps it.
    windows[0].done(False)
    assert windows[0].path is not None and windows[0].path.exists()
    windows[0].done()
    assert not windows[0].path.exists()
    assert old.exists()


def test_sglang_two_ranks(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _sglang(standins, trace_dir)
    shutil.copy(ALEXNET, trace_dir / "1690000000.5-TP-0.trace.json.gz")  # an older window's
    src = SglangSource(server.url, trace_dir, **FAST)
    assert src.name == f"sglang:{server.url}"

    windows = src.capture(0.1, 10)

    assert server.paths() == ["/start_profile", "/stop_profile"]
    start = server.requests[0]
    assert start.headers["Content-Type"] == "application/json"
    assert json.loads(start.body) == {
        "output_dir": str(trace_dir),
        "activities": ["GPU"],
        "with_stack": False,
        "record_shapes": False,
    }
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "1"}]
    _check_files(windows, server)
    assert all(w.path is not None and w.path.name.startswith(server.profile_id) for w in windows)


def test_sglang_server_side_folder(tmp_path: Path, standins: list[StandIn]) -> None:
    """output_dir is the folder as the server sees it; the agent reads its own mount of it."""
    agent_view = tmp_path / "agent-mount"
    agent_view.mkdir()
    server = _sglang(standins, agent_view)
    src = SglangSource(server.url, agent_view, server_trace_dir="/srv/profiles", **FAST)
    server_dir_seen: list[Any] = []
    real_handle = server.handle

    def handle(rec: Recorded) -> tuple[int, str, bytes]:
        if rec.path == "/start_profile":
            server_dir_seen.append(json.loads(rec.body)["output_dir"])
            rec = Recorded(
                rec.method, rec.path, rec.headers, json.dumps({"output_dir": str(agent_view)}).encode()
            )
        return real_handle(rec)

    server.handle = handle  # type: ignore[method-assign]
    windows = src.capture(0.05, 10)
    assert server_dir_seen == ["/srv/profiles"]
    assert len(_ok(windows)) == 2


# -- profiling disabled ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "hints", "first_request"),
    [
        ("vllm", ["disabled", "--profiler-config", "torch_profiler_dir", "VLLM_TORCH_PROFILER_DIR"],
         ["/start_profile"]),
        # A gateway that forwards none of SGLang's routes: the version cannot be read, so no start
        # is sent at all (some versions die of a start they do not take).
        ("sglang", ["cannot tell the SGLang version", "/get_server_info", "router or gateway",
                    "SGLANG_TORCH_PROFILER_DIR", "output_dir"], []),
    ],
)
def test_disabled_logs_once_and_backs_off(
    kind: str, hints: list[str], first_request: list[str], trace_dir: Path, standins: list[StandIn],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    if kind == "vllm":
        server: StandIn = _vllm(standins, trace_dir, enabled=False)
        src: VllmSource | SglangSource = VllmSource(server.url, trace_dir, backoff_s=60, **FAST)
    else:
        server = _sglang(standins, trace_dir, enabled=False)
        src = SglangSource(server.url, trace_dir, backoff_s=60, **FAST)

    first = src.capture(0.05, 5)
    assert len(first) == 1 and first[0].path is None and first[0].outcome == "failed"
    assert first[0].error is not None and "404" in first[0].error
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    assert "\n" not in line
    for hint in hints:
        assert hint in line
    assert warnings[0].exc_info is None

    # Backing off: the next window sends nothing at all.
    assert src.capture(0.05, 5) == []
    assert server.paths() == first_request
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


@pytest.mark.slow
def test_backoff_doubles_and_recovers(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir, enabled=False)
    src = VllmSource(server.url, trace_dir, backoff_s=0.15, max_backoff_s=10, **FAST)
    assert src.capture(0.01, 5)[0].outcome == "failed"  # next try after 0.15 s
    time.sleep(0.2)
    assert src.capture(0.01, 5)[0].outcome == "failed"  # now 0.3 s
    time.sleep(0.2)
    assert src.capture(0.01, 5) == []
    assert len(server.requests) == 2
    time.sleep(0.15)
    server.enabled = True  # profiling switched on (server restarted with the flag)
    windows = src.capture(0.05, 10)
    assert len(_ok(windows)) == 2
    assert server.paths()[-2:] == ["/start_profile", "/stop_profile"]


# -- slow flush --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("blocking", [True, False], ids=["stop-waits", "stop-answers-early"])
def test_slow_flush_waits_then_succeeds(trace_dir: Path, standins: list[StandIn], blocking: bool) -> None:
    server = _vllm(standins, trace_dir, blocking=blocking, chunks=5, chunk_delay=0.2)
    src = VllmSource(server.url, trace_dir, flush_timeout_s=15, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 30)
    assert time.monotonic() - t >= 0.8  # it did wait for the flush
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "1"}]
    _check_files(windows, server)


@pytest.mark.slow
@pytest.mark.parametrize("blocking", [True, False], ids=["stop-waits", "stop-answers-early"])
def test_too_slow_flush_times_out(
    trace_dir: Path, standins: list[StandIn], blocking: bool, caplog: pytest.LogCaptureFixture
) -> None:
    server = _vllm(standins, trace_dir, blocking=blocking, chunks=6, chunk_delay=0.4)
    src = VllmSource(server.url, trace_dir, flush_timeout_s=0.6, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 30)
    assert time.monotonic() - t < 2.0  # bounded by flush_timeout_s, not by the writer
    assert windows
    assert all(w.path is None and w.outcome == "timed_out" for w in windows)
    assert all(w.error and ("incomplete" in w.error or "no new trace file" in w.error) for w in windows)
    assert any(r.levelno == logging.WARNING for r in caplog.records)


@pytest.mark.slow
def test_flush_bounded_by_service_timeout(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir, blocking=False, chunks=4, chunk_delay=0.5)
    src = VllmSource(server.url, trace_dir, flush_timeout_s=60, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 0.5)
    assert time.monotonic() - t < 1.5
    assert all(w.outcome == "timed_out" for w in windows)


# -- missing rank, server gone -----------------------------------------------------------


@pytest.mark.slow
def test_missing_rank_file(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _sglang(standins, trace_dir, write_ranks=(0,))
    src = SglangSource(server.url, trace_dir, expected_files=2, flush_timeout_s=0.5, **FAST)
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
    src = VllmSource(server.url, trace_dir, expected_files=2, settle_quiet_s=0.2, late_timeout_s=3600,
                     **{**FAST, "flush_timeout_s": 0.3})
    assert [w.outcome for w in src.capture(0.05, 10)] == [None, "timed_out"]
    time.sleep(0.3)
    assert len(_ok(src.capture(0.05, 10))) == 1  # a new window, rank 0 again
    assert server.paths() == ["/start_profile", "/stop_profile"] * 2


@pytest.mark.slow
def test_a_rank_file_that_shows_after_its_window_is_still_collected(trace_dir: Path, standins: list[StandIn]) -> None:
    """A shared volume shows rank 1's file after the window took rank 0's as the whole answer:
    the next round hands it over with its own window's interval, before opening a new window."""
    server = _vllm(standins, trace_dir, write_ranks=(0,))
    src = VllmSource(server.url, trace_dir, delete_processed=True, settle_quiet_s=0.2, **FAST)
    (first,) = src.capture(0.05, 10)
    assert first.labels == {"rank": "0"}
    late = trace_dir / f"{server.instance_id}-rank-1.{time.time_ns()}.pt.trace.json.gz"
    shutil.copy(ALEXNET, late)
    time.sleep(0.1)
    (mine,) = src.capture(0.05, 10)  # handed over; no new window while its session may grow
    assert mine.path == late and mine.labels == {"rank": "1"} and mine.requested == first.requested
    mine.done()
    assert not late.exists()
    time.sleep(0.25)
    assert [w.labels for w in src.capture(0.05, 10)] == [{"rank": "0"}]  # then the next window
    assert src.server_stats().files == {"worker": 2, "late": 1}
    assert server.paths() == ["/start_profile", "/stop_profile"] * 2


def _paths_of_rounds(src: SglangSource | VllmSource, rounds: int) -> list[Path | None]:
    """The files handed over in `rounds` short windows (a file goes once seen unchanged twice)."""
    paths: list[Path | None] = []
    for _ in range(rounds):
        paths += [w.path for w in src.capture(0.05, 10)]
        time.sleep(0.05)
    return paths


@pytest.mark.slow
def test_someone_elses_file_is_not_taken_for_a_late_rank(trace_dir: Path, standins: list[StandIn]) -> None:
    """SGLang names every rank's file with the session's profile id: a file with another id that
    appears after the window (a person's profile in the same folder) is neither read nor deleted."""
    server = _sglang(standins, trace_dir, write_ranks=(0,))
    src = SglangSource(server.url, trace_dir, delete_processed=True, **{**FAST, "flush_timeout_s": 0.3})
    first, missing = src.capture(0.05, 10)  # the server reports two ranks: rank 1's file is late
    assert first.path is not None and missing.outcome == "timed_out"
    theirs = trace_dir / "1690000000.25-TP-1.trace.json.gz"
    shutil.copy(ALEXNET, theirs)
    ours = trace_dir / first.path.name.replace("-TP-0.", "-TP-1.")
    shutil.copy(ALEXNET, ours)
    paths = _paths_of_rounds(src, 5)
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
    src = VllmSource(server.url, trace_dir, delete_processed=True, expected_files=2,
                     **{**FAST, "flush_timeout_s": 0.3})
    first, missing = src.capture(0.05, 10)  # two workers expected: rank 1's file is late
    assert first.path is not None and missing.outcome == "timed_out"
    theirs = trace_dir / f"{server.instance_id}-rank-0.{time.time_ns()}.pt.trace.json.gz"
    ours = trace_dir / f"{server.instance_id}-rank-1.{time.time_ns()}.pt.trace.json.gz"
    shutil.copy(ALEXNET, theirs)
    shutil.copy(ALEXNET, ours)
    paths = _paths_of_rounds(src, 5)
    assert ours in paths and theirs not in paths
    assert theirs.exists()


def test_expected_files_all_present_returns_early(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _sglang(standins, trace_dir)
    src = SglangSource(server.url, trace_dir, expected_files=2, flush_timeout_s=20, **FAST)
    t = time.monotonic()
    windows = src.capture(0.05, 30)
    assert time.monotonic() - t < 2
    assert len(_ok(windows)) == 2


@pytest.mark.slow
def test_server_goes_away_mid_window(
    trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    server = _vllm(standins, trace_dir)
    src = VllmSource(server.url, trace_dir, backoff_s=60, max_retries=2, **FAST)
    threading.Timer(0.1, server.go_away).start()
    windows = src.capture(0.4, 10)
    assert len(windows) == 1
    (w,) = windows
    assert w.path is None and w.outcome == "failed"
    assert w.error is not None and "went away mid-window" in w.error and "/stop_profile" in w.error
    assert "refused" in w.error and "3 attempts" in w.error
    assert server.paths() == ["/start_profile"]
    assert not any(r.exc_info for r in caplog.records)  # one line, no traceback
    assert [r.levelno for r in caplog.records if r.levelno >= logging.WARNING] == [logging.WARNING]
    t = time.monotonic()
    assert src.capture(0.4, 10) == []  # backing off: no connection attempt, no wait
    assert time.monotonic() - t < 0.1


def test_retries_of_a_stop_to_a_server_gone_stay_within_the_windows_budget(
    trace_dir: Path, standins: list[StandIn]
) -> None:
    """The stop's retries (for a server that refuses connections) paused 1 + 2 + 4 s whatever
    the window's budget after its stop (here the service's time-out, 1 s), so capture() ran 6 s
    past it and the service's bound on the round. Now no retry starts after the budget is out."""
    server = _vllm(standins, trace_dir)
    src = VllmSource(server.url, trace_dir, max_retries=3, retry_pause_s=1.0, poll_interval_s=0.05)
    threading.Timer(0.1, server.go_away).start()
    t = time.monotonic()
    [w] = src.capture(0.3, 1.0)
    assert time.monotonic() - t < 0.3 + 1.0 + 1.0  # window + budget + generous slack
    assert w.outcome == "failed" and w.error is not None and "went away mid-window" in w.error


def test_unreachable_server_fails_and_backs_off(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir)
    url = server.url
    server.go_away()
    src = VllmSource(url, trace_dir, max_retries=1, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None
    assert "cannot reach the server" in w.error and "2 attempts" in w.error
    assert src.capture(0.05, 5) == []


def test_start_refused_with_error(trace_dir: Path, standins: list[StandIn]) -> None:
    """SGLang answers 500 when a profile (someone else's) is already running."""
    server = _sglang(standins, trace_dir)
    server.in_progress = True
    server.output_dir = trace_dir
    src = SglangSource(server.url, trace_dir, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None and "HTTP 500" in w.error
    assert server.paths() == ["/start_profile"]  # we never stop a session we did not start


def test_close_mid_window_stops_profiling(trace_dir: Path, standins: list[StandIn]) -> None:
    server = _vllm(standins, trace_dir)
    src = VllmSource(server.url, trace_dir, **FAST)
    threading.Timer(0.1, src.close).start()
    t = time.monotonic()
    assert src.capture(30, 10) == []
    assert time.monotonic() - t < 2
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
    src = SglangSource(server.url, trace_dir, token_env="GATEWAY_TOKEN", **FAST)
    windows = src.capture(0.05, 10)
    assert len(_ok(windows)) == 2
    assert [r.headers.get("Authorization") for r in server.requests] == [f"Bearer {TOKEN}"] * 2
    assert TOKEN not in caplog.text
    assert all(TOKEN not in (w.error or "") for w in windows)


def test_missing_token_is_explained(
    trace_dir: Path, standins: list[StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    server = _vllm(standins, trace_dir, token=TOKEN)
    src = VllmSource(server.url, trace_dir, **FAST)
    (w,) = src.capture(0.05, 5)
    assert w.outcome == "failed" and w.error is not None
    assert "401" in w.error and "WARPWATCH_SERVER_TOKEN" in w.error and "is not set" in w.error
    assert server.paths() == ["/start_profile"]


# -- configuration and labels ------------------------------------------------------------


def test_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        VllmSource("localhost:8000", tmp_path)
    with pytest.raises(ConfigError):
        VllmSource("http://localhost:8000", tmp_path, flush_timeout_s=0)
    with pytest.raises(ConfigError):
        SglangSource("http://localhost:30000", tmp_path, activities=["CPU"])
    with pytest.raises(ConfigError):
        SglangSource("http://localhost:30000", tmp_path, expected_files=0)
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(CaptureError):
        VllmSource("http://localhost:8000", not_a_dir).start()
    VllmSource("http://localhost:8000/", tmp_path / "later").start()  # created by the server later


def test_labels_from_file_names(tmp_path: Path) -> None:
    v = VllmSource("http://h:1", tmp_path)
    assert v._labels_for("0a1b-rank-3.1723456789123456789.pt.trace.json.gz") == {"rank": "3"}
    assert v._labels_for("gpu-node-7_4242.1723456789123456789.pt.trace.json.gz") == {
        "process": "gpu-node-7_4242"
    }
    assert v._labels_for("worker0.pt.trace.json") == {"process": "worker0"}
    s = SglangSource("http://h:1", tmp_path)
    assert s._labels_for("1723456789.123-TP-1.trace.json.gz") == {"rank": "1"}
    assert s._labels_for("exp-1723456789.123-TP-2-DP-1-EP-3.trace.json.gz") == {
        "rank": "2",
        "dp_rank": "1",
        "ep_rank": "3",
    }
    assert s._labels_for("rank0.trace.json.gz") == {"process": "rank0"}
    assert not s._is_trace_name("merged-1723.1.trace.json.gz")
    assert not s._is_trace_name("1723.1-TP-0-memory.pickle")
