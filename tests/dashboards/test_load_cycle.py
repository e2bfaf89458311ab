"""Issue 45: the occupancy alerts through a real Prometheus over a known serving load cycle.

Two and a half days (60 h) of five deployments (tests/support/loadcycle.py: day, evening and night
batches; a GEMM whose grid the weights set and an attention kernel whose grid is heads x sequences;
real launch configurations from HTA's A100 trace, every per-launch figure from the real analysis)
are written as OpenMetrics, turned into blocks with `promtool tsdb create-blocks-from openmetrics`,
the generated recording rules backfilled tier by tier with `promtool tsdb create-blocks-from rules`,
and every alert of the occupancy group evaluated over the whole timeline through the HTTP API
(`query_range` at the rule interval, 1 min) with its `for:` applied as Prometheus applies it (active
at every evaluation for that long).

Nothing is broken in `cycle` (GEMM-heavy: attention is 56 % of its GPU time by day, 17 % at night)
and `cycle-attn` (attention-heavy: 83 % and 45 %): no occupancy alert may fire, at any time. Before
issue 45 the rules compared estimated occupancy (attention's falls from 0.95 by day to 0.59 at night,
its grid dropping from 4.7 waves to 0.6) with its daily mean: WarpwatchKernelOccupancyDegraded and
WarpwatchGpuOccupancyDegraded fired every night on both. Those rules, as generated at 9098b5d, are
kept in `data/occupancy-alerts-9098b5d.yaml` and evaluated beside today's: the first test asserts
their false alarms (this test failed on the code before issue 45; it passes after).
`regress-day` (12:00 of day 2) and `regress-night` (02:00 of night 2) raise the attention kernel's
registers from 18 to 64 at constant load, so that 2 blocks fit per SM instead of 4 (theoretical
occupancy 1.0 -> 0.5, worked out by hand: 64 x 512 = 32,768 of the SM's 65,536 registers);
`swap` replaces it at 14:00 of day 2 by a kernel with the resources of a real Triton kernel (190
registers, 1 block of 8 warps per SM: 0.125). Each must fire a regression alert within an hour,
and nothing before.
"""

from __future__ import annotations

import importlib.util
import json
import os
import urllib.parse
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.loadcycle import ATTN, SWAPPED, Change, Deployment, load_at, openmetrics_families
from support.prometheus import PROMETHEUS, prometheus
from support.promfleet import backfill_recording_tiers, create_blocks, openmetrics
from warpwatch.dashboards import rules
from warpwatch.dashboards.alerts import GROUP_OCCUPANCY
from warpwatch.dashboards.settings import DEFAULT_SETTINGS, duration_seconds

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="needs Debian's prometheus")]

