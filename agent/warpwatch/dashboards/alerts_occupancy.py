"""The occupancy alerts: they page on what the code decides, never on what the load decides.

A launch's estimated occupancy mixes two things (docs/alerts-meaning.md): its per-block resources
(block size, registers per thread, shared memory) set the theoretical occupancy, which only a new
build, library or autotune choice changes; its grid sets the waves, and an attention kernel's grid
is heads x running sequences, so a quiet night alone halves its estimated occupancy. These alerts
therefore compare the theoretical occupancy (Σh·d·theoretical / Σh·d, rates of the corrected sums)
with its own baseline, and the launch resources with those of the baseline:

- `WarpwatchKernelOccupancyRegressed`: one kernel's theoretical occupancy fell below `degraded_ratio`
  times its baseline; or a kernel absent from the day before the baseline (a swap: new, where a kernel
  that runs only at night is not) runs below that ratio of the baseline's kernels that stopped running;
- `WarpwatchOccupancyRegressed`: the deployment's time-weighted mix at like-for-like load (each kernel
  weighted by its baseline GPU time, so a shift of the mix with load moves neither side) fell;
- `WarpwatchKernelLaunchChanged` (info): a kernel that matters runs launch resources it did not run
  over the baseline.

The load-driven fall of estimated occupancy is information: the Kernels board's *Launches too small to
fill the GPU* panel.
"""

from __future__ import annotations

from ..export import metricdefs as md
from . import queries as q
from .runbook import AlertDef, Runbook
from .settings import Settings, duration_seconds, format_duration

GROUP_OCCUPANCY = "warpwatch-occupancy"
NOT_OTHER = 'kernel!="other"'
"""`other` folds whichever kernels fell outside the top-K: its mix moves with membership, not code."""
RESOURCE_LABELS = md.KERNEL_LAUNCH_INFO.labels[2:]
"""block_size, registers_per_thread, shared_memory_bytes."""


class _Terms:
    """The PromQL pieces the three alerts share, over the fleet tier's per-kernel records."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.fleet = ", ".join(s.fleet)
        self.kernel_by = f"{self.fleet}, kernel"
        self.base = f"[{s.degraded_baseline_window}] offset {s.degraded_baseline_offset}"
        before = duration_seconds(s.degraded_baseline_offset) + duration_seconds(s.degraded_baseline_window)
        self.before = f"[{s.degraded_baseline_window}] offset {format_duration(before)}"
        """The baseline window before the baseline: a kernel absent from it is new since then."""
        self.now = f"[{s.degraded_window}]"

    def fk(self, metric: md.MetricDef, rng: str) -> str:
        return f"avg_over_time({q.record_series(self.s, metric, 'fleet_kernel', NOT_OTHER)}{rng})"

    def theo(self, rng: str) -> str:
        """A kernel's mean theoretical occupancy over `rng`."""
        th, sec = md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS, md.KERNEL_SECONDS
        return f"({self.fk(th, rng)} / {self.fk(sec, rng)})"

    def baseline_samples(self, rng: str = "") -> str:
        sel = q.record_series(self.s, md.KERNEL_SECONDS, "fleet_kernel", NOT_OTHER)
        return f"count_over_time({sel}{rng or self.base})"

    def deployment_samples(self, rng: str) -> str:
        return f"count_over_time({q.record_series(self.s, md.GPU_OBSERVED_SECONDS, 'fleet')}{rng})"

    def share_now(self) -> str:
        observed = q.record_series(self.s, md.GPU_OBSERVED_SECONDS, "fleet")
        return (
            f"{self.fk(md.KERNEL_SECONDS, self.now)}\n    / on ({self.fleet}) group_left\n    "
            f"avg_over_time({observed}{self.now})"
        )

    def ran_now(self) -> str:
        """The kernels that run now: a recorded rate above 0 (a stopped kernel's counter stays, at rate
        0, until its series expire)."""
        return f"({q.record_series(self.s, md.KERNEL_SECONDS, 'fleet_kernel', NOT_OTHER)} > 0)"

    def vanished(self, metric: md.MetricDef) -> str:
        """Σ over the kernels of the baseline that ran no more in the last window: their baseline rate."""
        return (
            f"sum by ({self.fleet}) (\n      {self.fk(metric, self.base)}\n      unless on ({self.kernel_by}) "
            f"{self.ran_now()}\n    )"
        )


