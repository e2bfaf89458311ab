"""The alert on what the agent costs the server it profiles: WarpwatchSlowsServing.

The agent estimates its cost each round (`warpwatch.overhead`: the server time a window loses, by
the engine's own inter-token latency inside windows against outside them or by the stall of a
stop, whichever is larger, per period) and stretches its period to keep that within
--overhead-budget. It takes a new period only when it differs from the current one by more than
`overhead.PERIOD_CHANGE`, so the cost may rest up to that share above the budget
(`Settings.overhead_tolerance`). Above that, held for `Settings.overhead_rounds` capture periods,
the agent could not keep within its budget: its period is at its cap (`config.MAX_PERIOD_S`).
The rule reads the tier-1 record `queries.OVERHEAD_BUDGET_USED` (cost / budget of each agent).
"""

from __future__ import annotations

from ..config.table import MAX_PERIOD_S
from ..export import metricdefs as md
from . import queries as q
from .runbook import AlertDef, Runbook
from .settings import Settings

GROUP_AGENT = "warpwatch-agent"


def slows_serving(s: Settings) -> AlertDef:
    bound = 1 + s.overhead_tolerance
    return AlertDef(
        name="WarpwatchSlowsServing",
        group=GROUP_AGENT,
        expr=f"{q.OVERHEAD_BUDGET_USED} > {bound:g}",
        for_=s.overhead_for,
        severity="warning",
        summary='warpwatch costs the server in {{ $labels.pod }} {{ printf "%.2f" $value }}x its overhead budget',
        description=(
            "The warpwatch agent in pod {{ $labels.namespace }}/{{ $labels.pod }} estimates that profiling "
            'costs the server it watches {{ printf "%.2f" $value }} times its `--overhead-budget` '
            f"(`{md.OVERHEAD.name}` / `{md.OVERHEAD_BUDGET.name}`, bound {bound:g}) for "
            f"{s.overhead_rounds} capture periods. The agent stretches its period to stay within the "
            "budget; it could not."
        ),
        thresholds=(
            ("overhead_tolerance", f"{s.overhead_tolerance:g}"),
            ("overhead_rounds", str(s.overhead_rounds)),
            ("capture_period", s.capture_period),
        ),
        runbook=_runbook(s),
    )


def _runbook(s: Settings) -> Runbook:
    cap = f"{MAX_PERIOD_S / 3600:g} h"
    tolerance = f"{s.overhead_tolerance:.0%}"
    return Runbook(
        meaning="Each round the agent estimates the server time one capture window costs: the tokens "
        "served slower inside the window (the engine's own inter-token latency inside windows against "
        "outside them, `vllm:` and `sglang:` sources) or the stall of its stop (from asking the source to "
        "stop until it answered: the engine writing its trace), whichever is larger, over the last rounds; "
        "divided by the period, that is the share of the server's time profiling costs "
        f"(`{md.OVERHEAD.name}`). Above `--overhead-budget` the agent stretches its period (the "
        "`period_stretched` log line) up to "
        f"{cap}; it takes a new period only when it differs from the current one by more than "
        f"{tolerance}, so its cost may rest up to {tolerance} above the budget. Above that for "
        f"{s.overhead_rounds} capture periods (the estimate changes once per round), the agent could not "
        f"keep within its budget: one window costs more than the budget allows even at one window per {cap}.",
        impact="The profiled server loses more than the budgeted share of its serving time: inter-token "
        "latency rises inside every window, and while a vLLM or SGLang worker writes its trace it serves "
        "nothing (requests stall for the stop's seconds). With the period at its cap, windows come once "
        f"per {cap}: warpwatch's metrics describe the past.",
        diagnosis=(
            "*Agent health* dashboard, *Cost to the server*: the estimated cost against the budget; "
            "*Capture window and period*: the period in force (at "
            f"{MAX_PERIOD_S:g} s it is at its cap).",
            "*Capture stop stall* by source: stops of tens of seconds or minutes mean the engine records "
            "too much (Python stacks, memory, every CPU op) and writes a large trace.",
            "*Served slowdown* by source: a large slowdown with short stops means recording itself is "
            "expensive while the window is open (CPU activities, shapes).",
            "Agent logs: `period_stretched` names the server seconds lost per round, the budget and the "
            "slowdown per source. The vLLM server's own log times each stop (`profiler_stop` to "
            "`Profiler stopped`).",
        ),
        mitigation=(
            "Lower what one window costs on the server. vLLM: start it with `--profiler-config` holding "
            '`"torch_profiler_with_stack": false`, `"ignore_frontend": true` and '
            '`"torch_profiler_activities": ["CUDA"]` (no stacks, no front-end trace, GPU activities '
            "only; no `torch_profiler_record_shapes` or `torch_profiler_with_memory`).",
            "Bound each window in engine steps: `max_steps=N` on the source (`--source "
            "vllm:URL,dir=PATH,max_steps=8`); fewer steps, a smaller trace, a shorter stop.",
            "Raise the budget only knowingly: `--overhead-budget` (chart value "
            "`warpwatch.config.overhead_budget`) is the share of the server's time you accept to lose.",
            "Or stop profiling this server: remove the source (or the agent) until its configuration is fixed.",
        ),
    )
