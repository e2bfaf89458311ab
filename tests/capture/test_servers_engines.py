"""The real vllm/sglang sources against stand-ins of each engine version family, each its own
process (tests/support/engines/): requests that kill an engine make that process exit, as upstream."""

from __future__ import annotations

import gzip
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import parse, sample
from support.engines.launch import Engine
from support.paths import HTA
from support.patience import hang_guard
from warpwatch.capture import CapturedWindow
from warpwatch.capture.registry import sglang_source, vllm_source
from warpwatch.capture.servers import ProfilingServerSource

ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
INFERENCE_RANK1 = HTA / "trace_file_list/inference_rank_1.json.gz"
RANKS = [ALEXNET, INFERENCE_RANK1]

pytestmark = pytest.mark.skipif(not ALEXNET.exists(), reason="shared traces not present")

FAST: dict[str, Any] = {
    "poll_interval_s": 0.05,
    "retry_pause_s": 0.05,
    "request_timeout_s": 5.0,
    "flush_timeout_s": 10.0,
    "settle_quiet_s": 0.5,
}

Launch = Callable[..., Engine]


@pytest.fixture
def launch() -> Iterator[Launch]:
    made: list[Engine] = []

    def start(script: str, *args: str) -> Engine:
        rank_args = [a for t in RANKS for a in ("--rank-trace", str(t))]
        e = Engine(script, *args, *rank_args)
        made.append(e)
        return e

    yield start
    for e in made:
        e.close()


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    d = tmp_path / "profiles"
    d.mkdir()
    return d


def ok(windows: list[CapturedWindow]) -> list[CapturedWindow]:
    return [w for w in windows if w.path is not None]


def rank_payloads() -> list[bytes]:
    return [gzip.decompress(t.read_bytes()) for t in RANKS]


def assert_rank_files(windows: list[CapturedWindow], stages: int = 1) -> None:
    """One window per rank (and stage), each holding that rank's real trace, unchanged."""
    payloads = rank_payloads()
    got = ok(windows)
    assert len(got) == len(windows) == len(RANKS) * stages, [w.error for w in windows]
    contents = []
    for w in got:
        assert w.path is not None and w.error is None
        contents.append(gzip.decompress(w.path.read_bytes()))
        if "rank" in w.labels:
            assert contents[-1] == payloads[int(w.labels["rank"])]
    assert sorted(contents) == sorted(payloads * stages)


# -- every family: one window per rank, the engine alive ---------------------------------------


@pytest.mark.parametrize(
    ("script", "family_args", "source_kw", "stages"),
    [
        ("vllm_server.py", ["--family", "old"], {}, 1),
        ("vllm_server.py", ["--family", "config"], {}, 1),
        ("sglang_server.py", ["--family", "0.4.2", "--env-dir", "{dir}"], {"profiler_dir_env": True}, 1),
        ("sglang_server.py", ["--family", "0.4.6"], {}, 1),
        ("sglang_server.py", ["--family", "0.5.0", "--busy"], {}, 2),
        ("sglang_server.py", ["--family", "0.5.0", "--profile-v2", "--busy"], {}, 2),
    ],
    ids=["vllm-old", "vllm-config", "sglang-0.4.2-env", "sglang-0.4.6", "sglang-0.5", "sglang-v2"],
)
@pytest.mark.slow
def test_each_family_gives_one_window_per_rank(
    script: str, family_args: list[str], source_kw: dict[str, Any], stages: int, trace_dir: Path, launch: Launch
) -> None:
    args = [a.replace("{dir}", str(trace_dir)) for a in family_args]
    if script == "vllm_server.py":
        engine = launch(script, *args, "--dir", str(trace_dir))
        src: ProfilingServerSource = vllm_source(engine.url, trace_dir, **FAST)
    else:
        engine = launch(script, *args)
        src = sglang_source(engine.url, trace_dir, **FAST, **source_kw)
    windows = src.capture(0.2, 10)
    assert_rank_files(windows, stages)
    assert engine.alive(), engine.stderr()
    assert src.stats().files.get("worker") == len(RANKS) * stages


# -- 1. never a request that kills the engine --------------------------------------------------


@pytest.mark.slow
def test_sglang_0_4_2_without_the_env_dir_is_never_started(trace_dir: Path, launch: Launch) -> None:
    engine = launch("sglang_server.py", "--family", "0.4.2")
    src = sglang_source(engine.url, trace_dir, **FAST)
    (w,) = src.capture(0.1, 5)
    assert w.outcome == "failed" and w.error is not None
    assert "SGLANG_TORCH_PROFILER_DIR" in w.error and "profiler_dir_env=1" in w.error and "0.4.4" in w.error
    assert engine.wait_exit(0.5) is None, engine.stderr()  # still serving
    assert engine.state()["starts"] == 0
    assert src.stats().skipped == {"unsafe_request": 1}


