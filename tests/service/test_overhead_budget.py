"""The overhead budget in the service: a source's measured cost above --overhead-budget stretches
the period (gauge, one log line), and the cost metrics are exported."""

from __future__ import annotations

import logging

import pytest

from support.agent import parse, sample
from warpwatch.capture import CapturedWindow, Source
from warpwatch.config.table import Config
from warpwatch.overhead import LatencySplit
from warpwatch.service.agent import Service


def exposed(svc: Service, name: str, labels: dict[str, str] | None = None) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), name, **(labels or {}))


class CostlySource(Source):
    """Opens no window; reports a stop stall per round and a served-latency split."""

    def __init__(self, stall_s: float, splits: list[LatencySplit] | None = None) -> None:
        self.name = "stand-in:costly"
        self.stall_s = stall_s
        self.splits = list(splits or [])
        self.split: LatencySplit | None = None

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        if self.splits:
            self.split = self.splits.pop(0)
        return []

    def take_stop_seconds(self) -> list[float]:
        return [self.stall_s]

    def served_latency(self) -> LatencySplit | None:
        return self.split


def service(src: CostlySource, budget: float) -> Service:
    return Service(
        Config(
            source=("stand-in",),
            address="127.0.0.1",
            port=0,
            period=10.0,
            window=0.5,
            jitter=0.0,
            overhead_budget=budget,
        ),
        sources=[src],
    )


def test_a_stall_above_the_budget_stretches_the_period(caplog: pytest.LogCaptureFixture) -> None:
    svc = service(CostlySource(stall_s=4.0), budget=0.01)
    assert exposed(svc, "warpwatch_capture_period_seconds") == 10.0
    with caplog.at_level(logging.INFO, logger="warpwatch.service"):
        for _ in range(3):
            svc.run_round()
    # 4 s lost per round: within 1 % the period is 4 / 0.01 = 400 s (duty 0.5 / 400)
    assert exposed(svc, "warpwatch_capture_period_seconds") == pytest.approx(400.0)
    assert exposed(svc, "warpwatch_capture_duty_ratio") == pytest.approx(0.5 / 400)
    own = svc.exposition.self_registry
    assert own.get_sample_value("warpwatch_overhead_ratio") == pytest.approx(0.01)
    assert own.get_sample_value("warpwatch_overhead_budget_ratio") == 0.01
    stops = {"source": "stand-in:costly"}
    assert own.get_sample_value("warpwatch_capture_stop_seconds_count", stops) == 3
    assert own.get_sample_value("warpwatch_capture_stop_seconds_sum", stops) == 12.0
    assert own.get_sample_value("warpwatch_capture_stop_seconds_bucket", {**stops, "le": "2.5"}) == 0
    assert own.get_sample_value("warpwatch_capture_stop_seconds_bucket", {**stops, "le": "5.0"}) == 3
    stretched = [r for r in caplog.records if "period_stretched" in r.getMessage()]
    assert len(stretched) == 1 and stretched[0].levelno == logging.WARNING


def test_a_cost_within_the_budget_keeps_the_period() -> None:
    svc = service(CostlySource(stall_s=0.05), budget=0.01)  # 0.05 s per 10 s: 0.5 %
    for _ in range(2):
        svc.run_round()
    assert exposed(svc, "warpwatch_capture_period_seconds") == 10.0
    assert svc.exposition.self_registry.get_sample_value("warpwatch_overhead_ratio") == pytest.approx(0.005)


def test_the_served_slowdown_is_exported_and_charged() -> None:
    # inside 30 ms per token, outside 20 ms: slowdown 0.5; 2 s inside per window, so each round
    # lost 2 x 0.5 / 1.5 = 0.667 s; at 5 % the period becomes 13.3 s
    splits = [LatencySplit(), LatencySplit(0.3, 10, 2.0, 100, 2.0, 1), LatencySplit(0.6, 20, 4.0, 200, 4.0, 2)]
    svc = service(CostlySource(stall_s=0.0, splits=splits), budget=0.05)
    for _ in range(3):
        svc.run_round()
    own = svc.exposition.self_registry
    assert own.get_sample_value("warpwatch_served_slowdown_ratio", {"source": "stand-in:costly"}) == pytest.approx(0.5)
    assert exposed(svc, "warpwatch_capture_period_seconds") == pytest.approx(2 * 0.5 / 1.5 / 0.05)
