"""What changed per kernel between two traces (issue 45, "Say why"): pure, no I/O.

Each side's kernels get a profile: the dominant launch configuration (the one with the most
corrected GPU time Σh·d, with the window `analyze` uses) and what CUDA's calculator makes of it on
that device (active blocks per SM, limiting factors, theoretical occupancy), the number of distinct
configurations, and the window's duration-weighted statistics (`analyze`'s KernelStats).

Kernels are matched by full name per device. Devices are matched by id; where each trace ran its
kernels on one device only, those two are matched whatever their ids (a trace of rank 3 against
one of rank 1). A change of block, registers per thread or shared memory is a change of the code;
of grid or waves, of the load; active blocks, limiter and theoretical occupancy follow from the
code and the device, estimated occupancy from both and the load.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ..model import DeviceProperties, KernelStats, LaunchMetrics, Trace, TraceWindow
from .window import analyze, effective_devices, launch_metrics, window_of

CODE_FIELDS: tuple[str, ...] = ("block", "registers_per_thread", "shared_memory")
"""Launch resources the kernel's code (and its launcher) decides."""
OCCUPANCY_FIELDS: tuple[str, ...] = ("max_active_blocks_per_sm", "limiting_factors", "theoretical_occupancy")
"""What the occupancy calculator makes of the code's resources on the device."""
LOAD_FIELDS: tuple[str, ...] = ("grid", "waves_per_sm")
"""What the amount of work decides."""
MEASURED_FIELDS: tuple[str, ...] = ("estimated_occupancy",)
FIELDS: tuple[str, ...] = ("grid", *CODE_FIELDS, *OCCUPANCY_FIELDS, "waves_per_sm", *MEASURED_FIELDS)
"""Every field `changed` may name, in the order it names them."""

ESTIMATED_TOLERANCE = 0.005
"""Estimated occupancies closer than this (half a percentage point) count as unchanged."""
WAVES_TOLERANCE = 0.01
"""Waves per SM within this fraction of each other count as unchanged."""

Status = Literal["changed", "unchanged", "appeared", "vanished"]
Key = tuple[int, str]
ConfigKey = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """One launch configuration of a kernel and its occupancy on the device (None: unknown)."""

    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    registers_per_thread: int | None
    shared_memory: int | None
    max_active_blocks_per_sm: int | None
    limiting_factors: tuple[str, ...] | None
    theoretical_occupancy: float | None
    gpu_time: float
    """Σh·d of the launches with this configuration (µs)."""
    samples: int
    """Captured launches with this configuration."""


@dataclass(frozen=True, slots=True)
class KernelProfile:
    """One kernel on one device of one trace."""

    device: int
    name: str
    config: LaunchConfig
    """The dominant configuration: the most corrected GPU time."""
    configurations: int
    samples: int
    gpu_time: float
    time_share: float | None
    theoretical_occupancy: float | None
    estimated_occupancy: float | None
    waves_per_sm: float | None
    """Duration-weighted means over all the kernel's launches (`KernelStats`)."""


@dataclass(frozen=True, slots=True)
class KernelChange:
    """One kernel of either trace: its profile on each side (None: absent there), what changed."""

    name: str
    a: KernelProfile | None
    b: KernelProfile | None
    changed: tuple[str, ...] = ()

    @property
    def status(self) -> Status:
        if self.a is None:
            return "appeared"
        if self.b is None:
            return "vanished"
        return "changed" if self.changed else "unchanged"

    @property
    def code(self) -> tuple[str, ...]:
        """The changed fields the code decides (block, registers, shared memory)."""
        return tuple(f for f in self.changed if f in CODE_FIELDS)

    @property
    def load(self) -> tuple[str, ...]:
        """The changed fields the load decides (grid, waves)."""
        return tuple(f for f in self.changed if f in LOAD_FIELDS)

    @property
    def resources_changed(self) -> bool:
        """Whether the code's resources or what the device makes of them changed (not the load alone)."""
        return any(f in CODE_FIELDS or f in OCCUPANCY_FIELDS for f in self.changed)

    @property
    def max_share(self) -> float:
        """The larger time share of the two sides (unknown: 0)."""
        return max((p.time_share or 0.0) for p in (self.a, self.b) if p is not None)


@dataclass(frozen=True, slots=True)
class Side:
    """What a diff says about one trace: its path, window, and the devices its kernels ran on."""

    path: str
    window: TraceWindow
    devices: dict[int, DeviceProperties | None]


@dataclass(frozen=True, slots=True)
class TraceDiff:
    """Two traces' kernels side by side, by descending larger time share."""

    a: Side
    b: Side
    device_pairs: tuple[tuple[int | None, int | None], ...]
    """(device in A, device in B) matched; None: the device has no counterpart."""
    kernels: tuple[KernelChange, ...]


@dataclass
class _ConfigAcc:
    first: LaunchMetrics
    gpu_time: float = 0.0
    raw_time: float = 0.0
    samples: int = 0


def _config_key(lm: LaunchMetrics) -> ConfigKey:
    launch = lm.launch
    return (launch.grid, launch.block, launch.registers_per_thread, launch.shared_memory, launch.launch_api)


def config_sums(launches: Iterable[LaunchMetrics]) -> dict[Key, dict[ConfigKey, _ConfigAcc]]:
    """Per (device, kernel) and configuration: Σh·d, Σd and the count of its launches."""
    out: dict[Key, dict[ConfigKey, _ConfigAcc]] = defaultdict(dict)
    for lm in launches:
        per = out[(lm.launch.device, lm.launch.name)]
        key = _config_key(lm)
        acc = per.get(key)
        if acc is None:
            acc = per[key] = _ConfigAcc(lm)
        h = 1.0 if lm.weight is None else lm.weight
        acc.gpu_time += h * lm.launch.dur
        acc.raw_time += lm.launch.dur
        acc.samples += 1
    return out