@pytest.mark.slow
def test_sglang_0_4_2_stop_answers_before_the_ranks_write(trace_dir: Path, launch: Launch) -> None:
    """0.4.0-0.4.3 answer /stop_profile at once and write rank by rank afterwards (0.4 s, 0.8 s):
    the window waits for the two ranks the server reports rather than taking the first file."""
    engine = launch("sglang_server.py", "--family", "0.4.2", "--env-dir", str(trace_dir), "--write-delay", "0.4")
    src = sglang_source(engine.url, trace_dir, profiler_dir_env=True, **FAST)
    windows = src.capture(0.1, 10)
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "1"}]
    assert_rank_files(windows)
    assert engine.alive()


@pytest.mark.slow
def test_sglang_profile_v2_gets_only_by_stage_requests(trace_dir: Path, launch: Launch) -> None:
    """SGLANG_PROFILE_V2=1, which no endpoint shows: a plain start, a start_step or a stop would
    end the server. The source sends one by-stage request and waits for its files; while they
    are not all there (the server is idle), it sends nothing (a configure while a stage records
    ends the server too)."""
    engine = launch("sglang_server.py", "--family", "0.5.0", "--profile-v2")
    src = sglang_source(engine.url, trace_dir, num_steps=3, **{**FAST, "flush_timeout_s": 0.3})
    assert src.capture(0.1, 5) == []  # armed: no requests yet
    assert src.capture(0.1, 5) == []  # nothing sent while armed
    assert engine.state()["starts"] == 1
    assert src.stats().skipped == {"session_pending": 1}
    engine.traffic()  # requests come: 3 prefill steps, 3 decode steps, traces written
    windows: list[CapturedWindow] = []
    deadline = time.monotonic() + hang_guard(10)
    while len(windows) < 4 and time.monotonic() < deadline:
        windows += src.capture(0.1, 5)
    names = sorted(w.path.name.rsplit("-", 1)[1] for w in windows if w.path is not None)
    assert names == ["decode.trace.json.gz"] * 2 + ["prefill.trace.json.gz"] * 2
    assert_rank_files(windows, stages=2)
    assert engine.alive(), engine.stderr()


def test_sglang_unknown_version_is_refused(trace_dir: Path, launch: Launch) -> None:
    engine = launch("sglang_server.py", "--family", "0.4.6", "--version", "nightly")
    src = sglang_source(engine.url, trace_dir, **FAST)
    (w,) = src.capture(0.1, 5)
    assert w.outcome == "failed" and w.error is not None and "no SGLang version" in w.error
    assert engine.state()["starts"] == 0
    assert src.stats().skipped == {"unsafe_request": 1}


# -- 2. someone else's profile is left alone ---------------------------------------------------


@pytest.mark.parametrize("family", ["0.4.6", "0.5.0"])
def test_someone_elses_profile_is_left_alone(family: str, trace_dir: Path, tmp_path: Path, launch: Launch) -> None:
    engine = launch("sglang_server.py", "--family", family)
    theirs = tmp_path / "theirs"
    assert engine.post("/start_profile", {"output_dir": str(theirs)}) == 200  # a person, with curl
    src = sglang_source(engine.url, trace_dir, backoff_s=60, **FAST)
    (w,) = src.capture(0.1, 5)
    assert w.outcome == "failed" and w.error is not None and "someone else's" in w.error
    state = engine.state()
    assert state["replaced"] == 0 and state["in_progress"] is True
    assert src.stats().skipped == {"profile_in_use": 1}
    assert src.capture(0.1, 5) == []  # backing off
    assert engine.state()["starts"] == 2
    assert engine.post("/stop_profile") == 200  # their session, theirs to stop: it wrote its files
    assert sorted(p.name.split("-", 1)[1] for p in theirs.iterdir()) == ["TP-0.trace.json.gz", "TP-1.trace.json.gz"]
    assert engine.alive()


# -- 3. and 4. vLLM's file names (0.17+ and the real 0.32: tests/capture/test_vllm_real.py) --------------


CPU_ONLY_SCRIPT = """
import os, socket, sys, torch
from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler
# What vllm/v1/engine/async_llm.py does in the API-server process: CPU activities only.
name = f"{socket.gethostname()}_{os.getpid()}.async_llm"
with profile(activities=[ProfilerActivity.CPU],
             on_trace_ready=tensorboard_trace_handler(sys.argv[1], worker_name=name, use_gzip=True)):
    torch.ones(64, 64) @ torch.ones(64, 64)
"""


@pytest.fixture(scope="module")
def front_end_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CPU-only trace recorded by the real torch.profiler, as vLLM's AsyncLLM records it."""
    out = tmp_path_factory.mktemp("async_llm")
    subprocess.run([sys.executable, "-c", CPU_ONLY_SCRIPT, str(out)], check=True, timeout=120)
    (path,) = out.iterdir()
    assert ".async_llm." in path.name and path.name.endswith(".pt.trace.json.gz")
    return path


