"""The snapshot maps each metric definition to its samples; a scrape walks `metricdefs.ALL` once."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from support.exportkit import device, kernel, ok, window
from warpwatch.export import metricdefs as md
from warpwatch.export.builder import SnapshotBuilder
from warpwatch.export.snapshot import Snapshot, SnapshotCollector
from warpwatch.model import FAULTS, OUTCOMES


def test_a_scrape_yields_one_family_per_definition_in_table_order() -> None:
    names = [f.name for f in SnapshotCollector().collect()]
    assert names == [m.name for m in md.ALL]


def test_an_empty_snapshot_exposes_every_outcome_and_fault_at_zero() -> None:
    s = Snapshot()
    assert s.get(md.WINDOWS) == tuple(((o,), 0.0) for o in OUTCOMES)
    assert s.get(md.ERRORS) == tuple(((stage, reason), 0.0) for stage, reason in FAULTS)
    assert s.get(md.NVML_UP) == (((), 0.0),)
    assert s.get(md.GPU_BUSY) == ()


def test_the_builder_names_each_sample_by_its_definition() -> None:
    builder = SnapshotBuilder(top_kernels=5, capture_window=lambda: 2.5)
    builder.apply_round([ok(window([kernel("gemm", 500_000.0)], [device(0, busy=0.5)], window_us=1e6))])
    builder.apply_round([ok(window([kernel("gemm", 250_000.0)], [device(0, busy=0.25)], window_us=1e6))])
    s = builder.snapshot()
    assert s.get(md.GPU_BUSY) == ((("0",), 0.25),)
    assert s.get(md.GPU_OBSERVED_SECONDS) == ((("0",), 1.0),)  # the first round only created the series
    assert s.get(md.CAPTURE_WINDOW) == (((), 2.5),)
    assert {labels for labels, _ in s.get(md.KERNEL_SECONDS)} == {("0", "gemm"), ("0", "other")}
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(s))
    assert registry.get_sample_value("warpwatch_gpu_busy_ratio", {"gpu": "0"}) == 0.25


def test_forgetting_a_gpu_removes_every_series_it_had() -> None:
    builder = SnapshotBuilder(top_kernels=5, max_gpus=1)
    for gpu, process in ((0, "p0"), (0, "p0"), (1, "p1")):  # a new process on a new GPU displaces GPU 0
        builder.apply_round(
            [ok(window([kernel("gemm", 500_000.0, device=gpu)], [device(gpu, busy=0.5)], window_us=1e6), process)]
        )
    s = builder.snapshot()
    gpus = {labels[0] for m in md.ALL if "gpu" in m.labels for labels, _ in s.get(m)}
    assert gpus == {"1"}