def dominant(accs: Iterable[_ConfigAcc]) -> LaunchConfig:
    """The configuration with the most corrected GPU time (ties: raw time, then launches)."""
    best = max(accs, key=lambda a: (a.gpu_time, a.raw_time, a.samples))
    lm, launch = best.first, best.first.launch
    return LaunchConfig(
        grid=launch.grid,
        block=launch.block,
        registers_per_thread=launch.registers_per_thread,
        shared_memory=launch.shared_memory,
        max_active_blocks_per_sm=lm.max_active_blocks_per_sm,
        limiting_factors=lm.limiting_factors,
        theoretical_occupancy=lm.theoretical_occupancy,
        gpu_time=best.gpu_time,
        samples=best.samples,
    )


def profiles(trace: Trace) -> dict[Key, KernelProfile]:
    """Every (device, kernel full name) of the trace with its profile (module doc)."""
    analysis = analyze(trace)
    sums = config_sums(launch_metrics(trace, analysis.window))
    return {(k.device, k.name): _profile(k, sums[(k.device, k.name)]) for k in analysis.kernels}


def _profile(k: KernelStats, configs: dict[ConfigKey, _ConfigAcc]) -> KernelProfile:
    return KernelProfile(
        device=k.device,
        name=k.name,
        config=dominant(configs.values()),
        configurations=len(configs),
        samples=k.samples,
        gpu_time=k.gpu_time,
        time_share=k.time_share,
        theoretical_occupancy=k.theoretical_occupancy,
        estimated_occupancy=k.estimated_occupancy,
        waves_per_sm=k.waves_per_sm,
    )


def device_pairs(a: Sequence[int], b: Sequence[int]) -> tuple[tuple[int | None, int | None], ...]:
    """Devices matched by id; one device on each side with different ids: those two (module doc)."""
    if len(a) == 1 and len(b) == 1:
        return ((a[0], b[0]),)
    ids = sorted(set(a) | set(b))
    return tuple((d if d in a else None, d if d in b else None) for d in ids)


def changed_fields(a: KernelProfile, b: KernelProfile) -> tuple[str, ...]:
    """The fields of `FIELDS` that differ between the two profiles, in that order."""
    values = {
        "estimated_occupancy": (a.estimated_occupancy, b.estimated_occupancy),
        "waves_per_sm": (a.waves_per_sm, b.waves_per_sm),
    }
    out = []
    for name in FIELDS:
        x, y = values.get(name) or (getattr(a.config, name), getattr(b.config, name))
        if _differs(name, x, y):
            out.append(name)
    return tuple(out)


def _differs(name: str, x: object, y: object) -> bool:
    if not isinstance(x, float) or not isinstance(y, float):
        return x != y
    if name == "estimated_occupancy":
        return abs(x - y) >= ESTIMATED_TOLERANCE
    if name == "waves_per_sm":
        return not math.isclose(x, y, rel_tol=WAVES_TOLERANCE)
    return not math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


def diff_profiles(
    a: dict[Key, KernelProfile], b: dict[Key, KernelProfile], pairs: Iterable[tuple[int | None, int | None]]
) -> tuple[KernelChange, ...]:
    """Each kernel of either side, matched by name within each device pair, by larger time share."""
    a_of = {dev: {n: p for (d, n), p in a.items() if d == dev} for dev in {d for d, _ in a}}
    b_of = {dev: {n: p for (d, n), p in b.items() if d == dev} for dev in {d for d, _ in b}}
    out: list[KernelChange] = []
    for da, db in pairs:
        left = a_of.get(da, {}) if da is not None else {}
        right = b_of.get(db, {}) if db is not None else {}
        for name in left.keys() | right.keys():
            pa, pb = left.get(name), right.get(name)
            changed = changed_fields(pa, pb) if pa is not None and pb is not None else ()
            out.append(KernelChange(name, pa, pb, changed))
    out.sort(key=lambda c: (-c.max_share, c.name, _device_of(c)))
    return tuple(out)


def _device_of(change: KernelChange) -> int:
    side = change.a or change.b
    return side.device if side is not None else -1


def _side(trace: Trace, used: Iterable[int]) -> Side:
    props = effective_devices(trace)[0]
    return Side(trace.path, window_of(trace), {d: props.get(d) for d in sorted(set(used))})


def diff_traces(a: Trace, b: Trace) -> TraceDiff:
    """What changed per kernel from trace `a` to trace `b` (module doc)."""
    pa, pb = profiles(a), profiles(b)
    devs_a = sorted({d for d, _ in pa})
    devs_b = sorted({d for d, _ in pb})
    pairs = device_pairs(devs_a, devs_b)
    return TraceDiff(
        a=_side(a, devs_a),
        b=_side(b, devs_b),
        device_pairs=pairs,
        kernels=diff_profiles(pa, pb, pairs),
    )


__all__ = [
    "CODE_FIELDS",
    "FIELDS",
    "LOAD_FIELDS",
    "OCCUPANCY_FIELDS",
    "KernelChange",
    "KernelProfile",
    "LaunchConfig",
    "Side",
    "TraceDiff",
    "changed_fields",
    "device_pairs",
    "diff_traces",
    "profiles",
]