@pytest.mark.slow
def test_vllm_front_end_cpu_trace_is_not_a_window(
    trace_dir: Path, launch: Launch, front_end_trace: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from warpwatch.config.table import Config
    from warpwatch.export import metricdefs as md
    from warpwatch.service.agent import Service

    events = json.loads(gzip.decompress(front_end_trace.read_bytes()))["traceEvents"]
    assert events and not [e for e in events if e.get("cat") == "kernel"]  # really CPU only
    engine = launch(
        "vllm_server.py", "--family", "config", "--dir", str(trace_dir), "--front-end-trace", str(front_end_trace)
    )
    src = vllm_source(engine.url, trace_dir, delete_processed=True, **FAST)
    svc = Service(
        Config(
            source=("vllm:stand-in",),
            address="127.0.0.1",
            port=0,
            period=1.0,
            window=0.1,
            jitter=0.0,
            allow_high_duty=True,
            collect_timeout=10.0,
        ),
        sources=[src],
    )
    with caplog.at_level(logging.WARNING, logger="warpwatch.capture.servers"):
        svc.run_round()
        svc.run_round()

    def windows(outcome: str) -> float | None:
        return sample(parse(svc.render("text/plain")[0].decode()), md.exposed_name(md.WINDOWS), outcome=outcome)

    assert [n for n in engine.state()["written"] if ".async_llm." in n]  # the stand-in wrote one
    assert windows("ok") == 4 and not windows("empty") and not windows("failed") and not windows("timed_out")
    assert {k: v for k, v in src.stats().files.items() if v} == {"worker": 4, "cpu_only": 2}
    assert list(trace_dir.iterdir()) == []  # the front end's file went with the rest
    # The front end's profiler stalls the process that streams tokens: said once, with the switch
    warned = [r.getMessage() for r in caplog.records if "profiles itself" in r.getMessage()]
    assert len(warned) == 1 and '"ignore_frontend": true' in warned[0], warned


# -- 5. files that arrive after their window gave up -------------------------------------------


@pytest.mark.slow
def test_files_of_a_slow_stop_are_collected_later(trace_dir: Path, launch: Launch) -> None:
    """The first stop is held until the test lets it go (a large model's flush), the window gives
    up after 0.5 s; no window is opened while the stop is out, and once it is answered the files
    are handed over in a later round and deleted once processed. (Until issue 38 the stop took
    1.5 s of wall clock, and the round that must find it unanswered had to come within 1 s.)"""
    engine = launch("vllm_server.py", "--family", "config", "--dir", str(trace_dir), "--stop-delays", "hold")
    src = vllm_source(engine.url, trace_dir, delete_processed=True, **{**FAST, "flush_timeout_s": 0.5})
    first = src.capture(0.1, 10)
    assert [w.outcome for w in first] == ["timed_out"]
    requested = first[0].requested
    assert src.capture(0.1, 10) == []  # still being written: no new start
    assert engine.state()["starts"] == 1
    assert engine.post("/_standin/release_stop") == 200
    later: list[CapturedWindow] = []
    deadline = time.monotonic() + hang_guard(10)

    def late_windows() -> list[CapturedWindow]:
        # The round that ends the late session opens the next window too (with its own interval).
        return sorted((w for w in ok(later) if w.requested == requested), key=lambda w: w.labels["rank"])

    while len(late_windows()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
        later += src.capture(0.1, 10)
    late = late_windows()
    assert [w.labels for w in late] == [{"rank": "0"}, {"rank": "1"}]
    assert_rank_files(late)
    for w in late:
        w.done()
        assert w.path is not None and not w.path.exists()
    stats = src.stats()
    assert stats.files.get("late") == 2 and stats.skipped.get("previous_flush_pending", 0) >= 1


@pytest.mark.slow
def test_a_file_that_never_completes_is_abandoned_and_deleted(trace_dir: Path, launch: Launch) -> None:
    """A stop that answers while its files are still written very slowly (60 s): after
    late_timeout_s the unfinished files are given up, counted and deleted: disk stays bounded."""
    engine = launch("vllm_server.py", "--family", "config", "--dir", str(trace_dir), "--stop-delays", "30")
    src = vllm_source(
        engine.url, trace_dir, delete_processed=True, late_timeout_s=0.5, **{**FAST, "flush_timeout_s": 0.3}
    )
    # The stop never returns in time: write the session's files by hand, cut (the engine's
    # writer died mid-file).
    first = src.capture(0.05, 5)
    assert [w.outcome for w in first] == ["timed_out"]
    for r in range(2):
        (trace_dir / f"7f3a9c21-rank-{r}.{time.time_ns()}.pt.trace.json.gz").write_bytes(ALEXNET.read_bytes()[:500])
    assert src.capture(0.05, 5) == []
    time.sleep(0.6)
    src.capture(0.05, 5)
    assert src.stats().files.get("abandoned") == 2
    assert [p for p in trace_dir.iterdir() if p.stat().st_size == 500] == []
