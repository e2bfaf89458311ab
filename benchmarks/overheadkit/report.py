"""The side-by-side tables (Markdown) and the JSON document: every round of every arm, and each arm's
rounds pooled (samples merged before percentiles; tokens/s over the arms' summed time; the loss
against no agent as the mean of each round's ratio to the no-agent arm of the same round)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import Any

from .daemonarms import DaemonArm
from .split import ServedSamples, StepSamples, served_summary, step_summary
from .timeline import mean_known
from .vllmarms import ARMS, ArmRun


def _losses(rate: dict[tuple[str, int], float | None], arm: str) -> list[float]:
    out = []
    for (key, r), value in rate.items():
        base = rate.get(("none", r))
        if key == arm and value is not None and base:
            out.append(1.0 - value / base)
    return out


def _lost_per_window(runs: list[ArmRun], rate: dict[tuple[str, int], float | None]) -> list[float]:
    """Per round: the serving time the arm lost against the no-agent arm of its round, in seconds
    per window ((1 − tokens/s ÷ no agent's) × the arm's seconds ÷ its windows)."""
    out = []
    for r in runs:
        base, value = rate.get(("none", r.round)), rate.get((r.arm, r.round))
        if base and value is not None and r.samples.windows:
            out.append((1.0 - value / base) * r.samples.seconds / r.samples.windows)
    return out


def _spacing(runs: list[ArmRun]) -> float | None:
    """Mean time between two window starts of one arm (None with fewer than two in every round)."""
    gaps = [b - a for r in runs for a, b in zip(r.starts, r.starts[1:], strict=False)]
    return sum(gaps) / len(gaps) if gaps else None


def pool_vllm(runs: list[ArmRun]) -> list[dict[str, Any]]:
    """Per arm, in the order first run: the pooled figures and the agent's view per round."""
    rate = {(r.arm, r.round): served_summary(r.samples)["tokens_per_s"] for r in runs}
    out = []
    for key in dict.fromkeys(r.arm for r in runs):
        mine = [r for r in runs if r.arm == key]
        served = served_summary(reduce(ServedSamples.merge, (r.samples for r in mine)))
        windows = sum(r.samples.windows for r in mine)
        stops = [s for r in mine for s in r.stop_s]
        agents = [r.agent for r in mine if r.agent]
        out.append(
            {
                "arm": key,
                "label": ARMS[key].label,
                "rounds": len(mine),
                "served": served,
                "loss_vs_none": _losses(rate, key),
                **_at_period(mine, rate, served),
                "stop_s": {"n": len(stops), "mean": mean_known(stops), "max": max(stops, default=None)},
                "trace_mb_per_window": sum(r.trace_bytes for r in mine) / windows / 1e6 if windows else None,
                "worker_mb_per_window": sum(r.worker_bytes for r in mine) / windows / 1e6 if windows else None,
                "agent": _pool_agent(agents) if agents else None,
                "server_slowdown": [r.server_slowdown for r in mine],
            }
        )
    return out


def _at_period(mine: list[ArmRun], rate: dict[tuple[str, int], float | None], served: dict[str, Any]) -> dict[str, Any]:
    """The loss at the arm's own rhythm: serving seconds lost per window ÷ the time between window
    starts (measured; else the agent's period in force). An arm of 70 s at a 60-s period holds two
    windows, twice the steady rate, so its own loss overstates the steady cost. Lost seconds per
    window two ways: against the no-agent arm of each round (between arms: the machine's drift
    counts), and near the windows within the arm (`split.lost_near_windows`)."""
    lost = _lost_per_window(mine, rate)
    spacing = _spacing(mine)
    periods = [r.agent.get("period_s") for r in mine if r.agent.get("period_s")]
    interval = spacing or (sum(periods) / len(periods) if periods else None)
    mean_lost, near = mean_known(lost), served["lost_s_per_window_near"]
    return {
        "lost_s_per_window": lost,
        "window_spacing_s": spacing,
        "interval_s": interval,
        "loss_at_period": mean_lost / interval if mean_lost is not None and interval else None,
        "loss_at_period_near": near / interval if near is not None and interval else None,
    }


def _pool_agent(agents: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "overhead_ratio": [a["overhead_ratio"] for a in agents],
        "served_slowdown_ratio": [a["served_slowdown_ratio"] for a in agents],
        "period_s": [a["period_s"] for a in agents],
        "stretched_to_s": [a["stretched_to_s"] for a in agents],
        "cpu_s": mean_known([a["cpu_s"] for a in agents]),
        "cpu_share_in_arm": mean_known([a["cpu_share_in_arm"] for a in agents]),
        "peak_pss_mib": max(a["peak_pss_mib"] for a in agents),
        "windows": [a["windows"] for a in agents],
        "tracebacks": sum(a["tracebacks"] for a in agents),
    }


def pool_daemon(arms: list[DaemonArm]) -> list[dict[str, Any]]:
    rate = {(a.arm, a.round): step_summary(a.samples)["steps_per_s"] for a in arms if a.samples}
    out = []
    for key in dict.fromkeys(a.arm for a in arms):
        mine = [a for a in arms if a.arm == key and a.samples]
        steps = step_summary(reduce(StepSamples.merge, (a.samples for a in mine if a.samples)))
        windows = sum(len(a.windows) for a in mine)
        agents = [a.agent for a in mine if a.agent]
        out.append(
            {
                "arm": key,
                "rounds": len(mine),
                "steps": steps,
                "loss_vs_none": _losses(rate, key),
                "trace_kb_per_window": sum(a.trace_bytes for a in mine) / windows / 1e3 if windows else None,
                "agent": _pool_agent(agents) if agents else None,
            }
        )
    return out


def _f(v: float | None, fmt: str = "{:.2f}", none: str = "-") -> str:
    return none if v is None else fmt.format(v)


def _pair(d: dict[str, Any], fmt: str = "{:.1f}") -> str:
    return f"{_f(d['p50'], fmt)} / {_f(d['p99'], fmt)}"


def _pct_list(values: Sequence[float | None]) -> str:
    return ", ".join(_f(None if v is None else 100 * v, "{:+.1f} %") for v in values) or "-"


def vllm_tables(pooled: list[dict[str, Any]]) -> str:
    rows = [
        "| arm | rounds | windows | tokens/s | loss vs no agent (per round) | TTFT p50 / p99 ms | TTFT inside / "
        "outside windows, p50 / p99 ms | inter-token p50 / p99 ms | inter-token inside / outside windows, "
        "p50 / p99 ms | longest stall s |",
        "|---|--:|--:|--:|---|--:|--:|--:|--:|--:|",
    ]
    for p in pooled:
        s = p["served"]
        rows.append(
            f"| {p['arm']}: {p['label']} | {p['rounds']} | {s['windows']} | {_f(s['tokens_per_s'], '{:.1f}')} | "
            f"{_pct_list(p['loss_vs_none']) if p['arm'] != 'none' else '-'} | {_pair(s['ttft_ms'])} | "
            f"{_pair(s['ttft_inside_ms'])} / {_pair(s['ttft_outside_ms'])} | {_pair(s['itl_ms'])} | "
            f"{_pair(s['itl_inside_ms'])} / {_pair(s['itl_outside_ms'])} | {_f(s['longest_stall_s'])} |"
        )
    rows += ["", WINDOWS_HEAD, *(_windows_row(p) for p in pooled if p["agent"] is not None)]
    rows += ["", AGENT_HEAD, *(_agent_row(p) for p in pooled if p["agent"] is not None)]
    return "\n".join(rows)


def daemon_table(pooled: list[dict[str, Any]]) -> str:
    rows = [
        "| arm | rounds | windows | steps/s | loss vs no agent (per round) | step p50 / p99 ms | "
        "inside windows p50 / p99 ms | outside p50 / p99 ms | longest step ms | trace KB per window | "
        "agent CPU s per arm | agent peak PSS MiB |",
        "|---|--:|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for p in pooled:
        s, a = p["steps"], p["agent"]
        rows.append(
            f"| {p['arm']} | {p['rounds']} | {s['windows']} | {_f(s['steps_per_s'], '{:.1f}')} | "
            f"{_pct_list(p['loss_vs_none']) if p['arm'] != 'none' else '-'} | {_pair(s['step_ms'], '{:.2f}')} | "
            f"{_pair(s['step_inside_ms'], '{:.2f}')} | {_pair(s['step_outside_ms'], '{:.2f}')} | "
            f"{_f(s['longest_step_ms'], '{:.0f}')} | {_f(p['trace_kb_per_window'], '{:.1f}')} | "
            f"{_f(a['cpu_s']) if a else '-'} | {_f(a['peak_pss_mib'], '{:.0f}') if a else '-'} |"
        )
    return "\n".join(rows)


WINDOWS_HEAD = (
    "| arm | windows | between window starts s | engine stop s per window: mean (max) | trace MB per window "
    "(worker) | serving s lost per window: near the windows | the same against the no-agent arm (per round) | "
    "loss at that rhythm: near / against no agent |\n|---|--:|--:|--:|--:|--:|--:|--:|"
)


def _pct(v: float | None) -> str:
    return _f(None if v is None else 100 * v, "{:+.1f} %")


def _windows_row(p: dict[str, Any]) -> str:
    st, s = p["stop_s"], p["served"]
    lost = ", ".join(_f(v) for v in p["lost_s_per_window"]) or "-"
    return (
        f"| {p['arm']} | {s['windows']} | {_f(p['interval_s'], '{:.1f}')} | {_f(st['mean'])} ({_f(st['max'])}) | "
        f"{_f(p['trace_mb_per_window'])} ({_f(p['worker_mb_per_window'])}) | {_f(s['lost_s_per_window_near'])} | "
        f"{lost} | {_pct(p['loss_at_period_near'])} / {_pct(p['loss_at_period'])} |"
    )


AGENT_HEAD = (
    "| arm | agent: period s (per round) | agent: overhead_ratio (per round) | agent: s lost per window "
    "(overhead_ratio x period) | agent: served_slowdown_ratio (per round) | vLLM's histogram on the agent's "
    "spans (per round) | client, on the agent's spans | "
    "client, inside windows ÷ outside − 1 | agent CPU s per arm (share of the arm) | agent peak PSS MiB |\n"
    "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"
)


def _agent_row(p: dict[str, Any]) -> str:
    a, s = p["agent"], p["served"]
    agent_lost = (
        ", ".join(
            _f(o * q) if o is not None and q else "-" for o, q in zip(a["overhead_ratio"], a["period_s"], strict=True)
        )
        or "-"
    )
    return (
        f"| {p['arm']} | {', '.join(_f(v, '{:.0f}') for v in a['period_s'])} | "
        f"{_pct_list(a['overhead_ratio'])} | {agent_lost} | {_pct_list(a['served_slowdown_ratio'])} | "
        f"{_pct_list(p['server_slowdown'])} | "
        f"{_pct(s['client_slowdown_agent_spans'])} | {_pct(s['client_slowdown'])} | "
        f"{_f(a['cpu_s'])} ({_f(100 * a['cpu_share_in_arm'], '{:.2f} %')}) | {_f(a['peak_pss_mib'], '{:.0f}')} |"
    )
