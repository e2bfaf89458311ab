"""A known serving load cycle of several deployments, as the counters their agents would export.

Each deployment runs engine steps of a GEMM (its grid set by the weights) and an attention kernel
whose grid is heads x running sequences (vLLM's paged attention: one block per head and sequence).
By day (08:00-18:00) 64 sequences run and the GPU is busy 70 %; in the evening (18:00-22:00) 32 and
45 %; at night 8 and 20 %. The launch configurations are real: the GEMM's and the stand-in attention
kernel's block size, registers and shared memory are those of launches in HTA's A100 trace
(`negative_queue_length_values_check/rank0.json.gz`, read with the real reader), on that trace's
A100 (108 SMs); only the attention grid is the load's. Every per-launch figure (theoretical and
estimated occupancy, resident warps, waves) comes from the real analysis (`launch_metrics`); the
counters add them as the spec says (Σ d·x per kernel, h = 1: the sampling correction is tested
elsewhere). A kernel's time per step follows its waves: ceil(waves) x `WAVE_US`.

Changes a deployment may carry (`Change`): the attention kernel's registers raised so that half the
blocks fit (`regress`), or the attention kernel swapped for another real kernel's resources under a
new name (`swap`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from warpwatch.analysis.window import launch_metrics
from warpwatch.export import metricdefs as md
from warpwatch.model import KernelLaunch, LaunchMetrics, Trace, TraceWindow
from warpwatch.trace import read_trace

from .paths import HTA

TRACE = HTA / "negative_queue_length_values_check/rank0.json.gz"
GEMM_SOURCE = "cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1"
"""grid (256, 2, 3), block 256, 241 registers, 147,456 B shared memory: 1 block of 8 warps per SM."""
ATTN_SOURCE = "CatArrayBatchedCopy"
"""block 512, 18 registers, no shared memory: 4 blocks (64 warps) per SM, limited by warps."""
SWAP_SOURCE = "triton__0d1d2d3d4d5d6d7d8d9d10d11d12d13d14"
"""block 256, 190 registers, 1,024 B shared memory: 1 block per SM, limited by registers."""
ATTN, GEMM, SWAPPED = "paged_attention_v1_kernel", "cutlass_80_gemm_256x128", "flash_fwd_splitkv_kernel"
HEADS = 32
REGRESSED_REGISTERS = 64
"""64 registers x 512 threads = 32,768 of the SM's 65,536: 2 blocks per SM instead of 4."""
WAVE_US = 100.0
STEP_S = 60


