"""The keep rule over windows analysed by the real reader and analysis.

Occupancies by hand (H100: 132 SMs, 64 warps per SM, 65,536 registers in 4 partitions of 16,384; a
128-thread block is 4 warps): with r registers per thread a warp takes 32*r registers, so
floor(16,384 / (32*r)) warps fit in each partition and b = 4 * that / 4 blocks on an SM, at most 16
(warps): r = 32 -> 16 blocks, 40 -> 12, 48 -> 10, 56 -> 9, 72 -> 7, 255 (8,160, allocated as 8,192)
-> 2. The theoretical occupancy is 4*b/64 whatever the grid; the estimated one moves with the grid
(issue 45: the rule judges the first).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.analysis.window import analyze
from warpwatch.dashboards.settings import Settings
from warpwatch.evidence.rule import BASELINE_INTERVAL_S, KeepRule
from warpwatch.model import WindowAnalysis
from warpwatch.trace import read_trace

SMS = 132


def window(tmp_path: Path, *kernels: dict[str, object]) -> WindowAnalysis:
    path = write(tmp_path / f"w{len(list(tmp_path.iterdir()))}.json", trace_doc([span(0, 1000), *kernels]))
    return analyze(read_trace(path))


REGISTERS = {16: 32, 12: 40, 10: 48, 9: 56, 7: 72, 2: 255}
"""Registers per thread that fit b blocks of 128 threads on an SM (module docstring)."""


def gemm(blocks_per_sm: int, dur: float = 100.0, waves: int = 4) -> dict[str, object]:
    """A kernel taking dur/1000 of the window at theoretical occupancy 4*blocks_per_sm/64, its grid
    `waves` full waves (the load's part)."""
    grid = (SMS * 16 * waves, 1, 1)
    return kernel("gemm", ts=100, dur=dur, grid=grid, regs=REGISTERS[blocks_per_sm])


def test_the_occupancies_are_what_the_arithmetic_says(tmp_path: Path) -> None:
    for b in (16, 10, 12, 9, 7, 2):
        (k,) = window(tmp_path, gemm(b)).kernels
        assert k.theoretical_occupancy == pytest.approx(4 * b / 64)


def test_a_quiet_hour_is_not_degraded(tmp_path: Path) -> None:
    """Issue 45: the grid falls to one block per SM (1/16 of a wave, estimated occupancy 4/64) at the
    same launch resources: the load fell, not the code."""
    rule = KeepRule()
    for t in range(3):
        rule.judge(window(tmp_path, gemm(16)), float(t))
    quiet = window(tmp_path, kernel("gemm", ts=100, dur=100, grid=(SMS, 1, 1)))
    assert quiet.kernels[0].estimated_occupancy == pytest.approx(4 / 64)
    assert rule.judge(quiet, 3.0).reason is None


def test_one_ordinary_window_an_hour_is_kept_as_a_baseline(tmp_path: Path) -> None:
    rule, w = KeepRule(), window(tmp_path, gemm(16))
    assert rule.judge(w, 1000.0).reason == "baseline"
    assert rule.judge(w, 1000.0 + BASELINE_INTERVAL_S - 1).reason is None
    assert rule.judge(w, 1000.0 + BASELINE_INTERVAL_S).reason == "baseline"
    assert rule.judge(w, 1000.0 + BASELINE_INTERVAL_S + 1).reason is None


def test_a_kernel_below_its_recent_level_by_the_alert_ratio_is_degraded(tmp_path: Path) -> None:
    rule = KeepRule()
    for t in range(3):
        rule.judge(window(tmp_path, gemm(16)), float(t))
    mild = rule.judge(window(tmp_path, gemm(12)), 3.0)  # 0.75 >= 0.7 * 1.0
    assert mild.reason is None
    verdict = rule.judge(window(tmp_path, gemm(10)), 4.0)  # 0.625 < 0.7 * mean(1, 1, 1, 0.75) = 0.65625
    assert verdict.reason == "degraded"
    (d,) = verdict.degraded
    assert (d.gpu, d.kernel) == (0, "gemm")
    assert d.occupancy == pytest.approx(40 / 64)
    assert d.level == pytest.approx((1 + 1 + 1 + 0.75) / 4)


def test_a_kernel_seen_in_fewer_than_three_windows_has_no_level_yet(tmp_path: Path) -> None:
    rule = KeepRule()
    for t in range(2):
        rule.judge(window(tmp_path, gemm(16)), float(t))
    assert rule.judge(window(tmp_path, gemm(2)), 2.0).reason is None


def test_a_kernel_below_the_alerts_time_share_is_not_degraded(tmp_path: Path) -> None:
    rule = KeepRule()
    for t in range(3):
        rule.judge(window(tmp_path, gemm(16, dur=40)), float(t))
    assert rule.judge(window(tmp_path, gemm(2, dur=40)), 3.0).reason is None  # 4 % of the window


def test_the_thresholds_are_the_alerts_settings(tmp_path: Path) -> None:
    rule = KeepRule.from_settings(Settings(degraded_ratio=0.5))
    for t in range(3):
        rule.judge(window(tmp_path, gemm(16)), float(t))
    assert rule.judge(window(tmp_path, gemm(9)), 3.0).reason is None  # 0.5625 >= 0.5
    assert rule.judge(window(tmp_path, gemm(7)), 4.0).reason == "degraded"  # 0.4375 < 0.5 * mean(1, 1, 1, 0.5625)


def test_a_profiler_artefact_is_kept_first(tmp_path: Path) -> None:
    rule = KeepRule()
    rule.judge(window(tmp_path, gemm(16)), 0.0)
    overflowed = window(tmp_path, kernel("huge", ts=100, dur=100, grid=(2**31, 1, 1)))
    assert overflowed.artifacts.get("grid_overflow")
    assert rule.judge(overflowed, 1.0).reason == "artifact"


def test_a_low_confidence_window_is_kept(tmp_path: Path) -> None:
    rule = KeepRule()
    rule.judge(window(tmp_path, gemm(16)), 0.0)
    long = window(tmp_path, kernel("long", ts=100, dur=600))
    assert long.devices[0].low_confidence
    assert rule.judge(long, 1.0).reason == "low_confidence"
