"""Each round's cost measures, from the sources into `overhead.OverheadLedger`, and the period that
follows from them (stretched above --overhead-budget, one log line when it changes)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..capture import Source
from ..logs import event
from ..overhead import OverheadLedger

log = logging.getLogger("warpwatch.service")


def note_costs(ledger: OverheadLedger, sources: Sequence[Source], *, window: float) -> float | None:
    """Feed this round's measures; the new period when it changed, else None."""
    for src in sources:
        ledger.observe(src.name, src.take_stop_seconds(), src.served_latency(), src.take_cost_seconds())
    before = ledger.period
    period = ledger.replan()
    if period is None:
        return None
    view = ledger.view()
    cost = ledger.lost()
    if period > before:
        event(
            log,
            "period_stretched",
            logging.WARNING,
            period_s=round(period, 3),
            previous_s=round(before, 3),
            window_s=window,
            lost_per_round_s=round(cost or 0.0, 3),
            budget=view.budget,
            slowdown={k: round(v, 4) for k, v in view.slowdown.items()},
            reason="the measured cost to the server is above --overhead-budget",
        )
    else:
        event(
            log,
            "period_restored",
            period_s=round(period, 3),
            previous_s=round(before, 3),
            lost_per_round_s=round(cost or 0.0, 3),
            budget=view.budget,
        )
    return period
