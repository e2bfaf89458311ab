"""What `warpwatch analyze` and `warpwatch fix` say about one trace is possible and honest (issue 25):
bounds and observed figures, the real low-confidence reason, one-model device properties, fix on its
own output, the table laid out from what its columns hold, and the command-line edges.

Expected numbers are arithmetic on the hand-built traces (times in µs)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from support.paths import HTA, ROOT
from support.tracebuild import MI300X, kernel, span, trace_doc, write
from warpwatch.analysis.window import analyze
from warpwatch.commands.fix import REPORTED_PREFIX, fix_trace
from warpwatch.commands.table import render_table
from warpwatch.export import metricdefs as md
from warpwatch.export.builder import SnapshotBuilder, WindowResult
from warpwatch.export.snapshot import SnapshotCollector
from warpwatch.trace import read_trace

SAMPLE = ROOT / "agent" / "warpwatch" / "samples" / "a100_alexnet.json.gz"
MI250 = HTA / "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
W = 588_000.0


def gemms(tmp_path: Path) -> Path:
    """The issue's A100 trace: five 117 ms GEMMs back to back on one stream, 1 ms after the span
    starts; 585 ms of kernels in a 588 ms window (99.49 %), idle 1 ms before and 2 ms after."""
    events = [span(0, W)] + [
        kernel("gemm", ts=1000 + i * 117_000, dur=117_000, grid=(432, 1, 1), block=(256, 1, 1)) for i in range(5)
    ]
    return write(tmp_path / "gemms.json", trace_doc(events))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warpwatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "120", **(env or {})},
    )


def table(path: Path, width: int) -> list[str]:
    out = io.StringIO()
    trace = read_trace(path)
    render_table(Console(file=out, width=width, highlight=False), trace, analyze(trace), top=0)
    return out.getvalue().splitlines()


def test_long_gemms_on_one_stream_read_at_most_100_percent_beside_what_the_trace_shows(tmp_path: Path) -> None:
    doc = json.loads(cli("analyze", "--format", "json", str(gemms(tmp_path))).stdout)["traces"][0]
    (dev,) = doc["devices"]
    (gemm,) = doc["kernels"]
    assert dev["observed_busy_ratio"] == pytest.approx(585 / 588)
    assert dev["busy_ratio_bounds"] == pytest.approx([585 / 588, 1.0])  # + 1 ms + 2 ms of idle-looking edges
    assert 585 / 588 <= dev["busy_ratio"] <= 1.0 and dev["busy_ratio_bounded"]
    assert gemm["observed_gpu_time_us"] == 585_000 and gemm["observed_time_share"] == pytest.approx(585 / 588)
    assert gemm["gpu_time_us"] == pytest.approx(588_000) and gemm["time_share"] == pytest.approx(1.0)
    assert gemm["launches_observed"] == 5 and 5 <= gemm["launches_estimated"] <= 7  # one straddler per edge
    assert gemm["bounded"] and dev["low_confidence"]
    assert "estimate bounded by what the trace shows" in dev["low_confidence_reasons"]
    text = " ".join(line.strip() for line in table(gemms(tmp_path), 120))
    assert "busy 100.0% estimated, 99.5% observed (the trace allows 99.5% to 100.0%)" in text
    assert "low confidence: estimate bounded by what the trace shows" in text
    assert not [m for m in re.findall(r"\b(\d+\.\d)%", text) if float(m) > 100]  # nothing above 100 %


def test_the_ranking_follows_what_the_kernels_can_have_run(tmp_path: Path) -> None:
    """One stream, W = 1 s, idle 1 ms at each edge: `long` ran 2 x 140.5 ms (28.1 %), `short` 286 x
    1 ms (28.6 %). Unbounded, `long` reads 281 ms x 1/(1 - 0.1405) = 32.7 % and ranks first; the
    trace allows the two together only 2 ms more than they show, so `short` stays first."""
    events, t = [span(0, 1_000_000)], 1000.0
    for i in range(288):
        name, dur = ("long", 140_500.0) if i in (100, 200) else ("short", 1000.0)
        events.append(kernel(name, ts=t, dur=dur))
        t += dur + 100
    events.append(kernel("tail", ts=998_000, dur=1000))
    a = analyze(read_trace(write(tmp_path / "rank.json", trace_doc(events))))
    by = {k.name: k for k in a.kernels}
    assert by["long"].counted_gpu_time > by["short"].counted_gpu_time  # the unbiased sums, for the counters
    assert [k.name for k in a.kernels][:2] == ["short", "long"]
    assert by["long"].time_share == pytest.approx(0.281, abs=0.0021) and by["short"].time_share >= 0.286


def test_gauges_of_a_window_stay_within_bounds_while_counters_keep_the_unbiased_sum(tmp_path: Path) -> None:
    analysis = analyze(read_trace(gemms(tmp_path)))
    builder = SnapshotBuilder(top_kernels=50, kernel_gauges=True)  # the per-kernel gauges are opt-in
    for _ in range(2):  # the first round creates the counters at 0
        result = WindowResult("replay:t", "p0", "ok", 0.01, analysis)
        builder.record(result, 1000.0)
        builder.apply_round([result])
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry()
    reg.register(SnapshotCollector(builder.snapshot()))
    busy = reg.get_sample_value(md.exposed_name(md.GPU_BUSY), {"gpu": "0"})
    share = reg.get_sample_value(md.exposed_name(md.KERNEL_TIME_SHARE), {"gpu": "0", "kernel": "gemm"})
    seconds = reg.get_sample_value(md.exposed_name(md.KERNEL_SECONDS), {"gpu": "0", "kernel": "gemm"})
    assert busy is not None and busy <= 1.0 and share is not None and share <= 1.0
    h = W / (W - 117_000)
    assert seconds == pytest.approx(5 * 117_000 * h / 1e6)  # Σh·d: 0.731 s in a 0.588 s window, unbiased


def test_an_estimated_window_says_so_rather_than_few_launches(tmp_path: Path) -> None:
    """No `Trace` span: the window comes from the GPU events (768 launches, not few)."""
    events = [kernel(f"k{i % 3}", ts=100 + 20 * i, dur=10) for i in range(768)]
    path = write(tmp_path / "nospan.json", trace_doc(events))
    (dev,) = analyze(read_trace(path)).devices
    assert dev.low_confidence_reasons[0] == "window estimated from GPU events"
    text = "\n".join(table(path, 120))
    assert "low confidence: window estimated from GPU events" in text and "few launches" not in text


def test_few_launches_in_a_busy_window_is_its_own_reason(tmp_path: Path) -> None:
    """Three 200 us launches in a 1000 us window: 60 % busy on 3 captured launches."""
    events = [span(0, 1000)] + [kernel("k", ts=100 + 250 * i, dur=200) for i in range(3)]
    (dev,) = analyze(read_trace(write(tmp_path / "few.json", trace_doc(events)))).devices
    assert dev.low_confidence and "few launches (3) in a busy window" in dev.low_confidence_reasons
    assert "window estimated from GPU events" not in dev.low_confidence_reasons


def _mi300x(tmp_path: Path, devices: list[dict[str, Any]]) -> Path:
    events = [span(0, 10_000)] + [
        kernel(f"k{i}", ts=100 + 500 * i, dur=100, grid=(1000, 1, 1), block=(256, 1, 1), device=2, sms=None)
        for i in range(12)
    ]
    return write(tmp_path / "mi300x.json", trace_doc(events, devices=devices))


def test_one_model_properties_apply_to_the_devices_the_kernels_ran_on_and_say_so(tmp_path: Path) -> None:
    """Real MI300X traces: deviceProperties id 0, kernels on device 2. grid 1000 is no multiple of
    block 256, so it counts blocks: 1000 blocks x 4 wavefronts / 304 CUs."""
    path = _mi300x(tmp_path, [MI300X])
    doc = json.loads(cli("analyze", "--format", "json", str(path)).stdout)["traces"][0]
    (dev,) = doc["devices"]
    assert dev["device"] == 2 and dev["name"] == "AMD Instinct MI300X" and dev["properties_from_device"] == 0
    assert doc["kernels"][0]["warps_per_sm"] == pytest.approx(1000 * 4 / 304)
    text = " ".join(line.strip() for line in table(path, 200))
    assert "properties of device 0 applied (the trace describes one device model, and lists no device 2)" in text
    assert "Occupancy is not shown: CUDA's occupancy calculator does not apply to AMD GPUs" in text
    out = cli("fix", str(path), "-o", str(tmp_path / "fixed.json"))
    assert out.returncode == 0 and "12 with corrected values" in out.stdout
    assert "device 2: the properties of device 0 applied" in out.stdout


def test_fix_says_why_a_kernel_was_not_corrected(tmp_path: Path) -> None:
    path = _mi300x(tmp_path, [MI300X, {**MI300X, "id": 1, "name": "AMD Instinct MI250X", "numSms": 220}])
    out = cli("fix", str(path), "-o", str(tmp_path / "fixed.json"))
    assert out.returncode == 0 and "0 with corrected values" in out.stdout
    assert "12 not corrected: no device properties for device 2 (the trace lists: 0, 1)" in out.stdout


def test_fix_on_its_own_output_keeps_the_profilers_values(tmp_path: Path) -> None:
    doc = trace_doc([span(0, 1000), kernel("neg", grid=(2**31, 1, 1), block=(128, 1, 1))])
    src = write(tmp_path / "t.json", doc)
    fix_trace(str(src), str(tmp_path / "once.json"))
    fix_trace(str(tmp_path / "once.json"), str(tmp_path / "twice.json"))
    once, twice = (json.loads((tmp_path / n).read_text()) for n in ("once.json", "twice.json"))
    assert twice == once
    args = twice["traceEvents"][1]["args"]
    original = doc["traceEvents"][1]["args"]
    assert args[REPORTED_PREFIX + "warps per SM"] == original["warps per SM"]
    assert "grid_overflow" in args["warpwatch artefacts"]


def test_fix_compresses_by_the_output_name_and_writes_with_the_umask(tmp_path: Path) -> None:
    gz = write(tmp_path / "t.json.gz", trace_doc([span(0, 1000), kernel("k")]), gz=True)
    plain = write(tmp_path / "t.json", trace_doc([span(0, 1000), kernel("k")]))
    fix_trace(str(gz), str(tmp_path / "a.json"))
    fix_trace(str(plain), str(tmp_path / "b.json.gz"))
    assert json.loads((tmp_path / "a.json").read_bytes())["traceEvents"]
    assert json.loads(gzip.decompress((tmp_path / "b.json.gz").read_bytes()))["traceEvents"]
    for mask, mode in ((0o022, 0o644), (0o077, 0o600), (0o002, 0o664)):
        out = tmp_path / f"m{mask:o}.json"
        code = (
            f"import os, sys; os.umask({mask}); from warpwatch.commands.cli import main; sys.exit(main(sys.argv[1:]))"
        )
        subprocess.run([sys.executable, "-c", code, "fix", str(plain), "-o", str(out)], check=True, capture_output=True)
        assert out.stat().st_mode & 0o777 == mode, (oct(mask), oct(out.stat().st_mode))


def _header_and_rows(lines: list[str]) -> tuple[str, list[str]]:
    i = next(k for k, line in enumerate(lines) if line.strip().startswith("─"))
    return lines[i - 1], lines[i + 1 :]


@pytest.mark.parametrize("width", [80, 120])
def test_columns_are_chosen_from_what_they_hold(width: int) -> None:
    header, _ = _header_and_rows(table(SAMPLE, width))
    cols = re.split(r"\s{2,}", header.strip())
    assert "GPU" not in cols  # one device: said once under the table instead
    assert "Launches" in cols and "Time %" in cols and "Est. occ" in cols
    if width == 120:
        assert "Theor. occ" in cols
    lines = table(MI250, width)
    header, rows = _header_and_rows(lines)
    cells = [re.split(r"\s{2,}", r.strip()) for r in rows if r.startswith("  ") and not r.startswith(("   ", "  …"))]
    cols = re.split(r"\s{2,}", header.strip())
    assert "Est. occ" not in cols and "Theor. occ" not in cols and "Resident" not in cols  # all unknown on AMD
    table_rows = [c for c in cells if len(c) == len(cols)]
    assert table_rows and all(any(r[i] != "-" for r in table_rows) for i in range(len(cols)))


def test_wrapped_header_lines_keep_their_indentation_and_numbers_are_alike_in_a_column() -> None:
    lines = table(SAMPLE, 80)
    start = next(k for k, line in enumerate(lines) if line.startswith("  GPU 0:"))
    end = next(k for k, line in enumerate(lines) if line.startswith("  Kernel "))
    assert end - start > 2 and all(line.startswith("  ") for line in lines[start:end])
    text = "\n".join(lines)
    assert "e+" not in text
    header, rows = _header_and_rows(table(SAMPLE, 200))
    warps = [re.split(r"\s{2,}", r.strip()) for r in rows if r.startswith("  ") and not r.startswith(("   ", "  …"))]
    col = re.split(r"\s{2,}", header.strip()).index("Warps/SM")
    decimals = {len(c[col].partition(".")[2]) for c in warps if len(c) > col and c[col] != "-"}
    assert len(decimals) == 1, decimals


def test_reported_is_weighted_like_the_corrected_mean(tmp_path: Path) -> None:
    """One kernel, two grids, the profiler right for both: 122 launches agree, so the Reported cell
    reads like Warps/SM (duration-weighted alike), not like their minimum."""
    events = [span(0, 100_000)]
    for i in range(122):
        grid = (2, 1, 1) if i % 2 else (60_000, 1, 1)
        events.append(kernel("k", ts=100 + 800 * i, dur=10 if i % 2 else 600, grid=grid, block=(128, 1, 1)))
    path = write(tmp_path / "t.json", trace_doc(events))
    (k,) = analyze(read_trace(path)).kernels
    assert k.reported_warps_per_sm == pytest.approx(k.warps_per_sm, rel=1e-9)
    assert k.reported_warps_per_sm_min == pytest.approx(2 * 4 / 132)
    header, rows = _header_and_rows(table(path, 200))
    cols = re.split(r"\s{2,}", header.strip())
    cells = re.split(r"\s{2,}", rows[0].strip())
    assert "Reported min" not in header and cells[cols.index("Reported")] == cells[cols.index("Warps/SM")]


def test_json_launch_counts_and_durations_say_what_they_are(tmp_path: Path) -> None:
    doc = json.loads(cli("analyze", "--format", "json", str(SAMPLE)).stdout)["traces"][0]
    k = doc["kernels"][0]
    assert isinstance(k["launches_observed"], int) and isinstance(k["launches_estimated"], float)
    assert not {"launches", "samples", "gpu_time", "launch_rate"} & k.keys()
    assert {"gpu_time_us", "observed_gpu_time_us", "observed_time_share", "launch_rate_per_s"} <= k.keys()
    assert {"t0_us", "t1_us", "duration_us"} <= doc["window"].keys()
    rec = json.loads(cli("analyze", "--launches", "--format", "jsonl", str(SAMPLE)).stdout.splitlines()[0])
    assert {"ts_us", "dur_us"} <= rec.keys() and not {"ts", "dur"} & rec.keys()


@pytest.mark.slow
def test_max_trace_bytes_takes_sizes_refuses_negatives_and_errors_name_the_flag(tmp_path: Path) -> None:
    assert cli("analyze", "--max-trace-bytes", "2GiB", str(SAMPLE)).returncode == 0
    for command in (("analyze", str(SAMPLE)), ("fix", str(SAMPLE), "-o", str(tmp_path / "o.json"))):
        bad = cli(command[0], "--max-trace-bytes", "-5", *command[1:])
        assert bad.returncode == 2 and "error: argument --max-trace-bytes: must be greater than 0" in bad.stderr
        assert "(got '-5')" in bad.stderr
        unit = cli(command[0], "--max-trace-bytes", "5 parsecs", *command[1:])
        assert unit.returncode == 2 and "error: argument --max-trace-bytes: expected a size such as" in unit.stderr
        zero = cli(command[0], "--max-trace-bytes", "0", *command[1:])
        assert zero.returncode == 2 and "argument --max-trace-bytes: must be greater than 0 (got '0')" in zero.stderr
        small = cli(command[0], "--max-trace-bytes", "1KiB", *command[1:])
        assert small.returncode == 1 and "raise --max-trace-bytes to read it" in small.stderr
        assert "max_trace_bytes" not in small.stderr.replace("--max-trace-bytes", "")


def test_run_with_a_nonsense_source_fails_with_one_line_before_any_start_up_line() -> None:
    result = cli("run", "--source", "nonsense")
    assert result.returncode == 2  # a bad value (cli.EXIT_USAGE)
    assert result.stderr.startswith("warpwatch: error: --source nonsense: unknown kind of source")
    assert len(result.stderr.splitlines()) == 1 and "event=" not in result.stdout + result.stderr


def test_without_the_corpus_pytest_says_so_once_instead_of_collection_errors(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/test_gpuscan.py",
            "tests/test_dirsource_fuzz.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "WARPWATCH_SHARED_TRACES": str(tmp_path / "nowhere")},
    )
    out = result.stdout + result.stderr
    assert result.returncode == 4, out
    assert f"the shared traces are missing: {tmp_path / 'nowhere'}" in out and "Running the tests" in out
    assert "collection" not in out and "Traceback" not in out
