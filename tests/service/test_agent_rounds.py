"""The agent's rounds in process: failing, hanging and stuck sources, readiness, scrapes rendered once
per snapshot, capture timeouts and overhead (the agent as a subprocess: test_agent.py)."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from support.agent import (
    ALEXNET,
    StubSource,
    parse,
    sample,
    service_for,
)
from support.patience import hang_guard
from warpwatch.capture import CapturedWindow
from warpwatch.config.table import Config
from warpwatch.export import metricdefs as md
from warpwatch.logs import FIELDS_ATTR
from warpwatch.service import reading as reading_module
from warpwatch.service.agent import Service
from warpwatch.service.fanout import CaptureFanout


def value(svc: Service, m: md.MetricDef, **labels: str) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), md.exposed_name(m), **labels)


def test_a_source_that_raises_counts_a_failed_window_and_nothing_escapes(caplog: pytest.LogCaptureFixture) -> None:
    src = StubSource()
    src.raise_exc = RuntimeError("socket gone")
    svc = service_for(src)
    with caplog.at_level(logging.INFO):
        svc.run_round()
    assert value(svc, md.WINDOWS, outcome="failed") == 1.0
    [record] = [r for r in caplog.records if r.msg == "window"]
    assert record.warpwatch_fields["error"] == "capture raised RuntimeError: socket gone"  # type: ignore[attr-defined]


def test_a_window_that_failed_at_the_source_is_counted_by_its_outcome() -> None:
    src = StubSource()
    src.queue.append([CapturedWindow(source="stub:1", path=None, outcome="timed_out", error="no trace in 60s")])
    svc = service_for(src)
    svc.run_round()
    assert value(svc, md.WINDOWS, outcome="timed_out") == 1.0


def test_an_unexpected_error_in_analysis_is_one_line_and_a_failed_window(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(reading_module, "analyze", boom)
    src = StubSource()
    done: list[bool] = []
    src.queue.append([CapturedWindow(source="stub:1", path=ALEXNET, on_done=done.append)])
    svc = service_for(src)
    with caplog.at_level(logging.INFO):
        svc.run_round()
    assert value(svc, md.WINDOWS, outcome="failed") == 1.0
    assert done == [True]
    [record] = [r for r in caplog.records if r.msg == "window"]
    assert record.warpwatch_fields["error"] == "unexpected ZeroDivisionError: division by zero"  # type: ignore[attr-defined]


def test_a_hanging_source_times_out_and_is_skipped_while_busy() -> None:
    src = StubSource()
    src.hanging = True
    svc = service_for(src, {"capture_grace_s": 0.1})
    svc.run_round()
    assert value(svc, md.WINDOWS, outcome="timed_out") == 1.0
    svc.run_round()  # still hanging: skipped, not called concurrently
    assert value(svc, md.WINDOWS, outcome="timed_out") == 1.0
    src.hang.set()


def test_shutdown_abandons_a_stuck_round_after_window_plus_grace(caplog: pytest.LogCaptureFixture) -> None:
    """The round is given `window + shutdown_grace_s`, not its capture's own bound (30 s here)."""
    src = StubSource()
    src.hanging = True
    svc = service_for(src, {"shutdown_grace_s": 0.2}, collect_timeout=30.0)
    svc.startup()
    assert src.hung.wait(30)  # the first round starts at once and hangs in capture
    with caplog.at_level(logging.WARNING, logger="warpwatch.service"):
        svc.shutdown()
    [abandoned] = [r for r in caplog.records if r.msg == "window_abandoned"]
    assert getattr(abandoned, FIELDS_ATTR)["reason"] == "still running 0.25s after the stop request"
    assert src.closed


def test_readiness_follows_the_rounds() -> None:
    now = [1000.0]
    src = StubSource()
    svc = Service(
        Config(
            source=("stub:1",), port=0, address="127.0.0.1", period=60.0, window=1.0, jitter=5.0, collect_timeout=30.0
        ),
        sources=[src],
        clock=lambda: now[0],
    )
    svc.ready.started()
    assert svc.readiness() == (True, "no window expected yet")
    now[0] += 60 + 5 + 1 + 30 + 10 + 1
    assert svc.readiness() == (False, "no round finished in the 107s since start")
    svc.run_round()
    assert svc.readiness() == (True, "last round finished 0s ago")
    now[0] += 200
    assert svc.readiness()[0] is False


def test_a_scrape_renders_each_snapshot_once_per_format() -> None:
    src = StubSource()
    svc = service_for(src)
    text, text_type = svc.render("text/plain")
    om, om_type = svc.render("application/openmetrics-text; version=1.0.0")
    assert text_type.startswith("text/plain") and om_type.startswith("application/openmetrics-text")
    assert om.endswith(b"# EOF\n") and om.count(b"# EOF") == 1
    assert b"process_" in text or b"python_gc" in text  # the agent's own metrics, rendered per scrape
    assert svc.exposition.renders == 2
    svc.render("text/plain")
    assert svc.exposition.renders == 2  # same snapshot: not rendered again
    src.queue.append([CapturedWindow(source="stub:1", path=None, error="no trace")])
    svc.run_round()  # a new snapshot
    assert b'warpwatch_windows_total{outcome="failed"} 1.0' in svc.render("text/plain")[0]
    assert svc.exposition.renders == 3


@pytest.mark.slow
def test_a_round_waits_for_a_capture_as_long_as_its_source_says_it_may_take() -> None:
    """The Kineto daemon needs a start lead and a poll wait beyond window + collect_timeout: a source
    states that overhead, and the round's bound grows by it instead of timing the window out."""
    grace = 0.1

    class SlowSource(StubSource):
        capture_overhead_s = hang_guard()  # minutes: however loaded the machine, the capture returns within

        def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
            time.sleep(window_s + timeout_s + grace + 1.0)  # 1 s (at least) past the bound without overhead
            return [CapturedWindow(source=self.name, path=ALEXNET)]

    src = SlowSource()
    svc = service_for(src, {"capture_grace_s": grace})
    assert CaptureFanout(grace_s=grace).bound([src], 0.05, 0.2) == 0.05 + 0.2 + grace + hang_guard()
    svc.run_round()
    assert value(svc, md.WINDOWS, outcome="ok") == 1
    assert value(svc, md.WINDOWS, outcome="timed_out") == 0


def test_sources_state_their_capture_overhead() -> None:
    from warpwatch.capture.daemon import KinetoDaemonSource
    from warpwatch.capture.daemon.window import KINETO_FINISH_S
    from warpwatch.capture.registry import vllm_source

    daemon = KinetoDaemonSource(Path("/tmp/t"), socket_dir="/tmp/unused", start_lead_s=3.0, poll_interval_hint_s=5.0)
    # no client seen yet: twice 1.5 x 5 s + 1 s (when the agent loses configs), at most 15 s
    assert daemon.capture_overhead_s == 15.0 + 3.0 + KINETO_FINISH_S
    vllm = vllm_source("http://127.0.0.1:1", "/tmp/t", request_timeout_s=10.0, max_retries=2, retry_pause_s=1.0)
    # the start; a stop ending a session left open; three reads of /metrics; the span before the first window
    assert vllm.capture_overhead_s == 3 * 10.0 + 1.0 + 2.0 + 10.0 + 3 * 10.0 + 5.0
    assert StubSource().capture_overhead_s == 0.0
