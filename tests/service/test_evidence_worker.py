"""Keeping never blocks a round: the round hands a kept window's trace to the evidence worker and
goes on; the source gets the trace back (and deletes it) only once it is copied; a full queue and a
shutdown drop keeps, counted, and give the traces back at once.

The store's writer is gated (`Gate`): a copy waits until the test opens the gate, so what the round
did before the copy is seen without timing anything."""

from __future__ import annotations

import errno
import gzip
import re
from pathlib import Path
from typing import IO

from support.agent import StubSource, parse, sample, service_for
from support.gate import WAIT_S, Gate
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.capture import CapturedWindow
from warpwatch.capture.dirsource import DirSource
from warpwatch.config.table import Config
from warpwatch.evidence.store import TRACE_SUFFIX, EvidenceStore
from warpwatch.export import metricdefs as md
from warpwatch.service.agent import Service


def value(svc: Service, m: md.MetricDef, **labels: str) -> float | None:
    """A sample of the service's /metrics, as a scrape reads it."""
    return sample(parse(svc.render("text/plain")[0].decode()), md.exposed_name(m), **labels)


OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def artefact_trace(path: Path, name: str) -> Path:
    """A grid of 2^31 blocks overflows the profiler's 32-bit product: every such window is kept."""
    return write(path, trace_doc([span(0, 1000), kernel(name, ts=10, dur=5, grid=(2**31, 1, 1))]))


def deleting(path: Path, done: list[bool]) -> CapturedWindow:
    """A window whose source deletes its trace once given it back (as kineto-daemon does)."""

    def on_done(processed: bool) -> None:
        done.append(processed)
        path.unlink()

    return CapturedWindow(source="stub:1", path=path, on_done=on_done)


def gated_service(tmp_path: Path, src: StubSource, gate: Gate, **service: object) -> tuple[Service, EvidenceStore]:
    store = EvidenceStore(tmp_path / "ev", 1 << 20, 100, opener=gate)
    return service_for(src, {"evidence_store": store, **service}, evidence_dir=tmp_path / "ev"), store


def own_value(svc: Service, m: md.MetricDef, **labels: str) -> float | None:
    return svc.exposition.self_registry.get_sample_value(md.exposed_name(m), labels)


def kept_ids(folder: Path) -> list[str]:
    return sorted(p.name.removesuffix(TRACE_SUFFIX) for p in folder.glob("*" + TRACE_SUFFIX))


def test_the_round_finishes_while_the_copy_waits_and_the_source_deletes_the_trace_only_after_it(
    tmp_path: Path,
) -> None:
    src, gate, done = StubSource(), Gate(), []
    trace = artefact_trace(tmp_path / "w.json", "k")
    original = trace.read_bytes()
    src.queue.append([deleting(trace, done)])
    svc, store = gated_service(tmp_path, src, gate)
    svc.run_round()  # returns although the copy cannot write a byte yet
    assert value(svc, md.WINDOWS, outcome="ok") == 1
    assert done == [] and trace.exists()  # the source has not had it back
    (kid,) = set(re.findall(r'evidence_id="([^"]+)"', svc.render(OPENMETRICS)[0].decode()))
    assert store.pending(kid) and store.read_trace(kid) is None
    gate.open.set()
    assert svc.evidence is not None and svc.evidence.keeper.idle(WAIT_S)
    assert done == [True] and not trace.exists()
    assert kept_ids(tmp_path / "ev") == [kid] and not store.pending(kid)
    assert gzip.decompress(store.read_trace(kid) or b"") == original
    assert own_value(svc, md.EVIDENCE_KEPT, reason="artifact") == 1


