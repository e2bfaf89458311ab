"""The fleet dashboard: per deployment, from the fleet tier's records only (`queries.GROUP_FLEET`).

Every query reads a recorded series summed by `Settings.fleet`: its cost grows with deployments and
kernels, not with pods, GPUs or the raw samples of a range.
"""

from __future__ import annotations

from ..export import metricdefs as md
from . import queries as q
from .panels import COUNT, PERCENT, RANGE, DashboardDef, PanelDef, Query
from .settings import Settings, record_matchers


def fleet(s: Settings) -> DashboardDef:
    on = s.fleet
    return DashboardDef(
        uid="warpwatch-fleet",
        title="warpwatch / Fleet",
        description="Per deployment (labels " + ", ".join(on) + "): busy ratio, estimated occupancy and the "
        "kernels that take the time, from the fleet recording rules (sums of rates over sums of rates).",
        variables=("namespace", "deployment"),
        panels=(*_trend_panels(s), *_top_kernel_panels(s)),
    )


def _trend_panels(s: Settings) -> tuple[PanelDef, ...]:
    """Busy ratio, occupancy and GPUs watched per deployment, over time."""
    on = s.fleet
    legend = " / ".join("{{" + label + "}}" for label in on)
    w = s.recording_window
    matchers = record_matchers(s, "fleet")

    def ratio(record: str) -> str:
        return f"{record}{{{', '.join(matchers)}}}"

    observed = q.record_series(s, md.GPU_OBSERVED_SECONDS, "fleet", *matchers)
    return (
        PanelDef(
            "timeseries",
            "GPU busy ratio per deployment",
            "Share of the deployment's watched GPU time with a kernel running: recorded sum of busy "
            "seconds over recorded sum of observed seconds.",
            PERCENT,
            (Query(ratio(f"fleet:warpwatch_gpu_busy:ratio_rate{w}"), legend),),
            min=0,
            max=1,
        ),
        PanelDef(
            "timeseries",
            "Estimated occupancy per deployment",
            "Time-averaged estimated occupancy of the deployment's GPUs (idle time counts as zero).",
            PERCENT,
            (Query(ratio(f"fleet:warpwatch_gpu_estimated_occupancy:ratio_rate{w}"), legend),),
            min=0,
            max=1,
        ),
        PanelDef(
            "timeseries",
            "GPUs watched",
            "Observed GPU-seconds per second: the number of GPUs whose traces the agents read, times the capture duty.",
            COUNT,
            (Query(observed, legend),),
            min=0,
        ),
    )


def _top_kernel_panels(s: Settings) -> tuple[PanelDef, ...]:
    """The kernels that take the most time, and their occupancy, over the selected range."""
    on = s.fleet
    legend = " / ".join("{{" + label + "}}" for label in on)
    matchers = record_matchers(s, "fleet")
    share = q.record_ratio(
        s, md.KERNEL_SECONDS, "fleet_kernel", md.GPU_OBSERVED_SECONDS, "fleet", matchers, RANGE, on=on
    )
    occupancy = q.record_ratio(
        s,
        md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS,
        "fleet_kernel",
        md.KERNEL_SECONDS,
        "fleet_kernel",
        matchers,
        RANGE,
    )
    return (
        PanelDef(
            "bargauge",
            "Top kernels by time share",
            "The 10 kernels with the largest share of the deployment's watched GPU time over the selected range.",
            PERCENT,
            (Query(f"topk(10,\n{share}\n)", "{{kernel}} (" + legend + ")", instant=True),),
            height=10,
            min=0,
            max=1,
        ),
        PanelDef(
            "bargauge",
            "Estimated occupancy of the top kernels",
            "Duration-weighted mean estimated occupancy over the selected range of the 10 kernels "
            "that take the most time.",
            PERCENT,
            (
                Query(
                    f"(\n{occupancy}\n)\nand on ({', '.join((*on, 'kernel'))})\ntopk(10,\n{share}\n)",
                    "{{kernel}} (" + legend + ")",
                    instant=True,
                ),
            ),
            height=10,
            min=0,
            max=1,
        ),
    )
