"""Pooling: one round's window analyses -> per-GPU sums (for counters) and merged statistics (for
the last-window gauges), and the stable top-K that decides which kernels keep their own label.

Pure math over the analysis types, like `analysis/` (no prometheus_client, no I/O); `builder` turns
what it returns into samples. docs/metrics.md, "Aggregation over time and across pods", is the
contract.

Processes and devices. A window comes from one traced process (`process`: source, labels, rank);
its devices are the indices that process sees (`gpu`). Windows of one process are consecutive in
time, so within a round their window lengths and sums add up. Windows of different processes in
one round were captured side by side: their kernel and resident-warp sums add up (they ran on
the GPU together), but their window lengths do not — the GPU was watched for the same wall time
— so a GPU's observed time in a round is the longest any process watched it. A process watches a
GPU from the first window in which it ran a kernel there (`deviceProperties` lists every visible
device, used or not); from then on every window of that process counts for the GPU, empty ones
included.

Gauges (the last round, for "now" tables): per GPU, the round's windows merged as before:

1. windows of the same process are pooled over time: rates become sum(rate_i * W_i) / sum(W_i)
   over that process's windows that saw the GPU;
2. different processes on the same `gpu` ran side by side, so their rates add up;
3. per-kernel averages are GPU-time-weighted means; the reported minimum is the minimum;
   counts add up.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..model import DeviceStats, KernelStats, WindowAnalysis

OTHER = "other"
MEANS: tuple[str, ...] = (
    "warps_per_sm",
    "resident_warps_per_sm",
    "theoretical_occupancy",
    "estimated_occupancy",
    "waves_per_sm",
)
"""The per-kernel duration-weighted means; each has a Σh·d·x counter."""
US = 1e6
"""Trace microseconds per second."""


# ---------------------------------------------------------------------------------------------
# Merged statistics of a round (the last-window gauges)


def _weighted_mean(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """sum(w*x)/sum(w) over known x; plain mean when every weight is 0; None when nothing is known."""
    known = [(x, w) for x, w in pairs if x is not None]
    if not known:
        return None
    den = sum(w for _, w in known)
    if den > 0:
        return sum(x * w for x, w in known) / den
    return sum(x for x, _ in known) / len(known)


def _scaled_sum(pairs: Iterable[tuple[float | None, float]]) -> float | None:
    """sum(f*x) over known x; None when nothing is known."""
    known = [(x, f) for x, f in pairs if x is not None]
    if not known:
        return None
    return sum(x * f for x, f in known)


def combine_kernels(parts: Sequence[tuple[KernelStats, float]], *, device: int, name: str) -> KernelStats:
    """One `KernelStats` from several: rates are sum(factor * rate), averages GPU-time-weighted,
    counts summed, reported minimum the minimum. A single part with factor 1 is returned as is."""
    if len(parts) == 1 and parts[0][1] == 1.0:
        only = parts[0][0]
        return only if (only.device, only.name) == (device, name) else replace(only, device=device, name=name)
    artifacts: dict[str, int] = defaultdict(int)
    for k, _ in parts:
        for kind, n in k.artifacts.items():
            artifacts[kind] += n
    reported = [k.reported_warps_per_sm_min for k, _ in parts if k.reported_warps_per_sm_min is not None]
    heaviest = max(parts, key=lambda p: p[0].gpu_time)[0]
    means = {f: _weighted_mean((getattr(k, f), k.gpu_time) for k, _ in parts) for f in MEANS}
    return KernelStats(
        device=device,
        name=name,
        samples=sum(k.samples for k, _ in parts),
        launches=sum(k.launches for k, _ in parts),
        launch_rate=_scaled_sum((k.launch_rate, f) for k, f in parts),
        gpu_time=sum(k.gpu_time for k, _ in parts),
        time_share=_scaled_sum((k.time_share, f) for k, f in parts),
        reported_warps_per_sm_min=min(reported) if reported else None,
        observed_gpu_time=_scaled_sum((k.observed_gpu_time, 1.0) for k, _ in parts),
        observed_time_share=_scaled_sum((k.observed_time_share, f) for k, f in parts),
        reported_warps_per_sm=_weighted_mean((k.reported_warps_per_sm, k.gpu_time) for k, _ in parts),
        main_limiter=heaviest.main_limiter,
        main_resources=heaviest.main_resources,
        artifacts=dict(artifacts),
        weighted_sums={
            f: sum(k.weighted_sums.get(f, 0.0) for k, _ in parts)
            for f in MEANS
            if any(f in k.weighted_sums for k, _ in parts)
        },
        **means,
    )


def combine_devices(parts: Sequence[tuple[DeviceStats, float]], *, device: int) -> DeviceStats:
    """One `DeviceStats` from several: rates are sum(factor * rate), not capped (a cap would bias
    every pooled value downwards). A single part with factor 1 is returned as is."""
    if len(parts) == 1 and parts[0][1] == 1.0:
        return parts[0][0]
    props = next((d.properties for d, _ in parts if d.properties is not None), None)
    return DeviceStats(
        device=device,
        properties=props,
        resident_warps_per_sm=_scaled_sum((d.resident_warps_per_sm, f) for d, f in parts),
        estimated_occupancy=_scaled_sum((d.estimated_occupancy, f) for d, f in parts),
        busy_ratio=_scaled_sum((d.busy_ratio, f) for d, f in parts),
        samples=sum(d.samples for d, _ in parts),
        low_confidence=any(d.low_confidence for d, _ in parts),
        busy_time=_scaled_sum((d.busy_time, 1.0) for d, _ in parts),
        resident_time=_scaled_sum((d.resident_time, 1.0) for d, _ in parts),
        longest_kernel=max(d.longest_kernel for d, _ in parts),
        observed_busy_ratio=_scaled_sum((d.observed_busy_ratio, f) for d, f in parts),
        low_confidence_reasons=tuple(dict.fromkeys(r for d, _ in parts for r in d.low_confidence_reasons)),
        properties_from=next((d.properties_from for d, _ in parts if d.properties is props), None),
        streams=max(d.streams for d, _ in parts),
    )


@dataclass(frozen=True, slots=True)
class GpuRound:
    """What one round says about one GPU: merged device and kernel statistics."""

    device: DeviceStats
    kernels: tuple[KernelStats, ...]
    """Sorted by GPU time, descending."""


def _by_gpu(
    analysis: WindowAnalysis,
) -> tuple[WindowAnalysis, dict[int, list[DeviceStats]], dict[int, list[KernelStats]]]:
    """A window with its devices and its kernels grouped by GPU (each in the window's order)."""
    devices: dict[int, list[DeviceStats]] = defaultdict(list)
    kernels: dict[int, list[KernelStats]] = defaultdict(list)
    for d in analysis.devices:
        devices[d.device].append(d)
    for k in analysis.kernels:
        kernels[k.device].append(k)
    return analysis, devices, kernels


def _pool_process(windows: Sequence[WindowAnalysis]) -> dict[int, GpuRound]:
    """Step 1 of the module doc: one process's windows pooled over time, per GPU over the
    windows that saw that GPU (so that files of several unnamed processes, one GPU each, are
    not diluted by each other)."""
    out: dict[int, GpuRound] = {}
    # Each window's devices and kernels by GPU, once: a trace may name thousands of GPU ids, and
    # scanning every window's lists per GPU was quadratic in them (100,000 ids: hours).
    by_gpu = [_by_gpu(w) for w in windows]
    for gpu in sorted(set().union(*(devices.keys() | kernels.keys() for _, devices, kernels in by_gpu))):
        covering = [(w, ds, ks) for w, ds, ks in by_gpu if gpu in ds or gpu in ks]
        durations = [max(w.window.duration, 0.0) for w, _, _ in covering]
        total = sum(durations)
        share = [d / total if total > 0 else 1.0 / len(covering) for d in durations]
        factors = [1.0] if len(covering) == 1 else share  # one window: exported exactly as analysed
        devs: list[tuple[DeviceStats, float]] = []
        kers: dict[str, list[tuple[KernelStats, float]]] = defaultdict(list)
        for (_, ds, ks), factor in zip(covering, factors, strict=True):
            devs.extend((d, factor) for d in ds.get(gpu, ()))
            for k in ks.get(gpu, ()):
                kers[k.name].append((k, factor))
        kernels = [combine_kernels(parts, device=gpu, name=name) for name, parts in kers.items()]
        if devs:
            device = combine_devices(devs, device=gpu)
        else:
            device = DeviceStats(gpu, None, None, None, None, sum(k.samples for k in kernels), True)
        out[gpu] = GpuRound(device, tuple(_by_gpu_time(kernels)))
    return out


def _by_gpu_time(kernels: Iterable[KernelStats]) -> list[KernelStats]:
    return sorted(kernels, key=lambda k: (-k.gpu_time, k.name))


def merge_round(windows: Sequence[tuple[str, WindowAnalysis]]) -> dict[int, GpuRound]:
    """Merge one round's analyses, each tagged with its process identity, per GPU (module doc)."""
    by_process: dict[str, list[WindowAnalysis]] = defaultdict(list)
    for process, analysis in windows:
        by_process[process].append(analysis)
    pooled = [_pool_process(ws) for _, ws in sorted(by_process.items())]
    out: dict[int, GpuRound] = {}
    for gpu in sorted({g for p in pooled for g in p}):
        rounds = [p[gpu] for p in pooled if gpu in p]
        if len(rounds) == 1:
            out[gpu] = rounds[0]
            continue
        device = combine_devices([(r.device, 1.0) for r in rounds], device=gpu)
        kers: dict[str, list[tuple[KernelStats, float]]] = defaultdict(list)
        for r in rounds:
            for k in r.kernels:
                kers[k.name].append((k, 1.0))
        kernels = [combine_kernels(parts, device=gpu, name=name) for name, parts in kers.items()]
        out[gpu] = GpuRound(device, tuple(_by_gpu_time(kernels)))
    return out


def fold(
    kernels: Sequence[KernelStats], members: frozenset[str] | set[str]
) -> tuple[list[KernelStats], KernelStats | None, int]:
    """The kernels named in `members` (in the given order), the rest combined into one `other`
    entry, and how many were folded."""
    top = [k for k in kernels if k.name in members]
    rest = [k for k in kernels if k.name not in members]
    if not rest:
        return top, None, 0
    other = combine_kernels([(x, 1.0) for x in rest], device=rest[0].device, name=OTHER)
    return top, other, len(rest)


# ---------------------------------------------------------------------------------------------
# Stable top-K


@dataclass(slots=True)
class StableTopK:
    """Which kernels of one GPU keep their own label, stable from round to round.

    Each kernel's score is its corrected GPU time, decayed by `decay` every round (a half-life of
    about 7 rounds at 0.9). Free places go to the best scores; a member gives its place up only to
    a kernel scoring `hysteresis` times more than the weakest member, so two kernels of similar
    weight do not swap their series with `other` from round to round. Scores below `floor` of the
    best are forgotten, and at most `max_tracked` are kept (memory stays bounded with endless
    kernel names).
    """

    k: int
    decay: float = 0.9
    hysteresis: float = 1.5
    floor: float = 1e-6
    max_tracked: int = 1000
    scores: dict[str, float] = field(default_factory=dict)
    members: set[str] = field(default_factory=set)

    def update(self, seconds: Mapping[str, float]) -> tuple[frozenset[str], frozenset[str]]:
        """Add one round's corrected GPU time per kernel; returns (members, newly admitted)."""
        scores = {name: v * self.decay for name, v in self.scores.items()}
        for name, v in seconds.items():
            scores[name] = scores.get(name, 0.0) + v
        best = max(scores.values(), default=0.0)
        keep = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[: self.max_tracked]
        self.scores = {n: v for n, v in keep if v > best * self.floor or n in self.members}
        members = {m for m in self.members if m in self.scores}
        before = set(members)
        ranked = [n for n, _ in sorted(self.scores.items(), key=lambda kv: (-kv[1], kv[0])) if n not in members]
        for name in ranked:
            if self.k <= 0:
                break
            if len(members) < self.k:
                members.add(name)
                continue
            weakest = min(members, key=lambda m: (self.scores[m], m))
            if self.scores[name] > self.hysteresis * self.scores[weakest]:
                members.remove(weakest)
                members.add(name)
            else:
                break  # ranked descending: no later one beats the weakest either
        self.members = members
        return frozenset(members), frozenset(members - before)


# ---------------------------------------------------------------------------------------------
# Sums of a round (the `_total` counters)


@dataclass(slots=True)
class KernelSums:
    """One (GPU, kernel label) row of a round's counter increments; times in seconds."""

    seconds: float = 0.0
    """Σh·d."""
    launches: float = 0.0
    """Σh."""
    x_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MEANS, 0.0))
    """Σh·d·x per mean field, over the launches where x is known."""
    samples: int = 0
    artifacts: dict[str, int] = field(default_factory=dict)

    def add(self, k: KernelStats) -> None:
        self.seconds += k.counted_gpu_time / US  # unbiased, not bounded: rates over windows stay true
        self.launches += k.counted_launches
        for f, v in k.weighted_sums.items():
            self.x_seconds[f] += v / US
        self.samples += k.samples
        for kind, n in k.artifacts.items():
            self.artifacts[kind] = self.artifacts.get(kind, 0) + n

    def merge(self, other: KernelSums) -> None:
        self.seconds += other.seconds
        self.launches += other.launches
        for f, v in other.x_seconds.items():
            self.x_seconds[f] += v
        self.samples += other.samples
        for kind, n in other.artifacts.items():
            self.artifacts[kind] = self.artifacts.get(kind, 0) + n


