"""Adaptive windows: probes within the duty budget, W lengthened after long kernels, capped."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.agent import parse, sample
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.capture import CapturedWindow, Source
from warpwatch.capture.daemon import KinetoDaemonSource
from warpwatch.capture.dirsource import DirSource
from warpwatch.capture.replay import ReplaySource
from warpwatch.capture.servers import ProfilingServerSource
from warpwatch.config.table import Config
from warpwatch.service.agent import Service
from warpwatch.service.windowplan import WindowPlanner


def exposed(svc: Service, name: str, labels: dict[str, str] | None = None) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), name, **(labels or {}))


def test_every_tenth_window_is_a_probe_paid_for_by_the_cycle() -> None:
    plan = WindowPlanner(base=1.0, period=60.0, max_duty=0.1)  # cap 6 s
    windows = [plan.next() for _ in range(20)]
    assert windows[0] == (8.0, True) and windows[10] == (8.0, True)  # 8 x 1 s
    assert all(w == (1.0, False) for i, w in enumerate(windows) if i % 10)
    # average duty over a cycle: (9 x 1 + 8) / (10 x 60) = 2.8 % <= 10 %
    assert sum(w for w, _ in windows[:10]) / (10 * 60.0) <= 0.1


def test_a_probe_is_shortened_to_keep_the_cycle_within_the_duty_cap() -> None:
    plan = WindowPlanner(base=5.0, period=60.0, max_duty=0.1)  # cap 6 s: budget 10 x 6 - 9 x 5 = 15 s
    assert plan.next() == (15.0, True)
    plan = WindowPlanner(base=6.0, period=60.0, max_duty=0.1)  # no room left: no probe
    assert plan.next() == (6.0, False)


def test_a_long_kernel_lengthens_the_window_to_four_times_it_within_the_cap() -> None:
    plan = WindowPlanner(base=1.0, period=60.0, max_duty=0.1)
    assert not plan.observe(0.2)  # 4 x 0.2 s fits in 1 s
    assert plan.observe(0.5) and plan.window == pytest.approx(2.0)
    assert plan.observe(3.0) and plan.window == pytest.approx(6.0)  # 12 s wanted, the cap is 6 s
    assert not plan.observe(0.1) and plan.window == pytest.approx(6.0)  # never shortened


def test_each_source_declares_who_cuts_its_windows() -> None:
    assert KinetoDaemonSource.windows_timed_by == ProfilingServerSource.windows_timed_by == "agent"
    assert DirSource.windows_timed_by == ReplaySource.windows_timed_by == "producer"


class LongKernelSource(Source):
    """A stand-in for a source that opens windows of the asked length (the Kineto daemon on a GPU,
    which cannot run here): each capture writes a trace of that length holding one kernel of
    `kernel_s`, wholly inside it when it fits (Kineto's rule)."""

    def __init__(self, folder: Path, kernel_s: float) -> None:
        self.name = "stand-in"
        self.folder = folder
        self.kernel_s = kernel_s
        self.asked: list[float] = []

    def start(self) -> None:
        pass

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        self.asked.append(window_s)
        w, d = window_s * 1e6, self.kernel_s * 1e6
        events = [span(0, w)] + ([kernel("long_kernel", ts=(w - d) / 2, dur=d)] if d < w else [])
        path = self.folder / f"w{len(self.asked):04d}.json"
        write(path, trace_doc(events))
        return [CapturedWindow(source=self.name, path=path, labels={"process": "p"})]

    def close(self) -> None:
        pass


def test_the_service_probes_then_asks_for_the_lengthened_window(tmp_path: Path) -> None:
    src = LongKernelSource(tmp_path, kernel_s=0.3)  # 3 x the configured 0.1 s window
    svc = Service(
        Config(
            source=("stand-in",), address="127.0.0.1", port=0, period=10.0, window=0.1, jitter=0.0, adaptive_window=True
        ),
        sources=[src],
    )
    for _ in range(3):
        svc.run_round()
    # cap = 10 % of 10 s; the first window is a probe of 8 x 0.1 s that holds the 0.3 s kernel;
    # then W = min(1 s, 4 x 0.3 s)
    assert src.asked == [pytest.approx(0.8), pytest.approx(1.0), pytest.approx(1.0)]
    assert exposed(svc, "warpwatch_capture_window_seconds") == pytest.approx(1.0)


def test_without_the_setting_the_window_stays_what_was_configured(tmp_path: Path) -> None:
    src = LongKernelSource(tmp_path, kernel_s=0.3)
    svc = Service(
        Config(source=("stand-in",), address="127.0.0.1", port=0, period=10.0, window=0.1, jitter=0.0), sources=[src]
    )
    for _ in range(2):
        svc.run_round()
    assert src.asked == [0.1, 0.1]
    assert exposed(svc, "warpwatch_capture_window_seconds") == pytest.approx(0.1)


class CutByItsProducer(LongKernelSource):
    """Windows somebody else cut (as `dir:` reads them): a second each, holding the long kernel,
    whatever the agent asks for."""

    windows_timed_by = "producer"

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        windows = super().capture(1.0, timeout_s)
        self.asked[-1] = window_s
        return windows


def test_windows_their_producer_cut_are_never_probed_nor_lengthen_the_window(tmp_path: Path) -> None:
    src = CutByItsProducer(tmp_path, kernel_s=0.3)
    svc = Service(
        Config(
            source=("stand-in",), address="127.0.0.1", port=0, period=10.0, window=0.1, jitter=0.0, adaptive_window=True
        ),
        sources=[src],
    )
    for _ in range(3):
        svc.run_round()
    assert exposed(svc, "warpwatch_windows_total", {"outcome": "ok"}) == 3  # each held the 0.3 s kernel
    assert src.asked == [0.1, 0.1, 0.1]  # the configured window, no probe
    assert exposed(svc, "warpwatch_capture_window_seconds") == pytest.approx(0.1)