def kernel_regressed(s: Settings) -> AlertDef:
    t = _Terms(s)
    known = (
        f"(\n    {t.theo(t.now)}\n      / {t.theo(t.base)}\n    < {s.degraded_ratio}\n"
        f"  and\n    {t.baseline_samples()} >= {s.degraded_min_samples}\n  )"
    )
    vanished = f"({t.vanished(md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS)}\n    / {t.vanished(md.KERNEL_SECONDS)})"
    swapped = (
        f"(\n    {t.theo(t.now)}\n      / on ({t.fleet}) group_left ()\n    {vanished}\n    < {s.degraded_ratio}\n"
        f"  unless on ({t.kernel_by})\n    {t.baseline_samples(t.before)}\n"
        f"  and on ({t.fleet})\n    {t.deployment_samples(t.before)} >= {s.degraded_min_samples}\n  )"
    )
    pct = f"{s.degraded_min_time_share:.0%}"
    return AlertDef(
        name="WarpwatchKernelOccupancyRegressed",
        group=GROUP_OCCUPANCY,
        expr=f"(\n  {known}\n  or\n  {swapped}\n)\nand\n  (\n    {t.share_now()}\n  ) > {s.degraded_min_time_share}",
        for_=s.degraded_kernel_for,
        severity="warning",
        summary="{{ $labels.kernel }} in {{ $labels.namespace }}/{{ $labels.deployment }} fits "
        '{{ printf "%.2f" $value }}x the warps per SM it used to',
        description=(
            "The theoretical occupancy of {{ $labels.kernel }} in {{ $labels.namespace }}/{{ $labels.deployment }} "
            f"(what its block size, registers and shared memory let fit on an SM, whatever the load) over the "
            f"last {s.degraded_window} is "
            '{{ printf "%.2f" $value }} times its mean over the '
            f"{s.degraded_baseline_window} ending {s.degraded_baseline_offset} ago (bound {s.degraded_ratio}), "
            f"or, for a kernel that did not run over the {s.degraded_baseline_window} before that, times that of "
            "the kernels that stopped running (a swap); it "
            f"takes more than {pct} of the deployment's GPU time. The load (batch, sequences) does not move "
            "this figure: the code did. Held back while WarpwatchOccupancyRegressed fires in the same deployment."
        ),
        thresholds=(*degraded_thresholds(s), ("inhibit_margin", s.inhibit_margin)),
        runbook=Runbook(
            meaning="A kernel that matters now fits fewer blocks on each SM than it did over the baseline: "
            "it needs more registers per thread or more shared memory per block, or its block size changed, "
            "or a kernel that replaced another has worse resources. The grid (batch size, sequences) does not "
            "enter the theoretical occupancy, so a quiet night cannot fire this alert.",
            impact="Less latency hiding for that kernel at every load: usually slower steps, most at high "
            "load, when its grid fills the GPU.",
            diagnosis=(
                "Run the command of the alert's `evidence` annotation: `warpwatch evidence diff` prints, per "
                "kernel, what changed between the last baseline window and the window kept when the drop was "
                "seen (registers, shared memory, block, the limiter, theoretical occupancy); `warpwatch diff A "
                "B` does the same for any two traces.",
                "*Kernels* dashboard, *Launch resources* table: the block size, registers and shared memory "
                "of each kernel now; WarpwatchKernelLaunchChanged names the new ones.",
                "Check what was deployed when the drop began (image, PyTorch/Triton/FlashAttention version, "
                "autotune cache, compiler flags).",
            ),
            mitigation=(
                "Roll back or pin the change that raised the kernel's registers or shared memory; cap "
                "registers (`__launch_bounds__`, Triton `num_warps`/`maxnreg`) or retune the block size.",
                _absorbed(s),
            ),
        ),
        evidence_verb="diff",
    )


