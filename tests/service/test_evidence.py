"""The service keeps the traces of the windows that matter (--evidence-dir), before the source
deletes them, within the bounds, and counts what it could not keep."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

from support.agent import StubSource, parse, sample, service_for
from support.dirsource import ALEXNET
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.capture import CapturedWindow
from warpwatch.evidence.store import META_SUFFIX, TRACE_SUFFIX
from warpwatch.export import metricdefs as md
from warpwatch.service.agent import Service


def value(svc: Service, m: md.MetricDef, **labels: str) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), md.exposed_name(m), **labels)


def own_value(svc: Service, m: md.MetricDef, **labels: str) -> float | None:
    """A sample of the agent's own metrics (rendered next to the snapshot, at each scrape)."""
    return svc.exposition.self_registry.get_sample_value(md.exposed_name(m), labels)


def settled(svc: Service) -> Service:
    """The service once its evidence worker has kept what its rounds handed over."""
    assert svc.evidence is not None and svc.evidence.keeper.idle(30)
    return svc


def deleting_window(path: Path, done: list[bool]) -> CapturedWindow:
    """A window whose source deletes its trace once told it was processed (as kineto-daemon does)."""

    def on_done(processed: bool) -> None:
        assert path.exists()
        done.append(processed)
        path.unlink()

    return CapturedWindow(source="stub:1", path=path, labels={"process": "p"}, on_done=on_done)


def test_the_first_window_is_kept_as_the_engine_wrote_it_before_its_source_deletes_it(tmp_path: Path) -> None:
    src, done = StubSource(), []
    copy = tmp_path / "alexnet.pt.trace.json.gz"
    shutil.copy(ALEXNET, copy)
    src.queue.append([deleting_window(copy, done)])
    svc = service_for(src, evidence_dir=tmp_path / "ev")
    svc.run_round()
    settled(svc)
    assert done == [True] and not copy.exists()
    (kept,) = sorted((tmp_path / "ev").glob("*" + TRACE_SUFFIX))
    assert kept.read_bytes() == ALEXNET.read_bytes()
    meta = json.loads(kept.with_name(kept.name.replace(TRACE_SUFFIX, META_SUFFIX)).read_text())
    assert meta["reason"] == "baseline" and meta["file"] == copy.name and meta["labels"] == {"process": "p"}
    assert meta["gpus"] == [d["gpu"] for d in meta["summary"]["devices"]] != []
    assert own_value(svc, md.EVIDENCE_KEPT, reason="baseline") == 1
    assert own_value(svc, md.EVIDENCE_BYTES) == sum(p.stat().st_size for p in (tmp_path / "ev").iterdir())
    assert own_value(svc, md.EVIDENCE_FILES) == 1


def test_a_folder_that_refuses_the_keep_is_counted_and_the_window_is_exported(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    src, done = StubSource(), []
    copy = write(tmp_path / "w.json", trace_doc([span(0, 1000), kernel("k", ts=10, dur=50)]))
    src.queue.append([deleting_window(copy, done)])
    svc = service_for(src, evidence_dir=tmp_path / "file" / "ev")
    svc.run_round()
    settled(svc)
    assert done == [True]
    assert own_value(svc, md.EVIDENCE_FAILED, reason="io_error") == 1
    assert own_value(svc, md.EVIDENCE_KEPT, reason="baseline") == 0
    assert value(svc, md.WINDOWS, outcome="ok") == 1


def test_a_flood_of_anomalous_windows_stays_within_the_bounds(tmp_path: Path) -> None:
    src = StubSource()
    svc = service_for(src, evidence_dir=tmp_path / "ev", evidence_files=4, evidence_bytes=1 << 20)
    for i in range(12):
        # a grid of 2^31 blocks overflows the profiler's 32-bit product: an artefact in every window
        doc = trace_doc(
            [span(0, 1000)] + [kernel(f"k{i}_{j}", ts=10 + j, dur=5, grid=(2**31, 1, 1)) for j in range(20)]
        )
        path = write(tmp_path / f"w{i}.json", doc)
        src.queue.append([CapturedWindow(source="stub:1", path=path)])
        svc.run_round()
        settled(svc)
        on_disk = list((tmp_path / "ev").iterdir())
        assert len([p for p in on_disk if p.name.endswith(TRACE_SUFFIX)]) <= 4
        assert sum(p.stat().st_size for p in on_disk) <= 1 << 20
    kept = sorted((tmp_path / "ev").glob("*" + TRACE_SUFFIX))
    assert len(kept) == 4
    assert json.loads(gzip.decompress(kept[-1].read_bytes()))["traceEvents"][1]["name"] == "k11_0"
    assert own_value(svc, md.EVIDENCE_KEPT, reason="artifact") == 12


def test_a_flood_in_one_round_is_kept_or_counted_as_dropped_and_stays_within_the_bounds(tmp_path: Path) -> None:
    """12 anomalous windows in one round: the queue holds 4, and the worker may have taken some out
    meanwhile (how many depends on how fast it runs); the rest are dropped, counted."""
    src = StubSource()
    svc = service_for(src, evidence_dir=tmp_path / "ev", evidence_files=3, evidence_bytes=1 << 20)
    paths = [
        write(tmp_path / f"w{i}.json", trace_doc([span(0, 1000), kernel(f"k{i}", ts=10, dur=5, grid=(2**31, 1, 1))]))
        for i in range(12)
    ]
    src.queue.append([CapturedWindow(source="stub:1", path=p) for p in paths])
    svc.run_round()
    settled(svc)
    kept, dropped = (
        own_value(svc, md.EVIDENCE_KEPT, reason="artifact"),
        own_value(svc, md.EVIDENCE_FAILED, reason="queue_full"),
    )
    assert kept is not None and dropped is not None
    assert kept + dropped == 12 and kept >= 4
    on_disk = list((tmp_path / "ev").iterdir())
    assert len([p for p in on_disk if p.name.endswith(TRACE_SUFFIX)]) == 3
    assert own_value(svc, md.EVIDENCE_BYTES) == sum(p.stat().st_size for p in on_disk) <= 1 << 20


def test_a_kept_windows_id_rides_as_an_exemplar_on_the_per_gpu_counters_it_fed(tmp_path: Path) -> None:
    src = StubSource()
    doc = trace_doc([span(0, 1000), kernel("k", ts=10, dur=50, device=0), kernel("k", ts=10, dur=50, device=1)])
    src.queue.append([CapturedWindow(source="stub:1", path=write(tmp_path / "w.json", doc))])
    svc = service_for(src, evidence_dir=tmp_path / "ev")
    svc.run_round()
    settled(svc)
    (kept,) = (tmp_path / "ev").glob("*" + TRACE_SUFFIX)
    kid = kept.name.removesuffix(TRACE_SUFFIX)
    text = svc.render("application/openmetrics-text; version=1.0.0")[0].decode()
    busy = md.exposed_name(md.GPU_BUSY_SECONDS)
    for gpu in ("0", "1"):
        (line,) = [x for x in text.splitlines() if x.startswith(f'{busy}{{gpu="{gpu}"}}')]
        assert f' # {{evidence_id="{kid}"}} ' in line
    assert not [x for x in text.splitlines() if "evidence_id" in x and 'kernel="' in x]
    assert "evidence_id" not in svc.render("text/plain")[0].decode()
