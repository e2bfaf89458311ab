"""The exposition: every family comes from metricdefs, the processing-time histogram, and the text
of a fixed snapshot, pinned by tests/export/golden/metrics.prom (regenerate with
WARPWATCH_UPDATE_GOLDEN=1), checked by the real promtool and served as OpenMetrics on request.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from support.patience import hang_guard
from warpwatch.export import metricdefs as md
from warpwatch.export.builder import FAULTS, OTHER, HistogramState, Snapshot, SnapshotCollector
from warpwatch.export.snapshot import Sample

GOLDEN = Path(__file__).parent / "golden" / "metrics.prom"


def test_every_family_comes_from_metricdefs_with_its_help() -> None:
    collector = SnapshotCollector()
    families = {f.name: f for f in collector.collect()}
    assert set(families) == {m.name for m in md.ALL}
    for m in md.ALL:
        assert families[m.name].documentation == m.help
        assert families[m.name].type == m.type
    assert {f.name for f in collector.describe()} == {m.name for m in md.ALL}


def test_the_histogram_counts_every_processed_window() -> None:
    h = HistogramState()
    for seconds in (0.001, 0.02, 0.02, 7.0, 100.0):
        h = h.observe(seconds)
    cumulative = dict(h.cumulative())
    assert cumulative["0.005"] == 1
    assert cumulative["0.025"] == 3
    assert cumulative["10.0"] == 4
    assert cumulative["+Inf"] == 5
    assert h.total == pytest.approx(107.041)


def _kernel_rows(*rows: tuple[str, str, tuple[float | None, ...]]) -> dict[md.MetricDef, tuple[Sample, ...]]:
    """Per-kernel gauge samples from (gpu, kernel, values in the order of `md.KERNEL_GAUGES`); None: no sample."""
    return {
        m: tuple(((gpu, kernel), v[i]) for gpu, kernel, v in rows if v[i] is not None)
        for i, m in enumerate(md.KERNEL_GAUGES)
    }


SGEMM, ELEMENTWISE = "ampere_sgemm_32x32_sliced1x4_tn", "at::native::vectorized_elementwise_kernel"
TRITON, A100 = "triton_poi_fused_add_cos_sin_0", "NVIDIA A100-SXM4-80GB"
FIXED = Snapshot(
    {
        **_kernel_rows(
            ("0", SGEMM, (19.5, 9.75, 0.25, 0.15, 1.25, 0.5, 40.0, 19.5)),
            ("0", ELEMENTWISE, (1286.8, 60.4, 1.0, 0.94, 20.1, 0.125, 300.0, 1286.8)),
            ("0", OTHER, (2.0, 1.5, None, None, None, 0.01, 12.5, -4.0)),
            ("1", TRITON, (0.5, 0.5, None, None, None, 0.002, 1000.0, None)),
        ),
        md.KERNEL_LAUNCHES_OBSERVED: ((("0", SGEMM), 120.0), (("0", OTHER), 37.0), (("1", TRITON), 3.0)),
        md.PROFILER_ARTIFACTS: ((("0", OTHER, "negative_warps_per_sm"), 2.0), (("0", OTHER, "unrounded_warps"), 5.0)),
        md.GPU_RESIDENT_WARPS_PER_SM: ((("0",), 40.0),),
        md.GPU_ESTIMATED_OCCUPANCY: ((("0",), 0.625),),
        md.GPU_BUSY: ((("0",), 0.875), (("1",), 0.0625)),
        md.GPU_LONGEST_KERNEL_RATIO: ((("0",), 0.125), (("1",), 0.75)),
        md.GPU_LOW_CONFIDENCE: ((("0",), 0.0), (("1",), 1.0)),
        **{
            m: ((("0",), v0), (("1",), v1))
            for m, v0, v1 in (
                (md.GPU_OBSERVED_SECONDS, 120.0, 120.0),
                (md.GPU_BUSY_SECONDS, 105.0, 7.5),
                (md.GPU_RESIDENT_WARPS_SECONDS, 4800.0, 0.0),
                (md.GPU_EMPTY_SECONDS, 3.0, 60.0),
                (md.GPU_LOW_CONFIDENCE_SECONDS, 0.0, 12.0),
            )
        },
        **{
            m: ((("0", SGEMM), sgemm), (("0", OTHER), other), (("1", TRITON), triton))
            for m, sgemm, other, triton in (
                (md.KERNEL_SECONDS, 30.0, 1.2, 0.24),
                (md.KERNEL_LAUNCHES_ESTIMATED, 4800.0, 1500.0, 120000.0),
                (md.KERNEL_WARPS_PER_SM_SECONDS, 585.0, 2.4, 0.12),
                (md.KERNEL_RESIDENT_WARPS_PER_SM_SECONDS, 292.5, 1.8, 0.12),
                (md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS, 7.5, 0.0, 0.0),
                (md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, 4.5, 0.0, 0.0),
                (md.KERNEL_WAVES_PER_SM_SECONDS, 37.5, 0.0, 0.0),
            )
        },
        md.GPU_INFO: (
            (("0", A100, "8.0", "108", "nvidia", "GPU-6f1d1a2e-5b7c-4e0d-9a3f-2c8b7e6d5f41"), 1.0),
            (("1", A100, "8.0", "108", "nvidia", ""), 1.0),
        ),
        md.KERNEL_INFO: ((("0", SGEMM, SGEMM), 1.0), (("1", TRITON, TRITON), 1.0)),
        md.WINDOWS: ((("ok",), 3.0), (("empty",), 1.0), (("failed",), 2.0), (("timed_out",), 0.0)),
        md.ERRORS: tuple(((stage, reason), 0.0) for stage, reason in FAULTS),
        md.LAST_WINDOW_TIMESTAMP: (((), 1_780_000_000.5),),
        md.CAPTURE_DUTY: (((), 1 / 60),),
        md.CAPTURE_PERIOD: (((), 60.0),),
        md.CAPTURE_WINDOW: (((), 1.0),),
        md.KERNELS_FOLDED: ((("0",), 7.0), (("1",), 0.0)),
        md.NVML_SM_OCCUPANCY: ((("0",), 0.5),),
        md.NVML_GPU_UTILIZATION: ((("0",), 0.75),),
        md.NVML_UP: (((), 1.0),),
        md.BUILD_INFO: ((("0.1.0",), 1.0),),
    },
    HistogramState().observe(0.004).observe(0.3).observe(2.0),
)


def fixed_text() -> str:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(FIXED))
    return generate_latest(registry).decode()


def test_the_exposition_of_a_fixed_snapshot_matches_the_golden_file() -> None:
    text = fixed_text()
    if os.environ.get("WARPWATCH_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_promtool_finds_nothing_to_complain_about() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus); CI installs it")
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=fixed_text(),
        capture_output=True,
        text=True,
        timeout=hang_guard(30),
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_openmetrics_is_served_when_the_scraper_asks_for_it() -> None:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(FIXED))
    encoder, content_type = choose_encoder("application/openmetrics-text; version=1.0.0; charset=utf-8")
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    text = encoder(registry).decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["warpwatch_windows"].type == "counter"
    assert any(
        s.name == "warpwatch_windows_total" and s.labels == {"outcome": "failed"} and s.value == 2.0
        for s in families["warpwatch_windows"].samples
    )
    assert families["warpwatch_window_processing_seconds"].type == "histogram"
    _, plain_type = choose_encoder("text/plain")
    assert plain_type.startswith("text/plain; version=0.0.4")


def test_non_finite_values_are_not_special_cased_away() -> None:
    """The exporter passes what analysis gives; analysis never gives inf/nan for a gauge."""
    snap = Snapshot({md.KERNEL_WARPS_PER_SM: ((("0", "k"), math.inf),)})
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(snap))
    assert registry.get_sample_value("warpwatch_kernel_warps_per_sm", {"gpu": "0", "kernel": "k"}) == math.inf
