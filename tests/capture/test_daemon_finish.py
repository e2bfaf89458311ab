"""What finishing a window's trace cost its Kineto client, read off the file (`capture.daemon.finish`):
real traces of three Kineto eras, their `Record Window End` worked out by hand from the file."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from warpwatch.capture.daemon.finish import finish_seconds

HTA = (
    Path(__file__).resolve().parents[3]
    / "shared"
    / "traces"
    / "facebookresearch__HolisticTraceAnalysis"
    / "tests"
    / "data"
)
CASES = [
    # 2023, no baseTimeNanoseconds: ts in microseconds since the epoch
    ("cupti_profiler/benchmark_result_924719_1679055439_trace.json.gz", 1679055463.390908),
    # 2024: baseTimeNanoseconds 1727743122000000000 at the end, after the log lines; ts 2413669097927.433
    ("triton_example/triton_example.json.gz", 1727743122 + 2413669.097927433),
]


def unpacked(tmp_path: Path, rel: str) -> Path:
    out = tmp_path / "warpwatch_7_123.json"
    out.write_bytes(gzip.decompress((HTA / rel).read_bytes()))
    return out


@pytest.mark.parametrize(("rel", "ended"), CASES)
def test_the_time_from_the_recordings_end_to_the_files_last_write(tmp_path: Path, rel: str, ended: float) -> None:
    path = unpacked(tmp_path, rel)
    os.utime(path, (ended + 1.25, ended + 1.25))
    assert finish_seconds(path) == pytest.approx(1.25, abs=1e-3)


def test_a_trace_written_by_this_torch_is_read_with_its_base_time(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    path = tmp_path / "t.json"
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(8) @ torch.ones(8)
    prof.export_chrome_trace(str(path))  # written at once after the recording ended
    seconds = finish_seconds(path)
    assert seconds is not None and 0.0 <= seconds < 5.0
    os.utime(path, (path.stat().st_mtime + 30.0,) * 2)
    # (a trace written at once may end a few ms after its mtime: read as 0, not as that)
    assert finish_seconds(path) == pytest.approx(seconds + 30.0, abs=0.01)


def test_no_figure_without_markers_or_from_what_is_not_a_plain_file(tmp_path: Path) -> None:
    plain = tmp_path / "plain.json"
    plain.write_text('{"traceEvents": [{"name": "k", "ph": "X", "ts": 1, "dur": 2}]}')
    assert finish_seconds(plain) is None
    real = unpacked(tmp_path, CASES[0][0])
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert finish_seconds(link) is None
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert finish_seconds(fifo) is None  # refused by its type, never blocking on a writer
    assert finish_seconds(tmp_path / "missing.json") is None
    # the recording ended after the file was written (a clock off): no figure
    os.utime(real, (CASES[0][1] - 10.0,) * 2)
    assert finish_seconds(real) is None


def test_the_work_is_the_finish_less_one_tick_of_kinetos_loop(tmp_path: Path) -> None:
    from warpwatch.capture.daemon.finish import work_seconds

    rel, ended = CASES[0]
    path = unpacked(tmp_path, rel)
    os.utime(path, (ended + 1.35, ended + 1.35))  # stopped at one wake, written 0.35 s into the next
    assert work_seconds(path) == pytest.approx(0.35, abs=1e-3)
    os.utime(path, (ended + 0.998, ended + 0.998))  # written at the next wake with nothing to do
    assert work_seconds(path) == 0.0
    assert work_seconds(tmp_path / "missing.json") is None
