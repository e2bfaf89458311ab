"""The compiled loops of the analysis (`warpwatch/analysis/_windowmath.c`) against their Python definitions.

They must give the same floats, bit for bit: the comparisons here are of `repr`s, on random
launches built to hit every branch (launches outside the window, d = 0, d >= W, one to six
streams overlapping, more overlaps than `MAX_OVERLAP`), and on every shared trace through
`analyze`. Whether they are right is the business of tests/analysis/test_analysis.py (brute force on
random launches) and tests/dashboards/test_aggregation_truth.py (a known stream through the real agent and
Prometheus), which run on the compiled path, the default.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

import pytest

from support.paths import SHARED_TRACES
from warpwatch.analysis import window as analysis
from warpwatch.analysis import windowmath
from warpwatch.errors import TraceError
from warpwatch.model import KernelLaunch, Trace, TraceWindow
from warpwatch.runtime import native as native_modules
from warpwatch.trace import parse_trace

native: Any = pytest.importorskip("warpwatch.analysis._windowmath", reason="never skipped in CI: see the first test")


@pytest.fixture
def python(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Run `fn` with the Python loops."""

    def run(fn: Any, *args: Any) -> Any:
        with monkeypatch.context() as m:
            m.setattr(windowmath, "NATIVE", False)
            return fn(*args)

    return run


def test_the_compiled_loops_are_built_and_used() -> None:
    assert windowmath.NATIVE, "warpwatch.analysis._windowmath was not built, or WARPWATCH_PURE_PYTHON is set"
    assert native_modules.describe() == "all"  # what the agent's start line says


def _launches(rng: random.Random, n: int, streams: int, w: float) -> list[KernelLaunch]:
    out = []
    t = [0.0] * streams
    for i in range(n):
        s = rng.randrange(streams)
        gap = rng.choice([0.0, 0.5, rng.expovariate(1 / 30)])
        d = rng.choice([0.0, 1.0, rng.expovariate(1 / 20), rng.uniform(0.4, 1.2) * w, 1e-7])
        ts = t[s] + gap - (rng.uniform(0, 200) if i == 0 else 0.0)
        t[s] = ts + d
        out.append(
            KernelLaunch(
                f"k{rng.randrange(5)}",
                rng.randrange(2),
                ts,
                d,
                s,
                (rng.randrange(1, 9), 1, 1),
                (128, 1, 1),
                32,
                0,
                1.5,
                None,
                None,
            )
        )
    return out


@pytest.mark.parametrize("seed", range(40))
def test_group_sums_and_busy_time_are_the_python_floats(seed: int, python: Any) -> None:
    rng = random.Random(seed)
    w = rng.choice([50.0, 400.0, 5_000.0])
    launches = _launches(rng, rng.randrange(1, 3_000), rng.randrange(1, 7), w)
    window = TraceWindow(0.0, w, "trace_span") if seed % 3 else TraceWindow(-3.5, w * 7.25, "requested")
    compiled = windowmath.group_launches(launches, window)
    reference = python(windowmath.group_launches, launches, window)
    fields = ("n", "sum_h", "sum_hd", "sum_lim", "longest", "intervals")
    assert [repr([getattr(g, f) for f in fields]) for g in compiled] == [
        repr([getattr(g, f) for f in fields]) for g in reference
    ]
    assert [g.first for g in compiled] == [g.first for g in reference]
    intervals = [iv for g in compiled for iv in g.intervals]
    rng.shuffle(intervals)
    got = windowmath.busy_time(intervals, window.duration)
    assert repr(got) == repr(python(windowmath.busy_time, intervals, window.duration))
    assert got[0] > 0 or not intervals


def test_more_overlapping_launches_than_max_overlap_are_cut_alike(python: Any) -> None:
    rng = random.Random(7)
    intervals = [(float(s), float(s) + rng.uniform(1, 400)) for s in sorted(rng.uniform(0, 300) for _ in range(400))]
    got = windowmath.busy_time(intervals, 1_000.0)
    assert got[1] is True  # the truncation branch ran
    assert repr(got) == repr(python(windowmath.busy_time, intervals, 1_000.0))


def test_inputs_the_compiled_loops_do_not_take_go_to_python() -> None:
    """Integer times (Python adds them exactly) and non-finite ones are left to the Python loop."""
    assert native.busy_time([(1, 2.0)], 10.0, 3) is None
    assert native.busy_time([(float("nan"), 2.0)], 10.0, 3) is None
    assert native.busy_time([(1.0, 2.0)], 10, 3) is None
    launch = KernelLaunch("k", 0, 1, 2, None, None, None, None, None, None, None, None)
    assert native.group_sums([0], 1, [launch], 0.0, 10.0, 10.0) is None
    assert windowmath.busy_time([(1, 2)], 10.0) == (1 * 10 / 9, False)  # d = 1 in W = 10: h = 10/9


def _shared() -> list[Path]:
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


@pytest.mark.slow
def test_every_shared_trace_analyses_to_the_same_floats(python: Any) -> None:
    analysed = 0
    for path in _shared():
        data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
        try:
            trace: Trace = parse_trace(data, path.name)
        except TraceError:
            continue
        assert repr(analysis.analyze(trace)) == repr(python(analysis.analyze, trace)), path.name
        analysed += 1
    assert analysed >= 15
