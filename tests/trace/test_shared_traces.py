"""Every real trace in ../shared/traces: no crash, independent kernel counts, exact warps per SM.

Expected values are computed here with the standard library's json module, independently of
warpwatch's msgspec reader. Sources: see ../shared/traces/SOURCES.md.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import tarfile
from pathlib import Path

import pytest

from support.paths import SHARED_TRACES
from warpwatch.analysis.window import analyze, launch_metrics, window_of
from warpwatch.trace import read_trace


def _trace_files() -> list[Path]:
    return sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))


@pytest.fixture(scope="module")
def dlrm_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """param's dlrm_kineto.tar.gz holds 8 per-rank traces: unpack them to read them as files."""
    out = tmp_path_factory.mktemp("dlrm")
    tar = SHARED_TRACES / "facebookresearch__param/et_replay/tests/inputs/dlrm_kineto.tar.gz"
    with tarfile.open(tar) as tf:
        members = [m for m in tf.getmembers() if m.name.endswith(".json")]
        tf.extractall(out, members=members, filter="data")
    return sorted(out.rglob("*.json"))


def _stdlib_kernels(path: Path) -> tuple[list[dict], dict[int, dict]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    events = doc if isinstance(doc, list) else doc.get("traceEvents", [])
    props = {} if isinstance(doc, list) else {p["id"]: p for p in doc.get("deviceProperties") or []}
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    return kernels, props


@functools.cache
def _check(path: Path) -> tuple[int, int]:
    kernels, props = _stdlib_kernels(path)
    trace = read_trace(path)
    assert len(trace.launches) == len(kernels), path
    metrics = list(launch_metrics(trace, window_of(trace)))
    computed = 0
    for raw, lm in zip(kernels, metrics, strict=True):
        assert lm.launch.name == raw["name"]
        args = raw.get("args", {})
        dev = props.get(args.get("device"))
        if dev is None or "grid" not in args or "block" not in args:
            assert lm.warps_per_sm is None or dev is not None
            continue
        blocks = math.prod(args["grid"])
        threads = math.prod(args["block"])
        expected = blocks * -(-threads // dev["warpSize"]) / dev["numSms"]
        assert lm.warps_per_sm == pytest.approx(expected, rel=1e-12), (path, raw["name"])
        computed += 1
        reported = args.get("warps per SM")
        if isinstance(reported, (int, float)) and dev["warpSize"] == 32:
            # SOURCES.md: in these files the profiler's value is B*T/32/numSms exactly (float32 printed)
            assert reported == pytest.approx(blocks * threads / 32 / dev["numSms"], rel=1e-5, abs=1e-6)
    analysis = analyze(trace)
    assert analysis.launch_count == len(kernels)
    assert sum(k.samples for k in analysis.kernels) == len(kernels)
    for k in analysis.kernels:
        for v in (k.time_share, k.warps_per_sm, k.theoretical_occupancy, k.estimated_occupancy):
            assert v is None or (math.isfinite(v) and v >= 0)
        if k.theoretical_occupancy is not None:
            assert k.theoretical_occupancy <= 1.0
    return len(kernels), computed


@pytest.mark.slow
@pytest.mark.parametrize("path", _trace_files(), ids=lambda p: p.name)
def test_every_shared_trace_reads_and_matches_an_independent_count(path: Path) -> None:
    _check(path)


@pytest.mark.slow
def test_every_dlrm_rank_reads_with_its_rank(dlrm_ranks: list[Path]) -> None:
    assert len(dlrm_ranks) == 8
    for path in dlrm_ranks:
        _check(path)


@pytest.mark.slow
def test_launch_totals_over_all_shared_traces(dlrm_ranks: list[Path]) -> None:
    """A single figure for the closing note: launches checked and warps-per-SM values recomputed."""
    total = computed = 0
    for path in [*_trace_files(), *dlrm_ranks]:
        n, c = _check(path)
        total += n
        computed += c
    print(f"\nshared traces: {total} kernel launches read, {computed} warps_per_sm values checked")
    assert total > 100_000 and computed > 80_000
