"""The Kernels board's panels that part what the code decides from what the load decides (issue 45).

The code: each kernel's launch resources (`warpwatch_kernel_launch_info`) and the theoretical
occupancy they give; the occupancy alerts watch these. The load: launches too small to fill the GPU
(waves per SM below 1), with the grid they were seen at (launched warps per SM: for an attention
kernel, heads x running sequences in units of the GPU) and the share of the code's capacity the grid
filled (estimated / theoretical occupancy). Information, never a page.
"""

from __future__ import annotations

from ..export import metricdefs as md
from . import queries as q
from .panels import COUNT, KERNEL_LEGEND, PERCENT, RANGE, RATE, PanelDef, Query, table_panel
from .settings import Settings, dashboard_series


def code_and_load_panels(s: Settings) -> tuple[PanelDef, ...]:
    def sel(metric: md.MetricDef) -> str:
        return dashboard_series(s, metric, "kernel")

    def mean(field: str, rng: str) -> str:
        return q.kernel_mean(sel, field, rng)

    resources = md.KERNEL_LAUNCH_INFO.labels[2:]
    return (
        table_panel(
            "Launch resources (what the code decides)",
            "Per kernel over the selected range: threads per block, registers per thread and shared memory "
            "per block of its launches with the most GPU time (warpwatch_kernel_launch_info), and the "
            "theoretical occupancy they give on this GPU. A kernel listed twice changed its resources in "
            "the range: a new build, library or autotune choice (WarpwatchKernelLaunchChanged).",
            (
                (f"max_over_time({sel(md.KERNEL_LAUNCH_INFO)}[{RANGE}])", None, ""),
                (mean("theoretical_occupancy", RANGE), "Theoretical occupancy", PERCENT),
            ),
            height=8,
            keep_labels=("namespace", "pod", "gpu", "kernel", *resources),
        ),
        PanelDef(
            "timeseries",
            "Launches too small to fill the GPU (what the load decides)",
            "Kernels whose mean waves per SM is below 1: their grid leaves SMs idle or partly filled, "
            "so their estimated occupancy sits below the theoretical one. Beside each, the grid it was "
            "seen at (launched warps per SM; an attention kernel's grid is heads x running sequences) "
            "and the share of the code's capacity the grid filled (estimated / theoretical occupancy). "
            "Expected at low load; not an alert.",
            COUNT,
            (
                Query(f"({mean('waves_per_sm', RATE)}) < 1", KERNEL_LEGEND + " waves"),
                Query(
                    f"({mean('warps_per_sm', RATE)})\n  and on (namespace, pod, gpu, kernel)\n"
                    f"  ({mean('waves_per_sm', RATE)}) < 1",
                    KERNEL_LEGEND + " launched warps/SM",
                ),
                Query(
                    f"({mean('estimated_occupancy', RATE)})\n  / ({mean('theoretical_occupancy', RATE)})\n"
                    f"  and on (namespace, pod, gpu, kernel)\n  ({mean('waves_per_sm', RATE)}) < 1",
                    KERNEL_LEGEND + " grid fill",
                ),
            ),
            min=0,
        ),
    )