@dataclass(slots=True)
class GpuSums:
    """One GPU's counter increments in a round; times in seconds."""

    observed: float = 0.0
    """Window time during which a traced process that uses the GPU was captured (W per window)."""
    busy: float = 0.0
    resident_warps: float = 0.0
    """Σh·d·resident_warps_per_sm over every kernel (warp-seconds per SM)."""
    empty: float = 0.0
    """Observed time in windows that captured no launch on this GPU."""
    low_confidence: float = 0.0
    """Observed time in windows whose statistics for this GPU are low-confidence."""
    longest_ratio: float = 0.0
    """Longest captured launch / W of its window, over the round's windows."""
    kernels: dict[str, KernelSums] = field(default_factory=dict)


@dataclass(slots=True)
class _ProcessGpu:
    observed: float = 0.0
    empty: float = 0.0
    low: float = 0.0


def round_sums(
    windows: Sequence[tuple[str, WindowAnalysis]], used: Mapping[str, frozenset[int]]
) -> tuple[dict[int, GpuSums], dict[str, frozenset[int]]]:
    """The counter increments of one round's analysed windows (outcome ok or empty), each tagged
    with its process, per GPU (module doc); and `used` updated with the GPUs each process ran
    kernels on. Windows of a process must be in capture order."""
    used_now = dict(used)
    per_process: dict[str, dict[int, _ProcessGpu]] = defaultdict(lambda: defaultdict(_ProcessGpu))
    out: dict[int, GpuSums] = defaultdict(GpuSums)
    for process, analysis in windows:
        devices = {d.device: d for d in analysis.devices}
        gpus = used_now.get(process, frozenset()) | devices.keys() | {k.device for k in analysis.kernels}
        used_now[process] = frozenset(gpus)
        w = max(analysis.window.duration, 0.0) / US
        for gpu in gpus:
            mine = per_process[process][gpu]
            mine.observed += w
            dev = devices.get(gpu)
            sums = out[gpu]
            if dev is None:
                mine.empty += w
                continue
            if dev.low_confidence:
                mine.low += w
            sums.busy += (dev.busy_time or 0.0) / US
            sums.resident_warps += (dev.resident_time or 0.0) / US
            if w > 0:
                sums.longest_ratio = max(sums.longest_ratio, dev.longest_kernel / US / w)
        for k in analysis.kernels:
            out[k.device].kernels.setdefault(k.name, KernelSums()).add(k)
    for gpu, sums in out.items():
        watching = [p[gpu] for p in per_process.values() if gpu in p]
        sums.observed = max((p.observed for p in watching), default=0.0)
        sums.empty = min((p.empty for p in watching), default=0.0)
        sums.low_confidence = max((p.low for p in watching), default=0.0)
    return dict(out), used_now