HOURS = 60
MINUTES = HOURS * 60
DAY2_NOON, DAY2_AFTERNOON, NIGHT2_2AM = (24 + 12) * 60, (24 + 14) * 60, (48 + 2) * 60
DEPLOYMENTS = (
    Deployment("cycle", gemm_us=400.0),
    Deployment("cycle-attn", gemm_us=100.0),
    Deployment("regress-day", gemm_us=400.0, change=Change("regress", DAY2_NOON)),
    Deployment("regress-night", gemm_us=400.0, change=Change("regress", NIGHT2_2AM)),
    Deployment("swap", gemm_us=400.0, change=Change("swap", DAY2_AFTERNOON)),
)
WITHIN_MIN = 60
EVAL_FROM_MIN = 120
"""Evaluation starts once the baseline can hold `degraded_min_samples` records (60 at 1 min)."""


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    data = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query_range", data=data, timeout=600) as resp:
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def firing_spans(series: list[dict[str, Any]], hold_s: float, step: float) -> dict[str, list[tuple[float, float]]]:
    """Per series (its labels as text), the spans it fired: active at every evaluation for `hold_s`."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for s in series:
        key = ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items()))
        since: float | None = None
        last: float | None = None
        for t, _ in s["values"]:
            t = float(t)
            if last is None or t - last > step * 1.01:
                since = t  # a gap: pending starts again
            last = t
            assert since is not None
            if t - since >= hold_s:
                if out[key] and out[key][-1][1] >= t - step * 1.01:
                    out[key][-1] = (out[key][-1][0], t)
                else:
                    out[key].append((t, t))
    return dict(out)


OLD_RULES = Path(__file__).parent / "data" / "occupancy-alerts-9098b5d.yaml"
PANELS = {
    "attention_estimated_occupancy": (
        f'fleet_kernel:warpwatch_kernel_estimated_occupancy_seconds_total:rate5m{{kernel="{ATTN}"}}\n'
        f'  / fleet_kernel:warpwatch_kernel_seconds_total:rate5m{{kernel="{ATTN}"}}'
    ),
    "attention_theoretical_occupancy": (
        f'fleet_kernel:warpwatch_kernel_theoretical_occupancy_seconds_total:rate5m{{kernel="{ATTN}"}}\n'
        f'  / fleet_kernel:warpwatch_kernel_seconds_total:rate5m{{kernel="{ATTN}"}}'
    ),
    "busy": "fleet:warpwatch_gpu_busy_seconds_total:rate5m / fleet:warpwatch_gpu_observed_seconds_total:rate5m",
}
"""What the docs' figure draws beside the alerts (docs/alerts-meaning.md, `docs/load_cycle_figure.py`)."""
Spans = dict[str, dict[str, list[tuple[float, float]]]]


@pytest.fixture(scope="module")
def fired(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Spans]:
    """Per rule set (`now`, `9098b5d`), per occupancy alert, its firing spans (minutes from midnight
    of day 1) per series; with WARPWATCH_LOAD_CYCLE_JSON set, written there with the panels' series."""
    tmp = tmp_path_factory.mktemp("loadcycle")
    start = 1_700_000_000 // 86_400 * 86_400 - 86_400 * 10.0  # a midnight, well in the past
    end = start + MINUTES * 60
    data = tmp / "data"
    create_blocks(openmetrics(openmetrics_families(DEPLOYMENTS, MINUTES, start)), data, tmp)
    groups = rules.prometheus_groups(DEFAULT_SETTINGS)
    backfill_recording_tiers(data, groups, start, end)
    (occupancy,) = [g for g in groups if g["name"] == GROUP_OCCUPANCY]
    (old,) = yaml.safe_load(OLD_RULES.read_text())["groups"]
    step = duration_seconds(DEFAULT_SETTINGS.rule_interval)
    out: dict[str, Spans] = {"now": {}, "9098b5d": {}}
    panels: dict[str, Any] = {}
    with prometheus(data) as (url, _):
        for version, group in (("now", occupancy), ("9098b5d", old)):
            for rule in group["rules"]:
                series = query_range(url, rule["expr"], start + EVAL_FROM_MIN * 60, end, step)
                spans = firing_spans(series, duration_seconds(rule["for"]), step)
                out[version][rule["alert"]] = {
                    k: [((a - start) / 60, (b - start) / 60) for a, b in v] for k, v in spans.items()
                }
        for name, expr in PANELS.items():
            panels[name] = [
                {"labels": s["metric"], "values": [((float(t) - start) / 60, float(v)) for t, v in s["values"]]}
                for s in query_range(url, expr, start, end, 300)
            ]
    load = [(m, *load_at(m)) for m in range(0, MINUTES + 1, 5)]
    FIGURE_DATA.update(fired=out, panels=panels, load=load, deployments=[d.name for d in DEPLOYMENTS])
    if target := os.environ.get("WARPWATCH_LOAD_CYCLE_JSON"):
        Path(target).write_text(json.dumps(FIGURE_DATA))
    return out