def test_a_full_queue_drops_the_keep_counts_it_and_gives_the_trace_back_at_once(tmp_path: Path) -> None:
    src, gate = StubSource(), Gate()
    done: dict[int, list[bool]] = {i: [] for i in range(6)}
    traces = {i: artefact_trace(tmp_path / f"w{i}.json", f"k{i}") for i in range(6)}
    svc, _ = gated_service(tmp_path, src, gate)
    evidence = svc.evidence
    assert evidence is not None and evidence.keeper.capacity == 4
    src.queue.append([deleting(traces[0], done[0])])
    svc.run_round()
    assert gate.entered.wait(WAIT_S)  # window 0 is being copied: the queue is empty again
    src.queue.append([deleting(traces[i], done[i]) for i in range(1, 6)])
    svc.run_round()  # windows 1-4 wait in the queue; window 5 finds it full
    assert own_value(svc, md.EVIDENCE_FAILED, reason="queue_full") == 1
    assert done[5] == [True] and not traces[5].exists()
    assert all(done[i] == [] and traces[i].exists() for i in range(5))
    gate.open.set()
    assert evidence.keeper.idle(WAIT_S)
    assert all(done[i] == [True] for i in range(5))
    assert len(kept_ids(tmp_path / "ev")) == 5
    assert own_value(svc, md.EVIDENCE_KEPT, reason="artifact") == 5


def test_shutdown_abandons_the_keeps_it_cannot_wait_for_and_gives_their_traces_back(tmp_path: Path) -> None:
    src, gate = StubSource(), Gate()
    done: dict[int, list[bool]] = {i: [] for i in range(3)}
    traces = {i: artefact_trace(tmp_path / f"w{i}.json", f"k{i}") for i in range(3)}
    src.queue.append([deleting(traces[i], done[i]) for i in range(3)])
    svc, store = gated_service(tmp_path, src, gate, shutdown_grace_s=0.1)
    svc.run_round()
    assert gate.entered.wait(WAIT_S)
    svc.shutdown()  # the copy in progress cannot finish within the grace: it and the queued two are given up
    assert own_value(svc, md.EVIDENCE_FAILED, reason="shutdown") == 2
    assert done[1] == [True] and done[2] == [True]
    gate.open.set()  # the copy in progress sees the shutdown at its next write
    assert svc.evidence is not None and svc.evidence.keeper.idle(WAIT_S)
    assert own_value(svc, md.EVIDENCE_FAILED, reason="shutdown") == 3
    assert done[0] == [True] and not any(t.exists() for t in traces.values())
    assert list((tmp_path / "ev").iterdir()) == [] and store.windows() == []


def test_a_dir_source_that_deletes_processed_traces_keeps_the_one_being_copied(tmp_path: Path) -> None:
    """The real `dir:` source with --delete-processed: the trace being copied is neither deleted nor
    offered again by the next round; it goes once the copy is over."""
    traces, gate = tmp_path / "traces", Gate()
    traces.mkdir()
    first = artefact_trace(traces / "w0.pt.trace.json", "k0")
    original = first.read_bytes()
    src = DirSource(traces, delete_processed=True)
    store = EvidenceStore(tmp_path / "ev", 1 << 20, 100, opener=gate)
    svc = Service(
        Config(source=(src.name,), address="127.0.0.1", port=0, window=0.05, evidence_dir=tmp_path / "ev"),
        sources=[src],
        evidence_store=store,
    )
    svc.run_round()
    assert gate.entered.wait(WAIT_S)
    write(traces / "w1.pt.trace.json", trace_doc([span(0, 1000), kernel("k1", ts=10, dur=5)]))
    svc.run_round()
    assert value(svc, md.WINDOWS, outcome="ok") == 2  # w0 was not read a second time
    assert first.exists()
    gate.open.set()
    assert svc.evidence is not None and svc.evidence.keeper.idle(WAIT_S)
    assert list(traces.iterdir()) == []
    assert original in [gzip.decompress(store.read_trace(kid) or b"") for kid in kept_ids(tmp_path / "ev")]


