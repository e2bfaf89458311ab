"""promtool scenarios of WarpwatchSlowsServing and the test of its record (`queries.OVERHEAD_BUDGET_USED`).

The agent's cost gauge changes once per round; one step of the tests (`ruletests.STEP_S`, 60 s) is
one round at the default `Settings.capture_period`. The values follow the settings: the cost that
fires is 1.5 times the tolerated bound (`1 + overhead_tolerance` times the budget); the near misses
stay inside the bound, or dip under the budget before `overhead_rounds` rounds have passed.
"""

from __future__ import annotations

from typing import Any

from ..export import metricdefs as md
from . import queries as q
from .ruletests_inputs import AGENT, SCRAPE, STEP_S, Firing, Scenario, gauge, input_series, minutes, selector_labels
from .runbook import AlertDef
from .settings import Settings, format_duration

BUDGET = 0.01
"""The agents' --overhead-budget in the scenarios (the default)."""
INSTANCES = {"llm-0": "10.0.0.7:9946", "llm-1": "10.0.0.8:9946"}


def _series(s: Settings, metric: md.MetricDef, pod: str, values: str) -> tuple[str, str]:
    """An input series of the agent in `pod`, with the labels its scrape attaches."""
    labels = {**selector_labels(s), **AGENT, **SCRAPE, "pod": pod, "instance": INSTANCES[pod]}
    return (input_series(metric, labels), values)


def _fired(s: Settings, pod: str) -> dict[str, str]:
    """The labels the record (and so the alert) keeps."""
    return {k: v for k, v in {**AGENT, "pod": pod}.items() if k in q.pod_labels(s)}


def _budget(s: Settings, pod: str, n: int, budget: float = BUDGET) -> tuple[str, str]:
    return _series(s, md.OVERHEAD_BUDGET, pod, gauge((budget, n)))


def slows_serving_scenarios(s: Settings, alert: AlertDef) -> list[Scenario]:
    """Scenarios over one or two agents (pods llm-0, llm-1), one sample per round."""
    hold = minutes(alert.for_)
    bound = 1 + s.overhead_tolerance
    over = round(BUDGET * bound * 1.5, 9)
    inside = round(BUDGET * (1 + s.overhead_tolerance / 2), 9)
    rise = 5  # rounds at the budget before the cost rises above it
    t = rise + hold
    n = t + 1
    pod, other = "llm-0", "llm-1"
    rising = gauge((BUDGET, rise), (over, n - rise))
    dipping = " ".join([gauge((over, hold), (BUDGET, 1))] * (n // hold + 1))
    return [
        Scenario(
            f"the cost rises above the budget and stays: fires after {hold} rounds, for the agent over its "
            "own budget only (the other has a larger one)",
            (
                _series(s, md.OVERHEAD, pod, rising),
                _budget(s, pod, n),
                _series(s, md.OVERHEAD, other, rising),
                _budget(s, other, n, round(over * 1.2, 9)),
            ),
            t,
            (Firing(_fired(s, pod), over / BUDGET),),
            silent_at=(rise + hold - 1,),
        ),
        Scenario(
            f"near miss: above the budget in {hold} successive rounds, then under it, repeatedly (seen above "
            f"for {hold - 1} rounds, short of the for-duration)",
            (_series(s, md.OVERHEAD, pod, dipping), _budget(s, pod, n)),
            t,
            silent_at=tuple(range(1, t)),
        ),
        Scenario(
            "near miss: above the budget, within the tolerance the agent rests in",
            (_series(s, md.OVERHEAD, pod, gauge((inside, n))), _budget(s, pod, n)),
            t,
        ),
        Scenario("near miss: nothing measured yet (no cost gauge)", (_budget(s, pod, n),), t),
    ]


def overhead_recording_test(s: Settings) -> dict[str, Any]:
    """The record is each agent's cost over its own budget, with the scrape's job, instance and
    container dropped; an agent that measured nothing yet has none."""
    steps, pod = 3, "llm-0"
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(_fired(s, pod).items()))
    return {
        "name": "recording rule: the agent's cost over its own budget, per pod",
        "interval": format_duration(STEP_S),
        "input_series": [
            {"series": series, "values": values}
            for series, values in (
                _series(s, md.OVERHEAD, pod, gauge((0.015, steps + 1))),
                _budget(s, pod, steps + 1),
                _budget(s, "llm-1", steps + 1, 0.02),
            )
        ],
        "promql_expr_test": [
            {
                "expr": f"round({q.OVERHEAD_BUDGET_USED} * 1e6)",
                "eval_time": format_duration(steps * STEP_S),
                "exp_samples": [{"labels": f"{{{inner}}}", "value": round(0.015 / BUDGET * 1e6)}],
            }
        ],
    }