def deployment_regressed(s: Settings) -> AlertDef:
    t = _Terms(s)
    weight = t.fk(md.KERNEL_SECONDS, t.base)
    now_mix = (
        f"sum by ({t.fleet}) (\n      {t.theo(t.now)}\n      * {weight}\n"
        f"      and on ({t.kernel_by}) {t.ran_now()}\n    )"
    )
    base_mix = (
        f"sum by ({t.fleet}) (\n      {t.fk(md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS, t.base)}\n"
        f"      and on ({t.kernel_by}) {t.ran_now()}\n    )"
    )
    return AlertDef(
        name="WarpwatchOccupancyRegressed",
        group=GROUP_OCCUPANCY,
        expr=(
            f"(\n    {now_mix}\n  /\n    {base_mix}\n) < {s.degraded_ratio}\n"
            f"and on ({t.fleet})\n  {t.deployment_samples(t.base)} >= {s.degraded_min_samples}"
        ),
        for_=s.degraded_for,
        severity="warning",
        summary="{{ $labels.namespace }}/{{ $labels.deployment }}: its kernels fit "
        '{{ printf "%.2f" $value }}x the warps per SM they used to',
        description=(
            "The theoretical occupancy of the kernels of {{ $labels.namespace }}/{{ $labels.deployment }}, "
            "each weighted by its GPU time over the baseline (the mix at like-for-like load: a shift of the "
            f"mix with the load moves neither side), over the last {s.degraded_window} is "
            '{{ printf "%.2f" $value }} times '
            f"the same mix over the {s.degraded_baseline_window} ending {s.degraded_baseline_offset} ago "
            f"(bound {s.degraded_ratio}). Many kernels lost occupancy at once: a build-wide change. Its "
            "per-kernel alerts are held back."
        ),
        thresholds=degraded_thresholds(s),
        runbook=Runbook(
            meaning="Across the deployment's kernels, fewer blocks fit on an SM than over the baseline, "
            "weighted as the baseline's GPU time was spread: a change that touched many kernels at once "
            "(compiler or CUDA upgrade, a new PyTorch or Triton, different compile flags, a changed "
            "attention backend). The load cannot fire it: neither grids nor the mix's shift with load enter.",
            impact="Slower steps across the board, most at high load.",
            diagnosis=(
                "Run the command of the alert's `evidence` annotation (`warpwatch evidence diff` per pod): "
                "the kernels whose registers, shared memory or block size changed, and those swapped.",
                "*Kernels* dashboard: *Theoretical occupancy (what the code decides)* and *Launch resources*.",
                "Check what was deployed when the drop began.",
            ),
            mitigation=(
                "Roll back the build; pin the library or compiler version that changed.",
                _absorbed(s),
            ),
        ),
        evidence_verb="diff",
    )


def launch_changed(s: Settings) -> AlertDef:
    t = _Terms(s)
    by = ", ".join((*s.fleet, "kernel", *RESOURCE_LABELS))
    info = f"{q.launch_info_record('fleet_kernel')}{{{NOT_OTHER}}}"
    pct = f"{s.degraded_min_time_share:.0%}"
    return AlertDef(
        name="WarpwatchKernelLaunchChanged",
        group=GROUP_OCCUPANCY,
        expr=(
            f"(\n  max by ({by}) (max_over_time({info}{t.now}))\n  unless on ({by})\n"
            f"  max by ({by}) (max_over_time({info}{t.base}))\n)\n"
            f"and on ({t.kernel_by})\n  max by ({t.kernel_by}) (max_over_time({info}{t.base}))\n"
            f"and on ({t.kernel_by})\n  (\n    {t.share_now()}\n  ) > {s.degraded_min_time_share}"
        ),
        for_=s.launch_changed_for,
        severity="info",
        summary="{{ $labels.kernel }} in {{ $labels.namespace }}/{{ $labels.deployment }} launches with new resources",
        description=(
            "{{ $labels.kernel }} in {{ $labels.namespace }}/{{ $labels.deployment }} now launches with "
            "{{ $labels.block_size }} threads per block, {{ $labels.registers_per_thread }} registers per thread "
            "and {{ $labels.shared_memory_bytes }} bytes of shared memory per block, which it did not use over "
            f"the {s.degraded_baseline_window} ending {s.degraded_baseline_offset} ago, and takes more than "
            f"{pct} of the deployment's GPU time. A changed build or autotune choice; "
            "WarpwatchKernelOccupancyRegressed says whether it costs occupancy."
        ),
        thresholds=(*degraded_thresholds(s)[:4], ("launch_changed_for", s.launch_changed_for)),
        runbook=Runbook(
            meaning="A significant kernel's launch resources (block size, registers per thread, shared "
            "memory per block) changed: the code changed, not the load. Informational: the change may "
            "raise occupancy, lower it, or leave it.",
            impact="None by itself; it explains a step in the kernel's timings and occupancy.",
            diagnosis=(
                "`warpwatch evidence diff` on a pod of the deployment prints the old and new resources and "
                "what they do to blocks per SM and the limiter.",
                "Match the time with a deployment, a library upgrade or a new autotune cache.",
            ),
            mitigation=(
                "Nothing if intended; the alert clears once the baseline "
                f"(offset {s.degraded_baseline_offset}) holds the new resources.",
            ),
        ),
        evidence_verb="diff",
    )


def _absorbed(s: Settings) -> str:
    return (
        f"If the new level is intended, the alert clears once the baseline window ({s.degraded_baseline_window}) "
        "has absorbed it."
    )


def degraded_thresholds(s: Settings) -> tuple[tuple[str, str], ...]:
    """The settings the occupancy alerts are defined by (shown with each alert)."""
    return (
        ("degraded_window", s.degraded_window),
        ("degraded_baseline_window", s.degraded_baseline_window),
        ("degraded_baseline_offset", s.degraded_baseline_offset),
        ("degraded_min_time_share", str(s.degraded_min_time_share)),
        ("degraded_ratio", str(s.degraded_ratio)),
        ("degraded_min_samples", str(s.degraded_min_samples)),
        ("degraded_for", s.degraded_for),
    )