def test_a_trace_swapped_for_a_link_out_of_its_folder_while_waiting_is_not_kept(tmp_path: Path) -> None:
    """The worker opens the trace as the reader did (`capture.confine`): a link swapped in after the
    window was read is refused (io_error), and what it points at never enters the evidence folder."""
    src, gate = StubSource(), Gate()
    (tmp_path / "traces").mkdir()
    secret = tmp_path / "secret.json"
    secret.write_text('{"password": "hunter2"}')
    first = artefact_trace(tmp_path / "traces" / "w0.json", "k0")
    second = artefact_trace(tmp_path / "traces" / "w1.json", "k1")
    svc, store = gated_service(tmp_path, src, gate)
    src.queue.append([CapturedWindow(source="stub:1", path=first)])
    svc.run_round()
    assert gate.entered.wait(WAIT_S)
    src.queue.append([CapturedWindow(source="stub:1", path=second)])
    svc.run_round()  # w1 waits in the queue behind w0
    second.unlink()
    second.symlink_to(secret)
    gate.open.set()
    assert svc.evidence is not None and svc.evidence.keeper.idle(WAIT_S)
    assert own_value(svc, md.EVIDENCE_FAILED, reason="io_error") == 1
    assert own_value(svc, md.EVIDENCE_KEPT, reason="artifact") == 1
    kept = [gzip.decompress(store.read_trace(kid) or b"") for kid in kept_ids(tmp_path / "ev")]
    assert kept == [first.read_bytes()]


def ordinary_trace(path: Path) -> Path:
    """A window with nothing to keep it but the hour's baseline."""
    return write(path, trace_doc([span(0, 1000), kernel("k", ts=10, dur=5, grid=(64, 1, 1))]))


def test_a_baseline_that_finds_the_queue_full_leaves_the_hours_slot_to_the_next_window(tmp_path: Path) -> None:
    src, gate = StubSource(), Gate()
    done: dict[int, list[bool]] = {i: [] for i in range(7)}
    traces = {i: artefact_trace(tmp_path / f"w{i}.json", f"k{i}") for i in range(5)}
    traces[5], traces[6] = ordinary_trace(tmp_path / "w5.json"), ordinary_trace(tmp_path / "w6.json")
    svc, _ = gated_service(tmp_path, src, gate)
    evidence = svc.evidence
    assert evidence is not None
    src.queue.append([deleting(traces[0], done[0])])
    svc.run_round()
    assert gate.entered.wait(WAIT_S)  # window 0 is being copied
    src.queue.append([deleting(traces[i], done[i]) for i in range(1, 6)])
    svc.run_round()  # windows 1-4 fill the queue; window 5, the hour's baseline, finds it full
    assert own_value(svc, md.EVIDENCE_FAILED, reason="queue_full") == 1
    gate.open.set()
    assert evidence.keeper.idle(WAIT_S)
    src.queue.append([deleting(traces[6], done[6])])
    svc.run_round()  # the same hour: window 6 takes the slot window 5 could not use
    assert evidence.keeper.idle(WAIT_S)
    assert own_value(svc, md.EVIDENCE_KEPT, reason="baseline") == 1
    assert done[6] == [True] and len(kept_ids(tmp_path / "ev")) == 6


class FailsOnce:
    """The store's opener: the first trace it is asked to write fails (a full volume, say)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, path: Path) -> IO[bytes]:
        self.calls += 1
        if self.calls == 1:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return path.open("wb")


def test_a_baseline_whose_copy_fails_leaves_the_hours_slot_to_the_next_window(tmp_path: Path) -> None:
    """The slot went back only when the queue was full: a baseline whose copy failed used up the
    hour, and the next ordinary windows were not kept."""
    src = StubSource()
    store = EvidenceStore(tmp_path / "ev", 1 << 20, 100, opener=FailsOnce())
    svc = service_for(src, {"evidence_store": store}, evidence_dir=tmp_path / "ev")
    evidence = svc.evidence
    assert evidence is not None
    for i in range(2):
        src.queue.append([CapturedWindow(source="stub:1", path=ordinary_trace(tmp_path / f"w{i}.json"))])
        svc.run_round()
        assert evidence.keeper.idle(WAIT_S)
    assert own_value(svc, md.EVIDENCE_FAILED, reason="io_error") == 1
    assert own_value(svc, md.EVIDENCE_KEPT, reason="baseline") == 1
    assert len(kept_ids(tmp_path / "ev")) == 1
