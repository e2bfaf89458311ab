"""Per-launch fields and window statistics, with expected values written as arithmetic from the spec."""

from __future__ import annotations

import math

import pytest

from support.tracebuild import A100, kernel, span, trace_doc
from warpwatch.analysis import windowmath
from warpwatch.analysis.window import analyze, launch_metrics, sampling_weight, window_of
from warpwatch.model import KernelLaunch, TraceWindow
from warpwatch.trace import parse_trace


@pytest.fixture(autouse=True, params=["compiled", "python"])
def loops(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test twice: the per-launch loops in C (`_windowmath.c`) and in Python."""
    if request.param == "python":
        monkeypatch.setattr(windowmath, "NATIVE", False)


def parse(doc: dict) -> object:
    import json

    return parse_trace(json.dumps(doc).encode(), "test.json")


def only_launch(doc: dict):
    trace = parse(doc)
    (lm,) = list(launch_metrics(trace))
    return lm


def test_warps_per_sm_is_blocks_times_rounded_up_warps_over_sms() -> None:
    lm = only_launch(trace_doc([span(0, 1000), kernel(grid=(100, 2, 3), block=(96, 1, 1))]))
    assert lm.warps_per_block == 3
    assert lm.warps_per_sm == pytest.approx(100 * 2 * 3 * 3 / 132)


def test_grid_of_two_to_the_31_blocks_is_reported_negative_and_corrected() -> None:
    """The issue's example: grid (65536, 32768, 1) x 128 threads on a 132-SM H100."""
    lm = only_launch(trace_doc([span(0, 1000), kernel(grid=(65536, 32768, 1), block=(128, 1, 1))]))
    assert round(lm.reported_warps_per_sm) == -65_075_262
    assert lm.warps_per_sm == pytest.approx(2**31 * 4 / 132)
    assert "grid_overflow" in lm.artifacts
    assert "negative_warps_per_sm" in lm.artifacts
    assert "sm_count_invalid" not in lm.artifacts


def test_grid_of_two_to_the_32_blocks_wraps_to_zero_and_is_flagged() -> None:
    lm = only_launch(trace_doc([span(0, 1000), kernel(grid=(65536, 65536, 1), block=(32, 1, 1))]))
    assert lm.reported_warps_per_sm == 0.0
    assert lm.warps_per_sm == pytest.approx(2**32 / 132)
    assert lm.artifacts == ("grid_overflow",)


def test_sm_count_of_minus_one_from_pytorch_1_8_is_detected() -> None:
    """PyTorch 1.8.x used numSms = -1: warps per SM = -(total warps); deviceProperties is right."""
    k = kernel(grid=(50, 1, 1), block=(256, 1, 1), sms=None)
    k["args"]["warps per SM"] = -(50 * 256 / 32)
    lm = only_launch(trace_doc([span(0, 1000), k]))
    assert lm.warps_per_sm == pytest.approx(50 * 8 / 132)
    assert set(lm.artifacts) == {"negative_warps_per_sm", "sm_count_invalid"}


def test_inf_strings_with_empty_device_properties_are_unknown_not_zero() -> None:
    k = kernel(grid=(10, 1, 1), block=(128, 1, 1), sms=None)
    k["args"].update({"blocks per SM": "inf", "warps per SM": "inf", "est. achieved occupancy %": 0})
    lm = only_launch(trace_doc([span(0, 1000), k], devices=[]))
    assert lm.warps_per_sm is None and lm.theoretical_occupancy is None and lm.estimated_occupancy is None
    assert lm.reported_warps_per_sm == "inf"
    assert set(lm.artifacts) == {"non_finite", "sm_count_invalid"}


def test_bare_inf_in_the_file_is_read_and_flagged() -> None:
    text = (
        '{"deviceProperties": [], "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7,'
        ' "ts": 1, "dur": 2, "args": {"device": 0, "grid": [1,1,1], "block": [64,1,1],'
        ' "blocks per SM": inf, "warps per SM": -inf, "est. achieved occupancy %": nan}}]}'
    )
    (lm,) = list(launch_metrics(parse_trace(text.encode(), "bare.json")))
    assert lm.reported_warps_per_sm == "-inf"
    assert {"non_finite", "sm_count_invalid", "negative_warps_per_sm"} <= set(lm.artifacts)


def test_occupancy_sentinel_minus_100_is_flagged_and_replaced() -> None:
    lm = only_launch(trace_doc([span(0, 1000), kernel(grid=(264, 1, 1), block=(256, 1, 1), occupancy=-100)]))
    assert "occupancy_sentinel" in lm.artifacts
    # 256 threads = 8 warps; warps limit 64 / 8 = 8 blocks per SM at 32 registers: theoretical 100 %.
    assert lm.max_active_blocks_per_sm == 8
    assert lm.theoretical_occupancy == pytest.approx(8 * 8 / 64)


def test_zero_percent_for_a_99_kib_shared_memory_kernel_that_fits_two_blocks() -> None:
    """H100: 233472 bytes per SM; a 99 KiB block plus the 1 KiB reserve takes 100 KiB: 2 fit."""
    smem = 99 * 1024
    lm = only_launch(
        trace_doc([span(0, 1000), kernel(grid=(132, 1, 1), block=(128, 1, 1), regs=128, smem=smem, occupancy=0)])
    )
    assert lm.max_active_blocks_per_sm == 233472 // (smem + 1024) == 2
    assert lm.limiting_factors == ("shared_memory",)
    assert lm.theoretical_occupancy == pytest.approx(2 * 4 / 64)
    assert "occupancy_smem_optin" in lm.artifacts


def test_48_thread_blocks_occupy_two_warps_and_are_flagged_unrounded() -> None:
    lm = only_launch(trace_doc([span(0, 1000), kernel(grid=(132, 1, 1), block=(48, 1, 1))]))
    assert lm.warps_per_block == 2
    assert lm.warps_per_sm == pytest.approx(132 * 2 / 132)
    assert lm.reported_warps_per_sm == pytest.approx(132 / 132 * 48 / 32)  # Kineto: 1.5
    assert "unrounded_warps" in lm.artifacts


def test_kernel_without_grid_and_block_is_unknown_not_zero() -> None:
    lm = only_launch(trace_doc([span(0, 1000), kernel(grid=None, block=None)]))
    assert lm.artifacts == ("missing_launch_config",)
    assert lm.warps_per_sm is None and lm.resident_warps_per_sm is None and lm.waves_per_sm is None


def test_resident_warps_show_waves_and_the_partial_last_wave() -> None:
    """A100: 256 threads (8 warps), 32 regs -> 8 blocks per SM; 108 SMs -> 864 blocks per wave."""
    doc = trace_doc([span(0, 1000), kernel(grid=(1000, 1, 1), block=(256, 1, 1), sms=108)], devices=[A100])
    lm = only_launch(doc)
    assert lm.max_active_blocks_per_sm == 8
    assert lm.waves_per_sm == pytest.approx(1000 / 864)
    assert lm.resident_warps_per_sm == pytest.approx(8 * 1000 / (108 * 2))
    assert lm.estimated_occupancy == pytest.approx(8 * 1000 / (108 * 2) / 64)


def test_single_partial_wave_resident_equals_launched() -> None:
    doc = trace_doc([span(0, 1000), kernel(grid=(54, 1, 1), block=(256, 1, 1), sms=108)], devices=[A100])
    lm = only_launch(doc)
    assert lm.resident_warps_per_sm == pytest.approx(lm.warps_per_sm) == pytest.approx(54 * 8 / 108)


def test_block_that_cannot_fit_has_zero_theoretical_and_null_waves() -> None:
    """255 registers x 1024 threads needs 261,120 registers > 65,536 per SM."""
    lm = only_launch(trace_doc([span(0, 1000), kernel(grid=(10, 1, 1), block=(1024, 1, 1), regs=255)]))
    assert lm.max_active_blocks_per_sm == 0
    assert lm.theoretical_occupancy == 0.0
    assert lm.waves_per_sm is None and lm.resident_warps_per_sm is None and lm.estimated_occupancy is None


def test_amd_trace_uses_warp_size_64_and_no_cuda_calculator() -> None:
    mi250 = {
        "id": 0,
        "name": "AMD Radeon Graphics",
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 64,
        "sharedMemPerBlock": 65536,
        "numSms": 104,
        "maxSharedMemoryPerMultiProcessor": 65536,
    }
    lm = only_launch(trace_doc([span(0, 1000), kernel(grid=(208, 1, 1), block=(96, 1, 1), sms=None)], devices=[mi250]))
    assert lm.warps_per_block == 2
    assert lm.warps_per_sm == pytest.approx(208 * 2 / 104)
    assert lm.max_active_blocks_per_sm is None and lm.theoretical_occupancy is None


def test_short_and_long_kernel_in_a_1000_us_window_are_weighted_horvitz_thompson() -> None:
    """10 us and 900 us kernels in a 1000 us window: captured with probability 990/1000 and 100/1000."""
    doc = trace_doc(
        [
            span(0, 1000),
            kernel("short", ts=10, dur=10, grid=(132, 1, 1), block=(128, 1, 1)),
            kernel("long", ts=50, dur=900, grid=(264, 1, 1), block=(128, 1, 1)),
        ]
    )
    result = analyze(parse(doc))
    by_name = {k.name: k for k in result.kernels}
    h_short, h_long = 1000 / 990, 1000 / 100
    # the unbiased sums (what the counters add): Horvitz-Thompson
    assert by_name["short"].counted_launches == pytest.approx(h_short)
    assert by_name["long"].counted_launches == pytest.approx(h_long)
    assert by_name["short"].counted_gpu_time == pytest.approx(10 * h_short)
    assert by_name["long"].counted_gpu_time == pytest.approx(900 * h_long)
    # the window's figures, within what the trace proves: one stream, idle 10 us before the first
    # launch and 50 us after the last, where only dropped straddlers can hide (60 us, 2 launches)
    assert by_name["long"].gpu_time == pytest.approx(960) and by_name["short"].gpu_time == pytest.approx(10)
    assert by_name["long"].time_share == pytest.approx(0.96)
    assert by_name["long"].launches == pytest.approx(3) and by_name["short"].launches == pytest.approx(1)
    assert by_name["short"].launch_rate == pytest.approx(1 / 1e-3)
    assert by_name["long"].observed_gpu_time == 900 and by_name["long"].observed_time_share == 0.9
    assert [k.name for k in result.kernels] == ["long", "short"]
    resident_short = 132 * 4 / 132
    resident_long = 264 * 4 / 132
    expected = (10 * resident_short + 960 * resident_long) / 1000
    (dev,) = result.devices
    assert dev.resident_warps_per_sm == pytest.approx(expected)
    assert dev.estimated_occupancy == pytest.approx(expected / 64)
    assert dev.resident_time == pytest.approx(h_short * 10 * resident_short + h_long * 900 * resident_long)
    # busy: unbiased sum of h*d in the counters; the gauge between the union and it plus the edges
    assert dev.busy_time == pytest.approx(h_short * 10 + h_long * 900)
    assert dev.observed_busy_ratio == pytest.approx(0.91) and dev.busy_bounds == pytest.approx((0.91, 0.97))
    assert dev.busy_ratio == pytest.approx(0.97)
    assert dev.unbounded_busy_ratio == pytest.approx((h_short * 10 + h_long * 900) / 1000)
    assert "estimate bounded by what the trace shows" in dev.low_confidence_reasons
    assert "a captured launch runs 90% of the window: long kernels are under-sampled" in dev.low_confidence_reasons
    assert dev.low_confidence and dev.longest_kernel == 900


def test_kernel_means_are_weighted_by_corrected_gpu_time() -> None:
    doc = trace_doc(
        [
            span(0, 1000),
            kernel("k", ts=0, dur=10, grid=(132, 1, 1), block=(128, 1, 1)),
            kernel("k", ts=100, dur=30, grid=(264, 1, 1), block=(128, 1, 1)),
        ]
    )
    (k,) = analyze(parse(doc)).kernels
    h1, h2 = 1000 / 990, 1000 / 970
    x1, x2 = 132 * 4 / 132, 264 * 4 / 132
    assert k.warps_per_sm == pytest.approx((h1 * 10 * x1 + h2 * 30 * x2) / (h1 * 10 + h2 * 30))
    assert k.samples == 2


def test_busy_of_two_overlapping_kernels_takes_their_overlap_out_at_its_own_weight() -> None:
    """a = [100, 200), b = [150, 250): each is kept with probability 900/1000, both together
    (span 150 us) with probability 850/1000; their 50 us overlap counts once."""
    doc = trace_doc(
        [
            span(0, 1000),
            kernel("a", ts=100, dur=100),
            kernel("b", ts=150, dur=100),
        ]
    )
    (dev,) = analyze(parse(doc)).devices
    assert dev.busy_ratio == pytest.approx((2 * 100 * 1000 / 900 - 50 * 1000 / 850) / 1000)
    assert not dev.low_confidence


def test_busy_of_three_nested_kernels_is_inclusion_exclusion() -> None:
    """[0, 300), [100, 200), [150, 400) in a 1000 us window: singles, pairs and the triple, each
    weighted by 1000 / (1000 - its span)."""
    doc = trace_doc(
        [
            span(0, 1000),
            kernel("a", ts=0, dur=300),
            kernel("b", ts=100, dur=100),
            kernel("c", ts=150, dur=250),
        ]
    )
    (dev,) = analyze(parse(doc)).devices

    def h(span: float) -> float:
        return 1000 / (1000 - span)

    singles = 300 * h(300) + 100 * h(100) + 250 * h(250)
    # ab: [100,200) span 300; ac: [150,300) span 400; bc: [150,200) span 300
    pairs = 100 * h(300) + 150 * h(400) + 50 * h(300)
    triple = 50 * h(400)  # [150, 200), span 0..400
    assert dev.busy_ratio == pytest.approx((singles - pairs + triple) / 1000)
    assert dev.busy_time == pytest.approx(singles - pairs + triple)


def test_window_falls_back_to_requested_then_to_gpu_extent() -> None:
    doc = trace_doc([kernel(ts=100, dur=10), kernel(ts=300, dur=20)], baseTimeNanoseconds=1_000_000_000)
    trace = parse(doc)
    requested = window_of(trace, (1_000_000 + 50, 1_000_000 + 550))
    assert (requested.t0, requested.t1, requested.bounds) == (50, 550, "requested")
    estimated = window_of(trace)
    assert (estimated.t0, estimated.t1, estimated.bounds) == (100, 320, "estimated")


def test_a_launch_not_wholly_inside_the_window_does_not_count() -> None:
    """Kineto drops it; one seen here lies outside the bounds the agent asked for."""
    window = TraceWindow(0.0, 100.0, "requested")
    launch = KernelLaunch("k", 0, 90.0, 20.0, 7, (1, 1, 1), (32, 1, 1), 32, 0, None, None, None)
    assert sampling_weight(launch, window) == 0.0


def test_launches_wholly_inside_get_w_over_w_minus_d() -> None:
    window = TraceWindow(0.0, 100.0, "trace_span")
    launch = KernelLaunch("k", 0, 10.0, 20.0, 7, (1, 1, 1), (32, 1, 1), 32, 0, None, None, None)
    assert sampling_weight(launch, window) == pytest.approx(100 / 80)
    assert math.isclose(sum([100 / 80]), 1.25)


def test_window_without_span_or_gpu_events_is_empty_and_unbounded() -> None:
    result = analyze(parse(trace_doc([])))
    assert result.kernels == () and result.devices == () and result.window.bounds == "none"


def test_artifact_totals_and_per_kernel_counts_agree() -> None:
    doc = trace_doc(
        [
            span(0, 1000),
            kernel("a", ts=0, dur=1, block=(48, 1, 1)),
            kernel("a", ts=5, dur=1, block=(48, 1, 1)),
            kernel("b", ts=9, dur=1, grid=None, block=None),
        ]
    )
    result = analyze(parse(doc))
    assert result.artifacts == {"unrounded_warps": 2, "missing_launch_config": 1}
    assert {k.name: k.artifacts for k in result.kernels} == {
        "a": {"unrounded_warps": 2},
        "b": {"missing_launch_config": 1},
    }


def test_busy_time_is_inclusion_exclusion_over_every_set_of_launches_that_run_at_once() -> None:
    """Random launches on up to four streams against the definition: every subset with a common
    intersection, each term weighted by W / (W - its span)."""
    from itertools import combinations
    from random import Random

    from warpwatch.analysis.windowmath import MAX_OVERLAP, busy_time

    rng = Random(7)
    w = 1000.0
    for _ in range(200):
        intervals = []
        for _stream in range(rng.randint(1, MAX_OVERLAP + 1)):
            t = rng.uniform(0, 50)
            while t < 300:
                d = rng.uniform(1, 120)
                intervals.append((t, t + d))
                t += d + rng.uniform(0, 80)
        expected = 0.0
        for size in range(1, len(intervals) + 1):
            found = False
            for subset in combinations(intervals, size):
                common = min(e for _, e in subset) - max(s for s, _ in subset)
                if common <= 0:
                    continue
                found = True
                span = max(e for _, e in subset) - min(s for s, _ in subset)
                expected += (-1) ** (size + 1) * common * w / (w - span)
            if not found:
                break
        got, truncated = busy_time(intervals, w)
        assert not truncated
        assert got == pytest.approx(max(expected, 0.0), rel=1e-9, abs=1e-9)