FIGURE_DATA: dict[str, Any] = {}
"""What the module's Prometheus run gives the docs' figure (filled by the `fired` fixture)."""
FIGURE = Path(__file__).resolve().parents[2] / "docs" / "img" / "load-cycle.svg"


def _of(fired: Spans, deployment: str) -> dict[str, list[tuple[float, float]]]:
    return {
        f"{alert}{{{key}}}": spans
        for alert, by_series in fired.items()
        for key, spans in by_series.items()
        if f"deployment={deployment}," in key + ","
    }


def _nights(spans: dict[str, list[tuple[float, float]]]) -> set[int]:
    """The nights (1: the first evening's, 2: the second's) in which any span lies (22:00-08:00)."""
    return {int((a + 120) // 1440) for v in spans.values() for a, _ in v if not 8 * 60 <= a % 1440 < 22 * 60}


@pytest.mark.parametrize("deployment", ["cycle", "cycle-attn"])
def test_the_rules_before_issue_45_paged_every_night_on_the_load_cycle(
    fired: dict[str, Spans], deployment: str
) -> None:
    """The GPU alert every night on both; the kernel alert every night for attention where it keeps
    more than 5 % of the GPU's time at night (cycle-attn: 45 % of 20 % busy; cycle: 17 % of 20 %)."""
    old = _of(fired["9098b5d"], deployment)
    gpu = {k: v for k, v in old.items() if k.startswith("WarpwatchGpuOccupancyDegraded")}
    assert _nights(gpu) == {1, 2}, old
    kernel = {k: v for k, v in old.items() if k.startswith("WarpwatchKernelOccupancyDegraded")}
    if deployment == "cycle-attn":
        assert _nights(kernel) == {1, 2} and all(f"kernel={ATTN}" in k for k in kernel), old
    else:
        assert kernel == {}, old


@pytest.mark.parametrize("deployment", ["cycle", "cycle-attn"])
def test_no_occupancy_alert_fires_on_the_load_cycle(fired: dict[str, Spans], deployment: str) -> None:
    names = {"WarpwatchKernelOccupancyRegressed", "WarpwatchOccupancyRegressed", "WarpwatchKernelLaunchChanged"}
    assert names <= set(fired["now"]), "the occupancy group's alerts"
    assert _of(fired["now"], deployment) == {}


@pytest.mark.parametrize(
    ("deployment", "at", "kernel"),
    [("regress-day", DAY2_NOON, ATTN), ("regress-night", NIGHT2_2AM, ATTN), ("swap", DAY2_AFTERNOON, SWAPPED)],
)
def test_a_regression_at_constant_load_fires_within_an_hour(
    fired: dict[str, Spans], deployment: str, at: int, kernel: str
) -> None:
    ours = _of(fired["now"], deployment)
    first = min((spans[0][0] for spans in ours.values()), default=None)
    assert first is not None, f"nothing fired for {deployment}"
    assert at < first <= at + WITHIN_MIN, ours
    regressed = {k: v for k, v in ours.items() if "Regressed" in k}
    assert regressed, ours
    assert min(spans[0][0] for spans in regressed.values()) <= at + WITHIN_MIN, ours
    kernel_alerts = [k for k in regressed if k.startswith("WarpwatchKernelOccupancyRegressed")]
    assert kernel_alerts and all(f"kernel={kernel}" in k for k in kernel_alerts), ours


def test_the_docs_figure_is_drawn_from_this_data(fired: dict[str, Spans]) -> None:
    """docs/alerts-meaning.md shows docs/img/load-cycle.svg: `benchmarks/load_cycle_figure.py` draws it
    from this module's data (rerun it when this test fails)."""
    spec = importlib.util.spec_from_file_location(
        "load_cycle_figure", FIGURE.parents[2] / "benchmarks/load_cycle_figure.py"
    )
    assert spec is not None and spec.loader is not None
    figure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figure)
    assert FIGURE.read_text() == figure.svg(json.loads(json.dumps(FIGURE_DATA)))
