"""What the `warpwatch analyze` table says, cell by cell: vendor words, the device and window
header, numbers formatted alike within a column, the artefacts' short names. `table` lays it out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model import DeviceProperties, DeviceStats, KernelStats, WindowAnalysis

ARTIFACT_SHORT = {
    "negative_warps_per_sm": "neg",
    "non_finite": "inf/nan",
    "grid_overflow": "overflow",
    "sm_count_invalid": "bad SMs",
    "occupancy_sentinel": "sentinel",
    "occupancy_smem_optin": "smem 0%",
    "unrounded_warps": "unrounded",
    "missing_launch_config": "no grid",
    "grid_units_unknown": "grid unit?",
}
BOUNDS = {
    "trace_span": "from the trace's profiler span",
    "requested": "as requested by the agent",
    "estimated": "estimated from the first and last GPU events",
    "none": "unknown",
}
DASH = "-"


@dataclass(frozen=True, slots=True)
class Words:
    """What a multiprocessor and a warp are called on a vendor's GPUs."""

    unit: str
    warp: str

    @property
    def warps_per_unit(self) -> str:
        return f"{self.warp}s/{self.unit}"


NVIDIA = Words("SM", "warp")
AMD = Words("CU", "wavefront")


def words_for(props: Sequence[DeviceProperties | None]) -> Words:
    """AMD words when every device with properties is AMD, else NVIDIA's."""
    known = [p for p in props if p is not None]
    return AMD if known and all(p.vendor == "amd" for p in known) else NVIDIA


def device_description(p: DeviceProperties) -> str:
    """`NVIDIA H100 (compute 9.0), 132 SMs, max 64 warps/SM` or `AMD Instinct MI300X (AMD, gfx942), ...`."""
    name = p.name.strip() or "unknown"
    if p.vendor == "amd":
        w = AMD
        kind = f"AMD, {p.arch}" if p.arch else "AMD"
    else:
        w = NVIDIA
        kind = f"compute {p.compute_capability}"
    uuid = f", UUID {p.uuid}" if p.uuid else ""
    return f"{name} ({kind}), {p.num_sms} {w.unit}s, max {p.max_warps_per_sm} {w.warps_per_unit}{uuid}"


def pct1(v: float) -> str:
    return f"{v * 100:.1f}%"


def device_lines(d: DeviceStats) -> list[str]:
    """The device's header: what it is, how busy (estimate and observed), how sure, and why."""
    p = d.properties
    if p is None:
        desc = "no device properties in the trace (use --gpu-properties): occupancy unknown"
    else:
        desc = device_description(p)
        if d.properties_from is not None:
            desc += (
                f"; properties of device {d.properties_from} applied (the trace describes one device "
                f"model, and lists no device {d.device})"
            )
    parts = []
    if d.busy_ratio is not None:
        busy = f"busy {pct1(d.busy_ratio)}"
        if d.observed_busy_ratio is not None and pct1(d.observed_busy_ratio) != pct1(d.busy_ratio):
            busy += f" estimated, {pct1(d.observed_busy_ratio)} observed"
            if d.busy_bounds is not None:
                busy += f" (the trace allows {pct1(d.busy_bounds[0])} to {pct1(d.busy_bounds[1])})"
        parts.append(busy)
    if d.estimated_occupancy is not None:
        parts.append(f"estimated occupancy {pct1(d.estimated_occupancy)}")
    lines = [f"GPU {d.device}: {desc}" + (f"; {'; '.join(parts)}" if parts else "")]
    if d.low_confidence:
        lines.append("low confidence: " + "; ".join(d.low_confidence_reasons or ("see --format json",)))
    return lines


def window_line(analysis: WindowAnalysis) -> str:
    w = analysis.window
    rank = f", rank {analysis.rank}" if analysis.rank is not None else ""
    n = analysis.launch_count
    launches = f"{n:,} kernel launch{'' if n == 1 else 'es'}"
    return f"Window: {w.duration / 1000:,.3f} ms ({BOUNDS[w.bounds]}){rank}; {launches}"


def column_numbers(values: Sequence[float | None]) -> list[str]:
    """A column's numbers with one number of decimals for all (2 below 10, 1 below 1,000, else 0)
    and thousands separated: `73,010`, `4,562`, `0` — never `7.301e+04` beside `0.3636`."""
    known = [abs(v) for v in values if v is not None]
    top = max(known, default=0.0)
    decimals = 2 if top < 10 else 1 if top < 1000 else 0
    return [DASH if v is None else f"{v:,.{decimals}f}" for v in values]


def percent(v: float | None) -> str:
    return DASH if v is None else format(v * 100, ".0f") + "%"


def share(v: float | None) -> str:
    """A time share in percent, one decimal; `<0.1` for a kernel that ran but rounds to 0."""
    if v is None:
        return DASH
    if 0 < v < 0.0005:
        return "<0.1"
    text = format(v * 100, ".1f")
    return text + "*" if v > 1.0 else text


def limiter(k: KernelStats) -> str:
    """The main limiting factor, empty where nothing limits (100 % theoretical occupancy)."""
    if k.theoretical_occupancy is not None and k.theoretical_occupancy >= 1.0 - 1e-9:
        return ""
    return k.main_limiter or ""


def artefacts(k: KernelStats) -> str:
    return ", ".join(f"{ARTIFACT_SHORT.get(a, a)} {n}" for a, n in k.artifacts.items())


def reported_differs(k: KernelStats) -> bool:
    """Whether the profiler's warps per SM (weighted alike) differ from the corrected ones by over 1 %."""
    a, b = k.reported_warps_per_sm, k.warps_per_sm
    if a is None or b is None:
        return a is not None
    return abs(a - b) > 0.01 * max(abs(a), abs(b))
