"""Which windows' traces the agent keeps: one rule, pure (no I/O, no clock of its own).

A window is kept, for the first of these reasons that holds:

- `artifact`: a launch carries a profiler artefact the alerts fire on (`ALERTED_ARTIFACTS`:
  negative or overflowed warps, non-finite values, sentinels);
- `degraded`: a kernel's theoretical occupancy (what its launch resources let fit on an SM, whatever
  the load: issue 45) fell below `degraded_ratio` times its own recent level (the mean over its last
  `RECENT_WINDOWS` windows, once it has `MIN_RECENT_WINDOWS`), while it takes more than
  `degraded_min_time_share` of the window: the thresholds of the occupancy-regression alerts
  (`dashboards.settings.Settings`). A smaller grid (a quieter hour) lowers the estimated occupancy,
  not this;
- `low_confidence`: a GPU of the window is low-confidence (too few samples, bounds that disagree);
- `baseline`: an ordinary window, when no window was kept as a baseline for `BASELINE_INTERVAL_S`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..dashboards.settings import ALERTED_ARTIFACTS, DEFAULT_SETTINGS, Settings
from ..model import WindowAnalysis

REASONS: tuple[str, ...] = ("artifact", "degraded", "low_confidence", "baseline")
"""`reason` label values of `warpwatch_evidence_kept_total`, in the order the rule tries them."""
RECENT_WINDOWS = 10
"""Windows a kernel's recent level is the mean of."""
MIN_RECENT_WINDOWS = 3
"""Windows of a kernel seen before its occupancy is compared with its level."""
BASELINE_INTERVAL_S = 3600.0
"""One ordinary window kept per this long."""
MAX_LEVELS = 4096
"""(GPU, kernel) pairs whose level is remembered; beyond, the least recently seen is forgotten."""


@dataclass(frozen=True, slots=True)
class Degraded:
    """One kernel below its recent level in a window."""

    gpu: int
    kernel: str
    occupancy: float
    level: float


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a window is kept (`reason` None: it is not), and the kernels found degraded."""

    reason: str | None
    degraded: tuple[Degraded, ...] = ()


@dataclass
class KeepRule:
    """The rule (module doc), with each kernel's recent occupancy as its state: `judge` once per
    analysed window, in the order the windows were captured."""

    ratio: float = DEFAULT_SETTINGS.degraded_ratio
    min_time_share: float = DEFAULT_SETTINGS.degraded_min_time_share
    baseline_interval_s: float = BASELINE_INTERVAL_S
    last_baseline: float | None = None
    previous_baseline: float | None = None
    levels: dict[tuple[int, str], deque[float]] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, s: Settings) -> KeepRule:
        return cls(ratio=s.degraded_ratio, min_time_share=s.degraded_min_time_share)

    def judge(self, analysis: WindowAnalysis, now: float) -> Verdict:
        """The verdict on one window at Unix time `now`; each kernel's level then takes the window in."""
        degraded = tuple(self._degraded(analysis))
        self._remember(analysis)
        if any(analysis.artifacts.get(kind, 0) > 0 for kind in ALERTED_ARTIFACTS):
            return Verdict("artifact", degraded)
        if degraded:
            return Verdict("degraded", degraded)
        if any(d.low_confidence for d in analysis.devices):
            return Verdict("low_confidence")
        if (
            self.last_baseline is None
            or now - self.last_baseline >= self.baseline_interval_s
            or now < self.last_baseline
        ):
            self.previous_baseline, self.last_baseline = self.last_baseline, now
            return Verdict("baseline")
        return Verdict(None)

    def baseline_lost(self, at: float) -> None:
        """The baseline judged at `at` was not kept (no room in the keeper's queue, the copy
        failed): the hour's slot goes back, so the next ordinary window takes it."""
        if self.last_baseline == at:
            self.last_baseline = self.previous_baseline

    def _degraded(self, analysis: WindowAnalysis) -> Iterator[Degraded]:
        for k in analysis.kernels:
            recent = self.levels.get((k.device, k.name))
            if k.theoretical_occupancy is None or recent is None or len(recent) < MIN_RECENT_WINDOWS:
                continue
            if (k.time_share or 0.0) <= self.min_time_share:
                continue
            level = sum(recent) / len(recent)
            if k.theoretical_occupancy < self.ratio * level:
                yield Degraded(k.device, k.name, k.theoretical_occupancy, level)

    def _remember(self, analysis: WindowAnalysis) -> None:
        for k in analysis.kernels:
            if k.theoretical_occupancy is None:
                continue
            key = (k.device, k.name)
            recent = self.levels.pop(key, None) or deque(maxlen=RECENT_WINDOWS)
            recent.append(k.theoretical_occupancy)
            self.levels[key] = recent  # re-inserted: the dict's order is least recently seen first
            if len(self.levels) > MAX_LEVELS:
                del self.levels[next(iter(self.levels))]
