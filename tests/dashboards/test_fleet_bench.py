"""Issue 24: the CI size of benchmarks/fleet.py (a few pods, one hour), asserting samples touched
(`stats=all`, deterministic), never time.

What it proves: the new boards' panels touch the same number of samples whether the fleet has 2
pods or 4 (their cost does not grow with pods: a panel reads one pod's series or the fleet tier's
records of one deployment), no query errs, and every panel touches fewer samples than f2305fe's on
the same data, whose All-by-default panels grow with every pod.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support.prometheus import PROMETHEUS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from fleet import run

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="needs Debian's prometheus")]


def samples(rows: list[dict[str, object]]) -> dict[str, int]:
    out = {}
    for r in rows:
        assert not r["error"], r
        out[str(r["where"])] = int(r["samples"] or 0)  # type: ignore[call-overload]
    return out


def test_panel_cost_does_not_grow_with_pods_and_is_below_the_old_design(tmp_path: Path) -> None:
    small = run(2, 1, tmp_path / "small")
    large = run(4, 1, tmp_path / "large", designs=("new",))
    new2, new4, old2 = samples(small["new"]["rows"]), samples(large["new"]["rows"]), samples(small["old"]["rows"])
    panels = [w for w in new2 if w.startswith("dashboard:")]
    assert len(panels) > 50
    for where in panels:
        assert new4[where] == new2[where], where
    assert sum(new2[w] for w in panels) > 0
    old_panels = {w: n for w, n in old2.items() if w.startswith("dashboard:")}
    assert sum(new2[w] for w in panels) * 20 < sum(old_panels.values())
    assert small["new"]["series_per_gpu"] <= 200 < small["old"]["series_per_gpu"]
    # every alert of the new design reads at most as many samples as the old one's of the same name
    for where, n in new2.items():
        if where.startswith("alert:") and where in old2:
            assert n <= old2[where], where
