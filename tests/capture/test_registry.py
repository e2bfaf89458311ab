"""The source registry (`--source KIND:ARG` -> a source, every spelling and its error), and the dir: source
under abuse."""

from __future__ import annotations

import gzip
import json
import os
import time
from pathlib import Path

import pytest

from support.clock import Clock
from support.dirsource import ALEXNET, CONTROL, names, set_mtime
from support.fakenvml import FakeNvml
from warpwatch.capture import Source
from warpwatch.capture.dirsource import DirSource
from warpwatch.capture.registry import build_source
from warpwatch.capture.replay import ReplaySource
from warpwatch.capture.servers import ProfilingServerSource, SglangDialect, VllmDialect
from warpwatch.config.table import Config
from warpwatch.errors import ConfigError
from warpwatch.export.nvml import Nvml

# --------------------------------------------------------------------------------------------- registry


CONFIG = Config(source=("dir:/x",), collect_timeout=7.0, delete_processed=True, retention_files=3)


def test_specs_build_their_sources(tmp_path: Path) -> None:
    d = build_source(f"dir:{tmp_path}", CONFIG)
    assert isinstance(d, DirSource)
    assert (d.name, d.folder, d.delete_processed, d.retention_files, d.give_up_s) == (
        f"dir:{tmp_path}",
        tmp_path,
        True,
        3,
        7.0,
    )
    r = build_source(f"replay:{ALEXNET}", CONFIG)
    assert isinstance(r, ReplaySource)
    assert isinstance(r, Source)


