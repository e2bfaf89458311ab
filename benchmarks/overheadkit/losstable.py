"""The table of what each window cost the client against what the agent charged it: per arm, the
windows' losses pooled over rounds (`timeline.arm_timeline`) with their 95 % intervals, the agent's
own figure, the cost at the rhythm the windows came at, and the loss's shape in time."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .timeline import BIN_S, Interval, interval, mean_known, sparkline

PARTS = ("before", "inside", "after", "total")


def pool_timeline(runs: Sequence[Any]) -> list[dict[str, Any]]:
    """Per arm with windows, in the order first run: the pooled losses and the agent's charge
    (`vllmarms.ArmRun` or `daemonarms.DaemonArm`: an arm, its rounds' `timeline`, `starts` and
    `agent`)."""
    out = []
    for key in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == key and r.timeline]
        losses = [x for r in mine for x in r.timeline["losses"]]
        if not losses:
            continue
        totals = [x["before"] + x["inside"] + x["after"] for x in losses]
        spacing = [b - a for r in mine for a, b in zip(r.starts, r.starts[1:], strict=False)]
        charged = [
            r.agent["overhead_ratio"] * r.agent["period_s"]
            for r in mine
            if r.agent.get("overhead_ratio") is not None and r.agent.get("period_s")
        ]
        every = interval(totals)
        gap = statistics.fmean(spacing) if spacing else None
        out.append(
            {
                "arm": key,
                "windows": len(losses),
                "loss_s": {p: vars(interval(totals if p == "total" else [x[p] for x in losses])) for p in PARTS},
                "charged_s": charged,
                "spacing_s": gap,
                "periods_s": [r.agent.get("period_s") for r in mine],
                "cost_at_spacing": None if not gap else vars(_scaled(every, 1.0 / gap)),
                "profile_start": _mean_profile([r.timeline["profile_start"] for r in mine]),
                "write_after_start_s": mean_known([w for r in mine for w in r.timeline["writes_after_start_s"]]),
                "length_s": mean_known([v for r in mine for v in r.timeline["lengths_s"]]),
            }
        )
    return out


def _scaled(i: Interval, k: float) -> Interval:
    return Interval(i.mean * k, i.low * k, i.high * k, i.n)


def _mean_profile(profiles: list[list[float]]) -> list[float]:
    profiles = [p for p in profiles if p]
    return [statistics.fmean(col) for col in zip(*profiles, strict=True)] if profiles else []


def _iv(d: dict[str, Any], scale: float = 1.0, digits: int = 2) -> str:
    return Interval(**d).text(scale, digits)


def loss_table(pooled: list[dict[str, Any]], work: str = "client tokens") -> str:
    rows = [
        "Serving lost per window, in seconds of the rate far from windows (mean [95 % "
        f"interval] over windows), against the agent's charge; the profile: {work} per {BIN_S:g} s "
        "from 2 s before each window's start to 8 s after (one mark per 0.5 s, full = the far rate).",
        "",
        "| arm | windows | before s | inside s | after s | total s | agent's charge s (per round) | "
        "window s / trace written at s | between windows s | client cost at that rhythm | profile -2 s .. +8 s |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for p in pooled:
        loss, cost = p["loss_s"], p["cost_at_spacing"]
        charged = ", ".join(f"{v:.2f}" for v in p["charged_s"]) or "-"
        rows.append(
            f"| {p['arm']} | {p['windows']} | {_iv(loss['before'])} | {_iv(loss['inside'])} | "
            f"{_iv(loss['after'])} | {_iv(loss['total'])} | {charged} | "
            f"{_num(p['length_s'])} / {_num(p['write_after_start_s'])} | {_num(p['spacing_s'], 0)} | "
            f"{'-' if cost is None else _iv(cost, 100, 2) + ' %'} | `{sparkline(p['profile_start'])}` |"
        )
    return "\n".join(rows)


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"
