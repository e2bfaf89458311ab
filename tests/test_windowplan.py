"""Adaptive windows: probes within the duty budget, W lengthened after long kernels, capped."""

from __future__ import annotations

import pytest

from warpwatch.windowplan import WindowPlanner, agent_chooses_window


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


def test_only_sources_that_open_their_own_windows_adapt() -> None:
    assert agent_chooses_window("kineto-daemon") and agent_chooses_window("vllm:http://x:8000")
    assert not agent_chooses_window("dir:/traces") and not agent_chooses_window("replay:/t")
