"""Prometheus export: snapshots, folding into `other`, merging windows, counters, exposition.

Every test builds a fresh CollectorRegistry and reads samples with `get_sample_value`; the
text format is pinned by tests/golden/metrics.prom (regenerate with WARPWATCH_UPDATE_GOLDEN=1)
and checked by the real promtool.
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

from support.exportkit import device, gauged, kernel, ok, publish, value, window
from support.patience import hang_guard
from warpwatch.export import metricdefs as md
from warpwatch.export.builder import (
    FAULTS,
    OTHER,
    GpuInfo,
    HistogramState,
    NvmlSample,
    Snapshot,
    SnapshotCollector,
    WindowResult,
)
from warpwatch.export.pooling import fold, merge_round
from warpwatch.export.snapshot import Sample

GOLDEN = Path(__file__).parent / "golden" / "metrics.prom"


# --------------------------------------------------------------------------------------------- gauges


def test_a_single_window_is_exported_exactly_as_analysed() -> None:
    k = kernel(
        "ampere_sgemm_32x32_sliced1x4_tn",
        250_000.0,
        samples=40,
        warps_per_sm=19.5,
        resident_warps_per_sm=9.75,
        theoretical_occupancy=0.25,
        estimated_occupancy=0.15,
        waves_per_sm=1.2,
        reported_warps_per_sm_min=-3.0,
    )
    reg = publish(gauged(top_kernels=50), ok(window([k], [device(busy=0.4, resident=12.0)])))
    labels = {"gpu": "0", "kernel": "ampere_sgemm_32x32_sliced1x4_tn"}
    assert value(reg, md.KERNEL_WARPS_PER_SM, **labels) == 19.5
    assert value(reg, md.KERNEL_RESIDENT_WARPS_PER_SM, **labels) == 9.75
    assert value(reg, md.KERNEL_THEORETICAL_OCCUPANCY, **labels) == 0.25
    assert value(reg, md.KERNEL_ESTIMATED_OCCUPANCY, **labels) == 0.15
    assert value(reg, md.KERNEL_WAVES_PER_SM, **labels) == 1.2
    assert value(reg, md.KERNEL_TIME_SHARE, **labels) == 0.25
    assert value(reg, md.KERNEL_LAUNCH_RATE, **labels) == 40.0
    assert value(reg, md.KERNEL_REPORTED_WARPS_MIN, **labels) == -3.0
    assert value(reg, md.KERNEL_LAUNCHES_OBSERVED, **labels) == 0.0  # counters start at 0 (below)
    assert value(reg, md.GPU_BUSY, gpu="0") == 0.4
    assert value(reg, md.GPU_RESIDENT_WARPS_PER_SM, gpu="0") == 12.0
    assert value(reg, md.GPU_ESTIMATED_OCCUPANCY, gpu="0") == 12.0 / 64
    assert (
        value(
            reg,
            md.GPU_INFO,
            gpu="0",
            name="NVIDIA H100 80GB HBM3",
            compute_capability="9.0",
            sms="132",
            vendor="nvidia",
            uuid="",
        )
        == 1.0
    )
    # From the label to the full name in one step.
    assert (
        value(
            reg,
            md.KERNEL_INFO,
            gpu="0",
            kernel="ampere_sgemm_32x32_sliced1x4_tn",
            name="ampere_sgemm_32x32_sliced1x4_tn",
        )
        == 1.0
    )


def test_unknown_values_export_no_sample_never_zero() -> None:
    k = kernel("rocm_kernel", 1000.0)  # every mean unknown, as for a kernel without grid/block
    reg = publish(gauged(top_kernels=50), ok(window([k], [device(resident=None, props=None)])))
    labels = {"gpu": "0", "kernel": "rocm_kernel"}
    for m in (
        md.KERNEL_WARPS_PER_SM,
        md.KERNEL_RESIDENT_WARPS_PER_SM,
        md.KERNEL_THEORETICAL_OCCUPANCY,
        md.KERNEL_ESTIMATED_OCCUPANCY,
        md.KERNEL_WAVES_PER_SM,
        md.KERNEL_REPORTED_WARPS_MIN,
    ):
        assert value(reg, m, **labels) is None, m.name
    assert value(reg, md.KERNEL_TIME_SHARE, **labels) == 0.001
    assert value(reg, md.GPU_RESIDENT_WARPS_PER_SM, gpu="0") is None
    assert value(reg, md.GPU_BUSY, gpu="0") == 0.5
    text = generate_latest(reg).decode()
    assert 'warpwatch_kernel_warps_per_sm{gpu="0"' not in text
    assert "warpwatch_gpu_info{" not in text


def test_kernels_beyond_top_k_fold_into_other() -> None:
    ks = [
        kernel("a", 400.0, samples=4, warps_per_sm=10.0),
        kernel("b", 300.0, samples=3, warps_per_sm=20.0),
        kernel("c", 20.0, samples=2, warps_per_sm=0.6, reported_warps_per_sm_min=5.0, artifacts={"unrounded_warps": 2}),
        kernel(
            "d",
            50.0,
            samples=5,
            warps_per_sm=1.0,
            reported_warps_per_sm_min=-1.0,
            artifacts={"unrounded_warps": 1, "negative_warps_per_sm": 5},
        ),
        kernel("e", 10.0, samples=1),  # warps unknown: no weight in the mean
    ]
    builder = gauged(top_kernels=2)
    publish(builder, ok(window(ks, [device()])))  # the GPU's first round only creates its counters
    reg = publish(builder, ok(window(ks, [device()])))
    other = {"gpu": "0", "kernel": OTHER}
    assert value(reg, md.KERNEL_WARPS_PER_SM, gpu="0", kernel="a") == 10.0
    assert value(reg, md.KERNEL_WARPS_PER_SM, gpu="0", kernel="c") is None
    assert value(reg, md.KERNEL_WARPS_PER_SM, **other) == pytest.approx((0.6 * 20 + 1.0 * 50) / (20 + 50))
    assert value(reg, md.KERNEL_TIME_SHARE, **other) == pytest.approx((20 + 50 + 10) / 1e6)
    assert value(reg, md.KERNEL_LAUNCH_RATE, **other) == pytest.approx(2 + 5 + 1)
    assert value(reg, md.KERNEL_REPORTED_WARPS_MIN, **other) == -1.0
    assert value(reg, md.KERNEL_LAUNCHES_OBSERVED, **other) == 8.0
    assert value(reg, md.PROFILER_ARTIFACTS, **other, artifact="unrounded_warps") == 3.0
    assert value(reg, md.PROFILER_ARTIFACTS, **other, artifact="negative_warps_per_sm") == 5.0
    assert value(reg, md.KERNELS_FOLDED, gpu="0") == 6.0  # 3 in each of the two rounds


def test_label_count_is_bounded_by_top_k_plus_other() -> None:
    ks = [kernel(f"kernel_{i:03d}", 1000.0 - i) for i in range(200)]
    reg = publish(gauged(top_kernels=50), ok(window(ks, [device()])))
    samples = [s for fam in reg.collect() if fam.name == md.KERNEL_TIME_SHARE.name for s in fam.samples]
    assert len(samples) == 51
    assert {s.labels["kernel"] for s in samples} == {f"kernel_{i:03d}" for i in range(50)} | {OTHER}


def test_kernels_that_disappear_are_gone_from_the_next_snapshot_but_their_counters_stay() -> None:
    builder = gauged(top_kernels=50)
    first = publish(builder, ok(window([kernel("a", 10.0, samples=3), kernel("b", 5.0, samples=2)], [device()])))
    assert value(first, md.KERNEL_TIME_SHARE, gpu="0", kernel="b") == 5e-6
    second = publish(builder, ok(window([kernel("a", 20.0, samples=4)], [device()])))
    assert value(second, md.KERNEL_TIME_SHARE, gpu="0", kernel="b") is None
    assert value(second, md.KERNEL_TIME_SHARE, gpu="0", kernel="a") == 2e-5
    assert value(second, md.KERNEL_LAUNCHES_OBSERVED, gpu="0", kernel="a") == 4.0  # round 1 created it at 0
    assert value(second, md.KERNEL_LAUNCHES_OBSERVED, gpu="0", kernel="b") == 0.0
    assert value(second, md.WINDOWS, outcome="ok") == 2.0


def test_a_failed_window_changes_no_gauge_and_counts_once() -> None:
    builder = gauged(top_kernels=50)
    good = publish(builder, ok(window([kernel("a", 10.0)], [device(busy=0.7)])), now=100.0)
    assert value(good, md.GPU_BUSY, gpu="0") == 0.7
    bad = publish(builder, WindowResult("dir:/x", "p0", "failed", 0.002), now=160.0)
    assert value(bad, md.GPU_BUSY, gpu="0") == 0.7
    assert value(bad, md.KERNEL_TIME_SHARE, gpu="0", kernel="a") == 1e-5
    assert value(bad, md.WINDOWS, outcome="failed") == 1.0
    assert value(bad, md.WINDOWS, outcome="ok") == 1.0
    assert value(bad, md.WINDOWS, outcome="timed_out") == 0.0
    assert value(bad, md.LAST_WINDOW_TIMESTAMP) == 160.0
    assert value(bad, md.WINDOW_PROCESSING, "_count") == 2.0
    assert value(bad, md.WINDOW_PROCESSING, "_bucket", le="0.005") == 1.0


def test_an_empty_window_changes_no_gauge() -> None:
    builder = gauged(top_kernels=50)
    publish(builder, ok(window([kernel("a", 10.0)], [device(busy=0.7)])))
    empty = window([], [])
    reg = publish(builder, WindowResult("dir:/x", "p0", "empty", 0.001, empty))
    assert value(reg, md.GPU_BUSY, gpu="0") == 0.7
    assert value(reg, md.WINDOWS, outcome="empty") == 1.0


def test_gpus_not_in_a_round_keep_their_last_window() -> None:
    builder = gauged(top_kernels=50)
    publish(builder, ok(window([kernel("a", 10.0, device=1)], [device(1, busy=0.3)]), process="rank1"))
    reg = publish(builder, ok(window([kernel("b", 10.0)], [device(0, busy=0.6)]), process="rank0"))
    assert value(reg, md.GPU_BUSY, gpu="1") == 0.3
    assert value(reg, md.GPU_BUSY, gpu="0") == 0.6
    assert value(reg, md.KERNEL_TIME_SHARE, gpu="1", kernel="a") == 1e-5


# --------------------------------------------------------------------------------------------- merging


def test_two_processes_on_one_gpu_add_their_rates() -> None:
    a = window([kernel("gemm", 300_000.0, samples=3, warps_per_sm=8.0)], [device(busy=0.5, resident=10.0)])
    b = window(
        [kernel("gemm", 100_000.0, samples=1, warps_per_sm=4.0), kernel("copy", 50_000.0)],
        [device(busy=0.7, resident=60.0)],
    )
    merged = merge_round([("p1", a), ("p2", b)])[0]
    gemm = next(k for k in merged.kernels if k.name == "gemm")
    assert gemm.time_share == pytest.approx(0.3 + 0.1)
    assert gemm.launch_rate == pytest.approx(3 + 1)
    assert gemm.warps_per_sm == pytest.approx((8.0 * 300_000 + 4.0 * 100_000) / 400_000)
    assert gemm.samples == 4
    assert merged.device.busy_ratio == pytest.approx(1.2)  # 0.5 + 0.7: not capped (a cap biases pooling)
    assert merged.device.resident_warps_per_sm == 70.0  # 10 + 60
    assert merged.device.estimated_occupancy == pytest.approx(70 / 64)
    assert [k.name for k in merged.kernels] == ["gemm", "copy"]


def test_windows_of_one_process_are_pooled_over_time() -> None:
    w1 = window([kernel("gemm", 500_000.0, window_us=1e6, samples=5)], [device(busy=0.5)], window_us=1e6)
    w2 = window([kernel("copy", 300_000.0, window_us=3e6, samples=6)], [device(busy=0.1)], window_us=3e6)
    merged = merge_round([("p", w1), ("p", w2)])[0]
    by = {k.name: k for k in merged.kernels}
    assert by["gemm"].time_share == pytest.approx(0.5 * 1 / 4)  # (0.5 * 1 s + 0 * 3 s) / 4 s
    assert by["gemm"].launch_rate == pytest.approx(5 / 4)
    assert by["copy"].time_share == pytest.approx(0.1 * 3 / 4)
    assert merged.device.busy_ratio == pytest.approx((0.5 * 1 + 0.1 * 3) / 4)


def test_fold_keeps_the_members_and_sums_the_rest_into_other() -> None:
    ks = [kernel("a", 2.0), kernel("b", 1.0)]
    assert fold(ks, {"a", "b", "c"}) == (ks, None, 0)
    top, other, folded = fold(ks, {"a"})
    assert (top, folded) == ([ks[0]], 1)
    assert other is not None
    assert other.name == OTHER
    assert other.time_share == ks[1].time_share


# --------------------------------------------------------------------------------------------- NVML, names


def test_nvml_is_down_by_default_and_reports_when_up() -> None:
    builder = gauged(top_kernels=5)
    reg = publish(builder)
    assert value(reg, md.NVML_UP) == 0.0
    assert value(reg, md.NVML_SM_OCCUPANCY, gpu="0") is None
    builder.set_nvml(
        True,
        [NvmlSample("0", sm_occupancy=0.42, utilization=0.9)],
        {"0": GpuInfo("0", "NVIDIA H200", "9.0", "132", "nvidia", "GPU-1")},
    )
    reg = publish(builder)
    assert value(reg, md.NVML_UP) == 1.0
    assert value(reg, md.NVML_SM_OCCUPANCY, gpu="0") == 0.42
    assert value(reg, md.NVML_GPU_UTILIZATION, gpu="0") == 0.9
    assert (
        value(
            reg,
            md.GPU_INFO,
            gpu="0",
            name="NVIDIA H200",
            compute_capability="9.0",
            sms="132",
            vendor="nvidia",
            uuid="GPU-1",
        )
        == 1.0
    )
    # The traced process's own device properties win for its gpu index.
    reg = publish(builder, ok(window([kernel("a", 1.0)], [device()])))
    assert (
        value(
            reg,
            md.GPU_INFO,
            gpu="0",
            name="NVIDIA H100 80GB HBM3",
            compute_capability="9.0",
            sms="132",
            vendor="nvidia",
            uuid="",
        )
        == 1.0
    )
    assert (
        value(
            reg,
            md.GPU_INFO,
            gpu="0",
            name="NVIDIA H200",
            compute_capability="9.0",
            sms="132",
            vendor="nvidia",
            uuid="GPU-1",
        )
        is None
    )


def test_long_and_colliding_kernel_names_get_bounded_distinct_labels() -> None:
    a = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1> >(int)"
    )
    b = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, "
        "at::detail::Array<char*, 2> >(int)"
    )
    reg = publish(gauged(top_kernels=5), ok(window([kernel(a, 2.0), kernel(b, 1.0)], [device()])))
    labels = {s.labels["kernel"] for fam in reg.collect() if fam.name == md.KERNEL_TIME_SHARE.name for s in fam.samples}
    assert labels == {  # the functor tells them apart (warpwatch.names.labels)
        "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1>>",
        "at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, at::detail::Array<char*, 2>>",
    }


def test_every_family_comes_from_metricdefs_with_its_help() -> None:
    collector = SnapshotCollector()
    families = {f.name: f for f in collector.collect()}
    assert set(families) == {m.name for m in md.ALL}
    for m in md.ALL:
        assert families[m.name].documentation == m.help
        assert families[m.name].type == m.type
    assert {f.name for f in collector.describe()} == {m.name for m in md.ALL}


def test_counters_never_go_back_when_series_are_bounded() -> None:
    builder = gauged(top_kernels=3, max_counter_series=4)
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for i in range(30):
        reg = publish(builder, ok(window([kernel(f"k{i % 12}", 1.0 + i % 5, samples=2)], [device()])))
        samples = [
            (fam.name, s)
            for fam in reg.collect()
            if fam.name.startswith("warpwatch_kernel_") and fam.type == "counter"
            for s in fam.samples
            if s.name.endswith("_total")
        ]
        for name in {n for n, _ in samples}:
            assert len([s for n, s in samples if n == name]) <= 4
        for name, s in samples:
            key = (name, tuple(sorted(s.labels.items())))
            assert s.value >= seen.get(key, 0.0), key
            seen[key] = s.value


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


# --------------------------------------------------------------------------------------------- exposition


def _kernel_rows(*rows: tuple[str, str, tuple[float | None, ...]]) -> dict[md.MetricDef, tuple[Sample, ...]]:
    """Per-kernel gauge samples from (gpu, kernel, values in the order of `KERNEL_GAUGES`); None: no sample."""
    return {
        m: tuple(((gpu, kernel), v[i]) for gpu, kernel, v in rows if v[i] is not None)
        for i, m in enumerate(KERNEL_GAUGES)
    }


KERNEL_GAUGES = (
    md.KERNEL_WARPS_PER_SM,
    md.KERNEL_RESIDENT_WARPS_PER_SM,
    md.KERNEL_THEORETICAL_OCCUPANCY,
    md.KERNEL_ESTIMATED_OCCUPANCY,
    md.KERNEL_WAVES_PER_SM,
    md.KERNEL_TIME_SHARE,
    md.KERNEL_LAUNCH_RATE,
    md.KERNEL_REPORTED_WARPS_MIN,
)
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


def test_unnamed_processes_on_different_gpus_are_not_diluted_by_each_other() -> None:
    """Files with neither a worker name nor a rank share one identity; each GPU pools only the
    windows that saw it."""
    w0 = window([kernel("gemm", 500_000.0)], [device(0, busy=0.5)], window_us=1e6)
    w1 = window([kernel("gemm", 250_000.0, device=1)], [device(1, busy=0.25)], window_us=1e6)
    merged = merge_round([("dir:/t||rank=", w0), ("dir:/t||rank=", w1)])
    assert merged[0].device.busy_ratio == 0.5
    assert merged[1].device.busy_ratio == 0.25
    assert merged[1].kernels[0].time_share == 0.25