def load_at(minute: int) -> tuple[int, float]:
    """(running sequences, busy share) at `minute` of the timeline (minute 0 is midnight)."""
    hour = (minute // 60) % 24
    if 8 <= hour < 18:
        return 64, 0.70
    if 18 <= hour < 22:
        return 32, 0.45
    return 8, 0.20


@dataclass(frozen=True, slots=True)
class Change:
    """What happens to a deployment's attention kernel at `at` (minutes): `regress` or `swap`."""

    kind: str
    at: int


@dataclass(frozen=True, slots=True)
class Deployment:
    name: str
    gemm_us: float
    """GEMM time per engine step (its grid is fixed: the load does not move it)."""
    change: Change | None = None


@cache
def _source() -> Trace:
    return read_trace(TRACE)


def _real_launch(name_part: str) -> KernelLaunch:
    return next(k for k in _source().launches if name_part in k.name and k.block is not None)


def _metrics(launch: KernelLaunch) -> LaunchMetrics:
    """The real analysis of one launch on the trace's device."""
    trace = _source()
    one = Trace(trace.path, trace.devices, (launch,), TraceWindow(0.0, 1e9, "trace_span"), None)
    (lm,) = launch_metrics(one)
    return lm


@cache
def kernel_figures(kernel: str, sequences: int, regressed: bool = False) -> tuple[KernelLaunch, LaunchMetrics]:
    """One launch of `kernel` at `sequences` running sequences, and its real metrics."""
    if kernel == GEMM:
        launch = _real_launch(GEMM_SOURCE)
    else:
        source = _real_launch(SWAP_SOURCE if kernel == SWAPPED else ATTN_SOURCE)
        regs = REGRESSED_REGISTERS if regressed else source.registers_per_thread
        launch = KernelLaunch(
            kernel, source.device, 0.0, 10.0, 7, (HEADS * sequences, 1, 1), source.block, regs,
            source.shared_memory, None, None, None,
        )  # fmt: skip
    return launch, _metrics(launch)


def _step(d: Deployment, minute: int) -> list[tuple[str, KernelLaunch, LaunchMetrics, float]]:
    """(kernel, launch, metrics, µs per engine step) of one engine step at `minute`."""
    sequences, _ = load_at(minute)
    changed = d.change is not None and minute >= d.change.at
    attn = SWAPPED if changed and d.change is not None and d.change.kind == "swap" else ATTN
    regressed = changed and d.change is not None and d.change.kind == "regress"
    out = []
    for kernel, fixed in ((GEMM, d.gemm_us), (attn, None)):
        launch, lm = kernel_figures(kernel, sequences, regressed if kernel == ATTN else False)
        us = fixed if fixed is not None else math.ceil(lm.waves_per_sm or 1.0) * WAVE_US
        out.append((kernel, launch, lm, us))
    return out


SUMS: dict[md.MetricDef, str] = {
    md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS: "theoretical_occupancy",
    md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS: "estimated_occupancy",
    md.KERNEL_RESIDENT_WARPS_PER_SM_SECONDS: "resident_warps_per_sm",
    md.KERNEL_WAVES_PER_SM_SECONDS: "waves_per_sm",
    md.KERNEL_WARPS_PER_SM_SECONDS: "warps_per_sm",
}


def pod_labels(d: Deployment) -> dict[str, str]:
    return {
        "namespace": "ml",
        "deployment": d.name,
        "pod": f"{d.name}-0",
        "gpu": "0",
        "job": "warpwatch",
        "instance": f"{d.name}-0:9946",
    }


def minute_increments(d: Deployment, minute: int) -> Iterator[tuple[md.MetricDef, dict[str, str], float]]:
    """What the deployment's counters grow by over one minute: (metric, labels, increment)."""
    gpu = pod_labels(d)
    _, busy = load_at(minute)
    step = _step(d, minute)
    steps = busy * STEP_S * 1e6 / sum(us for *_, us in step)
    yield md.GPU_OBSERVED_SECONDS, gpu, float(STEP_S)
    yield md.GPU_BUSY_SECONDS, gpu, busy * STEP_S
    resident = 0.0
    for kernel, _, lm, us in step:
        labels = {**gpu, "kernel": kernel}
        seconds = steps * us / 1e6
        yield md.KERNEL_SECONDS, labels, seconds
        yield md.KERNEL_LAUNCHES_ESTIMATED, labels, steps
        for metric, field in SUMS.items():
            yield metric, labels, seconds * (getattr(lm, field) or 0.0)
        resident += seconds * (lm.resident_warps_per_sm or 0.0)
    yield md.GPU_RESIDENT_WARPS_SECONDS, gpu, resident


def launch_info(d: Deployment, minute: int) -> Iterator[dict[str, str]]:
    """The labels of each kernel's launch-info series at `minute` (`warpwatch_kernel_launch_info`)."""
    for kernel, launch, _, _ in _step(d, minute):
        assert launch.block is not None
        yield {
            **pod_labels(d),
            "kernel": kernel,
            "block_size": str(math.prod(launch.block)),
            "registers_per_thread": str(launch.registers_per_thread),
            "shared_memory_bytes": str(launch.shared_memory),
        }


def openmetrics_families(deployments: tuple[Deployment, ...], minutes: int, start: float) -> dict[str, Any]:
    """Families for `promfleet.openmetrics`: counters sampled every minute, launch info where present."""
    totals: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    info: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for d in deployments:
        for minute in range(minutes + 1):
            t = start + minute * STEP_S
            for metric, labels, inc in minute_increments(d, minute):
                key = (metric.name, tuple(sorted(labels.items())))
                totals[key] = totals.get(key, 0.0) + (inc if minute else 0.0)
                series.setdefault(key, []).append((t, totals[key]))
            for labels in launch_info(d, minute):
                info.setdefault(tuple(sorted(labels.items())), []).append((t, 1.0))
    fams: dict[str, Any] = {}
    for (name, labels), points in series.items():
        fams.setdefault(name, ("counter", []))[1].append((name + "_total", dict(labels), points))
    launch = getattr(md, "KERNEL_LAUNCH_INFO", None)
    if launch is not None:
        fams[launch.name] = ("gauge", [(launch.name, dict(labels), points) for labels, points in info.items()])
    return fams