def test_server_and_daemon_specs_build_their_sources(tmp_path: Path) -> None:
    v = build_source(f"vllm:http://localhost:8000,dir={tmp_path},expected_files=2", CONFIG)
    assert isinstance(v, ProfilingServerSource) and isinstance(v.dialect, VllmDialect)
    assert (v.name, v.options.trace_dir, v.options.expected_files) == (
        f"vllm:http://localhost:8000,dir={tmp_path},expected_files=2",
        tmp_path,
        2,
    )
    s = build_source(f"sglang:http://localhost:30000,dir={tmp_path},server_dir=/srv/t", CONFIG)
    assert isinstance(s, ProfilingServerSource) and isinstance(s.dialect, SglangDialect)
    assert s.dialect.server_trace_dir == "/srv/t"
    k = build_source("kineto-daemon", Config(source=("kineto-daemon",), trace_dir=tmp_path))
    assert type(k).__name__ == "KinetoDaemonSource"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "nfs:/x",
            "source 'nfs:/x': unknown kind of source; use one of dir:, replay:, kineto-daemon, vllm:, "
            "sglang: (e.g. dir:/var/run/traces, replay:trace.json.gz, kineto-daemon, "
            "vllm:http://localhost:8000,dir=/traces)",
        ),
        ("dir:", "source 'dir:': dir: needs a folder, e.g. dir:/var/run/traces"),
        ("replay:", "source 'replay:': replay: needs a trace file or folder (or @samples)"),
        (
            "vllm:http://h:1,color=red",
            "source 'vllm:http://h:1,color=red': unknown option 'color=red'; options are "
            "dir=..., token_env=..., expected_files=..., max_steps=...",
        ),
        (
            "vllm:http://h:1,max_steps=-1",
            "vllm source: max_steps must be an integer from 0 to 100000 (0: the whole window), got -1",
        ),
        (
            "sglang:http://h:1,expected_files=two",
            "source 'sglang:http://h:1,expected_files=two': expected_files must be an integer, got 'two'",
        ),
    ],
)
def test_bad_specs_are_config_errors_naming_the_spec(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_source(spec, CONFIG)
    assert str(info.value) == message


# --------------------------------------------------------------------------------------------- NVML


def test_without_a_driver_nvml_is_down_and_nothing_raises(caplog: pytest.LogCaptureFixture) -> None:
    """Real pynvml on this machine: there is no NVIDIA driver, so nvmlInit fails."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver: the no-driver path cannot be tested here")
    nvml = Nvml(pynvml)
    with caplog.at_level("INFO"):
        assert nvml.start() is False
    assert [r.msg for r in caplog.records] == ["nvml_unavailable"]
    nvml.begin()
    assert nvml.end().up is False
    assert nvml.gpus == ()
    nvml.close()


def test_a_gpu_is_read_around_the_window() -> None:
    fake = FakeNvml()
    nvml = Nvml(fake)
    assert nvml.start() is True
    assert [(g.index, g.name, g.compute_capability, g.sms) for g in nvml.gpus] == [(0, "NVIDIA H200", "9.0", 132)]
    nvml.begin()
    assert fake.samples_taken == 1
    reading = nvml.end()
    assert fake.samples_taken == 2  # before and after: GPM covers the window
    assert reading.up is True
    assert [(g.index, g.sm_occupancy, g.utilization) for g in reading.gpus] == [(0, 0.375, 0.8)]
    nvml.close()
    assert fake.shutdown


def test_a_gpu_lost_mid_run_makes_nvml_down_logs_once_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml()
    nvml = Nvml(fake)
    nvml.start()
    fake.lost = True
    with caplog.at_level("WARNING"):
        for _ in range(3):
            nvml.begin()
            reading = nvml.end()
            assert reading.up is False
            assert [(g.sm_occupancy, g.utilization) for g in reading.gpus] == [(None, None)]
    errors = [r for r in caplog.records if r.msg == "nvml_error"]
    assert len(errors) == 2  # gpm sample + utilization, each logged once however often it happens
    assert nvml.errors == 6
    fake.lost = False
    nvml.begin()
    assert nvml.end().up is True


def test_nvml_errors_at_start_are_one_line_and_no_exception() -> None:
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise self.NVMLError(9)

    nvml = Nvml(NoDriver())
    assert nvml.start() is False
    nvml.begin()
    assert nvml.end().up is False
    nvml.close()


def test_gzip_fixture_sanity() -> None:
    """control.json.gz is a complete gzip stream (the tests above cut it to make it incomplete)."""
    assert gzip.decompress(CONTROL.read_bytes())[:1] == b"{"


def test_replay_samples_alias_replays_the_bundled_traces() -> None:
    src = build_source("replay:@samples", CONFIG)
    src.start()
    try:
        (cw,) = src.capture(0.01, 1.0)
        assert cw.path is not None and cw.path.name.endswith((".json", ".json.gz"))
        assert "samples" in str(cw.path)
        cw.done()
    finally:
        src.close()


# --------------------------------------------------------------------------------------------- dir: under abuse


@pytest.mark.slow
def test_a_json_still_being_written_is_not_judged_complete_because_it_ends_in_a_brace(folder: Path) -> None:
    """Issue: a plain .json ending in `}` between two chunks, unchanged for 100 ms, was handed over
    and failed as truncated. Now it must be one whole JSON object by structure (which the invalid
    JSON some Kineto versions write is too), or stay unchanged for json_settle_s."""
    target = folder / "chunked.json"
    target.write_text('{"traceEvents": [{"name": "a", "ph": "X"}')  # a chunk boundary after a `}`
    set_mtime(target, int(time.time()) + 60)  # settling is by this test's clock alone
    clock = Clock()
    src = DirSource(folder, json_settle_s=2.0, give_up_s=30.0, clock=clock)
    assert src.capture(0.1, 1.0) == []
    clock.now = 1.5
    assert src.capture(0.1, 1.0) == []
    with target.open("a") as f:  # the writer goes on and finishes the document
        f.write(', {"name": "b", "ph": "X"}]}')
    [window] = src.capture(0.1, 1.0)  # whole and valid: handed over without waiting
    assert window.path == target
    json.loads(target.read_text())

    kineto = folder / "inf.json"  # not JSON (a bare inf), but whole by structure: the reader takes it at once
    kineto.write_text('{"traceEvents": [{"name": "a", "dur": inf}]}')
    set_mtime(kineto, int(time.time()) + 60)
    clock.now = 10.0
    assert names(src.capture(0.1, 1.0)) == ["inf.json"]

    stuck = folder / "stuck.json"  # its writer stopped after a chunk: handed over once settled
    stuck.write_text('{"traceEvents": [{"name": "a", "dur": inf}')
    set_mtime(stuck, int(time.time()) + 60)
    clock.now = 20.0
    assert src.capture(0.1, 1.0) == []
    clock.now = 21.9
    assert src.capture(0.1, 1.0) == []
    clock.now = 22.0
    assert names(src.capture(0.1, 1.0)) == ["stuck.json"]


def test_a_file_whose_permissions_change_after_a_failed_read_is_read_again(folder: Path) -> None:
    """Issue: a file unreadable when first seen (mode 000) was never retried after chmod, because
    a chmod leaves size and mtime alone. (Tests run as root, who reads mode 000 files anyway: the
    test checks the identity the retry rests on; the real refusal is in test_confinement.)"""
    target = folder / "late.json"
    target.write_text('{"traceEvents": []}')
    os.chmod(target, 0)
    set_mtime(target, 1_700_000_000)
    src = DirSource(folder)
    [first] = src.capture(0.01, 1.0)
    first.done(True)  # its window failed (unreadable) and was counted
    assert src.capture(0.01, 1.0) == []
    os.chmod(target, 0o644)
    assert names(src.capture(0.01, 1.0)) == ["late.json"]


def test_a_directory_with_a_trace_name_is_reported_not_skipped(folder: Path) -> None:
    from warpwatch.capture.confine import RefusedFile, open_confined

    (folder / "x.json").mkdir()
    [window] = DirSource(folder).capture(0.01, 1.0)
    assert window.path == folder / "x.json"
    with pytest.raises(RefusedFile) as info, open_confined(window.path):
        pass
    assert info.value.reason == "not_regular_file"
