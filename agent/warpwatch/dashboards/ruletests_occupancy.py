"""promtool scenarios of the occupancy alerts (`alerts_occupancy`): what the code decides falls and
they fire; what the load decides falls and they stay silent.

Counters of kernels over a baseline day: each kernel's GPU time grows by `per_min` seconds a minute
(60 s observed), its Σh·d·x counters at x times that; at `drop_at` a factor applies. Values are
computed from the thresholds in `Settings`, so a changed threshold changes inputs and expectations.
The two-day load cycle through a real Prometheus is tests/dashboards/test_load_cycle.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError
from ..export import metricdefs as md
from .ruletests_inputs import AGENT, SCRAPE, Firing, Scenario, gauge, input_series, minutes, ramp, selector_labels
from .runbook import AlertDef
from .settings import Settings

ATTN, GEMM, NEW = "paged_attention_v1", "sm90_gemm_bf16", "flash_fwd_splitkv"


@dataclass(frozen=True, slots=True)
class _Timeline:
    """`days` baseline windows, a change at `drop_at`, evaluation at `t` (minutes). A swap needs two:
    the new kernel must be absent from the window before the baseline."""

    s: Settings
    alert: AlertDef
    days: int = 1

    @property
    def drop_at(self) -> int:
        return self.days * minutes(self.s.degraded_baseline_window)

    @property
    def t(self) -> int:
        t = self.drop_at + minutes(self.s.degraded_window) + minutes(self.alert.for_) + 5
        if t - minutes(self.s.degraded_baseline_offset) >= self.drop_at:
            raise ConfigError(
                f"degraded_window {self.s.degraded_window} + the alert's for {self.alert.for_} must be at least 5m "
                f"shorter than degraded_baseline_offset {self.s.degraded_baseline_offset}: otherwise the change "
                "enters its own baseline before it fires"
            )
        return t

    @property
    def n(self) -> int:
        return self.t + 1

    @property
    def late_start(self) -> int:
        """Missing samples that leave the baseline one recorded sample short of `degraded_min_samples`."""
        start = self.t - minutes(self.s.degraded_baseline_offset) - self.s.degraded_min_samples + 1
        if not 0 < start < self.drop_at:
            raise ConfigError(f"degraded_min_samples {self.s.degraded_min_samples} does not fit the baseline window")
        return start

    def labels(self, kernel: str) -> dict[str, str]:
        return {**self.gpu, "kernel": kernel}

    @property
    def gpu(self) -> dict[str, str]:
        return {**selector_labels(self.s), **AGENT, **SCRAPE, "gpu": "0"}

    def observed(self, missing: int = 0) -> tuple[str, str]:
        return (input_series(md.GPU_OBSERVED_SECONDS, self.gpu), ramp((60, self.n - 1 - missing), missing=missing))

    def counter(
        self, metric: md.MetricDef, kernel: str, before: float, after: float, missing: int = 0
    ) -> tuple[str, str]:
        """Grows by `before` a minute until `drop_at`, then by `after`; `missing` absent samples first."""
        head = self.drop_at - missing
        return (
            input_series(metric, self.labels(kernel)),
            ramp((before, head - 1), (after, self.n - self.drop_at), missing=missing),
        )

    def kernel(
        self, kernel: str, per_min: tuple[float, float], theo: tuple[float, float], missing: int = 0
    ) -> tuple[tuple[str, str], ...]:
        """A kernel's seconds and theoretical-occupancy seconds, (before, after) the change; estimated
        occupancy falls with the load wherever its time does (a smaller grid: fewer waves)."""
        (b, a), (tb, ta) = per_min, theo
        est = (0.5 * tb, 0.5 * ta * (a / b if b else 1.0))
        return (
            self.counter(md.KERNEL_SECONDS, kernel, b, a, missing),
            self.counter(md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS, kernel, tb * b, ta * a, missing),
            self.counter(md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, kernel, est[0] * b, est[1] * a, missing),
        )

    def new_kernel(self, kernel: str, per_min: float, theo: float) -> tuple[tuple[str, str], ...]:
        """A kernel that first runs at `drop_at`."""
        after = self.n - self.drop_at - 1
        return (
            (input_series(md.KERNEL_SECONDS, self.labels(kernel)), ramp((per_min, after), missing=self.drop_at)),
            (
                input_series(md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS, self.labels(kernel)),
                ramp((theo * per_min, after), missing=self.drop_at),
            ),
        )


def one_deployment_each(found: list[Scenario], s: Settings) -> list[Scenario]:
    """The scenarios of one alert merged into one promtool test per evaluation time, each in a
    deployment of its own (every fleet label and the pod suffixed with its index): promtool evaluates
    every rule at every minute of every test, and these need a day or two of history each; the
    alerts sum by the fleet labels, so the scenarios cannot mix."""
    varied = [k for k in (*s.fleet, "pod") if k in AGENT]
    if varied == ["pod"]:
        return found  # no fleet label is attached to the inputs: nothing keeps them apart
    by_time: dict[int, list[Scenario]] = {}
    for sc in found:
        by_time.setdefault(sc.eval_min, []).append(sc)
    merged = []
    for t, group in by_time.items():
        series: list[tuple[str, str]] = []
        fires: list[Firing] = []
        for i, sc in enumerate(group):
            own = {k: f"{AGENT[k]}-{i}" for k in varied}
            for name, values in sc.series:
                for key in own:
                    name = name.replace(f'{key}="{AGENT[key]}"', f'{key}="{own[key]}"')
                series.append((name, values))
            fires += [Firing({k: own.get(k, v) for k, v in f.labels.items()}, f.value) for f in sc.fires]
        names = "; ".join(f"{i}: {sc.name}" for i, sc in enumerate(group))
        merged.append(Scenario(names, tuple(series), t, tuple(fires), tuple(m for sc in group for m in sc.silent_at)))
    return merged


def _levels(s: Settings) -> tuple[float, float, float, float]:
    """(low, near, busy, quiet): a fall well below the bound, one above it, and kernels' GPU seconds
    a minute above and below the time-share bound."""
    low = math.floor(s.degraded_ratio * 80) / 100  # well below the bound, away from rounding ties
    near = round((s.degraded_ratio + 1) / 2, 2)
    return low, near, 60 * min(1.0, s.degraded_min_time_share * 2), 60 * s.degraded_min_time_share / 2


def kernel_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    tl = _Timeline(s, alert)
    low, near, busy, quiet = _levels(s)
    fleet = {k: v for k, v in AGENT.items() if k in s.fleet}
    theo = 0.5
    obs = tl.observed()
    return [
        Scenario(
            "registers doubled: the kernel's theoretical occupancy falls; value = now / baseline",
            (*tl.kernel(ATTN, (busy, busy), (theo, theo * low)), obs),
            tl.t,
            (Firing({**fleet, "kernel": ATTN}, low),),
        ),
        Scenario(
            "the load falls: estimated occupancy and GPU time fall, theoretical stays: silent",
            (*tl.kernel(ATTN, (busy * 4, busy), (theo, theo)), obs),
            tl.t,
        ),
        Scenario(
            "near miss: a fall that stays above the bound",
            (*tl.kernel(ATTN, (busy, busy), (theo, theo * near)), obs),
            tl.t,
        ),
        Scenario(
            "near miss: the kernel takes too little time",
            (*tl.kernel(ATTN, (quiet, quiet), (theo, theo * low)), obs),
            tl.t,
        ),
        Scenario(
            "near miss: one sample too few in the baseline",
            (*tl.kernel(ATTN, (busy, busy), (theo, theo * low), missing=tl.late_start), tl.observed(tl.late_start)),
            tl.t,
        ),
        *_swap_scenarios(s, alert),
    ]


def _swap_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    """Two days: the new kernel must be absent from the day before the baseline (the only scenarios
    that need two; promtool evaluates every rule at every minute of each)."""
    tl = _Timeline(s, alert, days=2)
    low, near, busy, _ = _levels(s)
    fleet = {k: v for k, v in AGENT.items() if k in s.fleet}
    theo = 0.5
    obs = tl.observed()
    return [
        Scenario(
            "a swap: a new kernel replaces one and fits fewer warps; value = new / vanished",
            (*tl.kernel(ATTN, (busy, 0.0), (theo, theo)), *tl.new_kernel(NEW, busy, theo * low), obs),
            tl.t,
            (Firing({**fleet, "kernel": NEW}, low),),
        ),
        Scenario(
            "near miss: a swap to a kernel above the bound",
            (*tl.kernel(ATTN, (busy, 0.0), (theo, theo)), *tl.new_kernel(NEW, busy, theo * near), obs),
            tl.t,
        ),
        Scenario(
            "near miss: a new kernel beside the old one (nothing vanished), however low",
            (*tl.kernel(ATTN, (busy, busy), (theo, theo)), *tl.new_kernel(NEW, busy, theo * low), obs),
            tl.t,
        ),
    ]


def deployment_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    """Two kernels: attention (theoretical 0.75) and a GEMM (0.125)."""
    tl = _Timeline(s, alert)
    low, near, busy, _ = _levels(s)
    fleet = {k: v for k, v in AGENT.items() if k in s.fleet}
    obs = tl.observed()

    def both(factor: float, missing: int = 0) -> tuple[tuple[str, str], ...]:
        return (
            *tl.kernel(ATTN, (busy, busy), (0.75, 0.75 * factor), missing),
            *tl.kernel(GEMM, (busy, busy), (0.125, 0.125 * factor), missing),
        )

    return [
        Scenario(
            "a build-wide fall: both kernels fit fewer warps; value = now / baseline",
            (*both(low), obs),
            tl.t,
            (Firing(fleet, low),),
        ),
        Scenario(
            "the night: attention's time falls 8x, its grid with it; the plain mix falls to 0.44x, "
            "the mix at like-for-like load stays: silent",
            (*tl.kernel(ATTN, (busy, busy / 8), (0.75, 0.75)), *tl.kernel(GEMM, (busy, busy), (0.125, 0.125)), obs),
            tl.t,
        ),
        Scenario("near miss: a fall that stays above the bound", (*both(near), obs), tl.t),
        Scenario(
            "near miss: one sample too few in the baseline",
            (*both(low, tl.late_start), tl.observed(tl.late_start)),
            tl.t,
        ),
    ]


def launch_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    tl = _Timeline(s, alert)
    _, _, busy, quiet = _levels(s)
    fleet = {k: v for k, v in AGENT.items() if k in s.fleet}

    def info(regs: Mapping[str, str], present: tuple[bool, bool], kernel: str = ATTN) -> tuple[str, str]:
        labels = {**tl.labels(kernel), "block_size": "128", "shared_memory_bytes": "0", **regs}
        before, after = (1.0 if p else None for p in present)
        return (input_series(md.KERNEL_LAUNCH_INFO, labels), gauge((before, tl.drop_at), (after, tl.n - tl.drop_at)))

    old, new = {"registers_per_thread": "64"}, {"registers_per_thread": "128"}
    seconds = tl.kernel(ATTN, (busy, busy), (0.5, 0.5))
    fired = {**fleet, "kernel": ATTN, "block_size": "128", "shared_memory_bytes": "0", **new}
    return [
        Scenario(
            "registers per thread 64 -> 128: fires with the new resources",
            (info(old, (True, False)), info(new, (False, True)), *seconds, tl.observed()),
            tl.t,
            (Firing(fired, 1.0),),
        ),
        Scenario(
            "near miss: resources seen in the baseline come back",
            (info(old, (True, True)), info(new, (True, True)), *seconds, tl.observed()),
            tl.t,
        ),
        Scenario(
            "near miss: the kernel takes too little time",
            (
                info(old, (True, False)),
                info(new, (False, True)),
                *tl.kernel(ATTN, (quiet, quiet), (0.5, 0.5)),
                tl.observed(),
            ),
            tl.t,
        ),
        Scenario(
            "near miss: a new kernel is no change of resources",
            (info(new, (False, True), NEW), *tl.new_kernel(NEW, busy, 0.5), tl.observed()),
            tl.t,
        ),
    ]
