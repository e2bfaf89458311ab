"""Every shared trace read in the other layout gives the same Trace and the same analysis, field by field.

Traces come in two layouts: one event per line (Kineto's writer; most of ../shared/traces) and the
whole document on one line (`json.dump`'s; HTA's sampled_rank-0 and base traces here, TraceLens's
published traces). Each shared trace (SOURCES.md) is converted here with the standard library's
json to the other layout, then read as a plain file (the default path: several processes for a
large file), as gzip (one process), in small pieces by one process with the compiled scanner and
without it, and by two processes; each reading must equal the reading of the original file in
every field of the Trace (launches, span, GPU extent, devices, rank...) and of the analysis
(`analyze --format json`). A one-line twin read in pieces must really be skimmed (its cuts proven
by `structure.balanced`), so the test cannot pass by falling back to the strict decoder alone.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest

from support.layouts import event_per_line, is_one_line, one_line
from support.paths import SHARED_TRACES
from warpwatch.analysis.window import analyze
from warpwatch.commands.analyze import analysis_to_dict
from warpwatch.model import Trace
from warpwatch.runtime.membudget import ReadLimits, may_fork
from warpwatch.trace import parallel, pieces, read_trace, skim

DLRM = SHARED_TRACES / "facebookresearch__param/et_replay/tests/inputs/dlrm_kineto.tar.gz"


def _sources() -> list[Any]:
    paths = sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))
    return [
        pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.stat().st_size > 1_000_000 else []) for p in paths
    ] + [pytest.param(DLRM, id="dlrm_kineto.tar.gz (8 ranks)", marks=[pytest.mark.slow])]


def _texts(path: Path) -> list[bytes]:
    if path == DLRM:
        with tarfile.open(path) as tf:
            return [tf.extractfile(m).read() for m in tf.getmembers() if m.name.endswith(".json")]  # type: ignore[union-attr]
    data = path.read_bytes()
    return [gzip.decompress(data) if path.name.endswith(".gz") else data]


def fields(trace: Trace) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every field of the Trace and of its analysis, the file's name aside."""
    analysis = analysis_to_dict(analyze(trace))
    analysis.pop("path")
    return {f.name: getattr(trace, f.name) for f in dataclasses.fields(trace) if f.name != "path"}, analysis


def _compare(expected: tuple[dict[str, Any], dict[str, Any]], got: Trace, how: str) -> None:
    trace, analysis = fields(got)
    for name, value in expected[0].items():
        assert trace[name] == value, (how, name)
    assert analysis == expected[1], how


@pytest.mark.parametrize("path", _sources())
def test_the_other_layout_reads_the_same_in_every_field(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "balanced.marks"
    """One byte per piece proven balanced, appended by whichever process proved it: the parallel
    reader's forked children take pieces from the same queue as the parent, and may take them all."""

    def proven() -> int:
        return marks.stat().st_size if marks.exists() else 0

    def counting(module: Any) -> Any:
        real = module.balanced

        def balanced(*args: Any, **kwargs: Any) -> bool:
            ok = real(*args, **kwargs)
            if ok:
                with marks.open("ab") as f:
                    f.write(b"x")
            return ok

        return balanced

    monkeypatch.setattr(pieces, "balanced", counting(pieces))
    monkeypatch.setattr(parallel, "balanced", counting(parallel))
    real_read_file = parallel.read_file
    by_processes = []

    def read_file(*args: Any) -> Any:
        doc = real_read_file(*args)
        by_processes.append(doc is not None)
        return doc

    monkeypatch.setattr(parallel, "read_file", read_file)
    for k, text in enumerate(_texts(path)):
        original = tmp_path / f"original{k}.json"
        original.write_bytes(text)
        expected = fields(read_trace(original))
        doc = json.loads(text)
        twin_text = event_per_line(doc) if is_one_line(text) else one_line(doc)
        del doc
        assert is_one_line(twin_text) != is_one_line(text)
        twin = tmp_path / f"twin{k}.json"
        twin.write_bytes(twin_text)
        twin_gz = tmp_path / f"twin{k}.json.gz"
        twin_gz.write_bytes(gzip.compress(twin_text, compresslevel=1))
        piece = max(16_000, len(twin_text) // 40)
        cut = is_one_line(twin_text) and len(twin_text) > 8 * piece + pieces.SEARCH_BYTES  # (else read whole)
        _compare(expected, read_trace(twin), "plain, default limits")
        _compare(expected, read_trace(twin_gz, limits=ReadLimits(piece_bytes=piece, workers=1)), "gzip, pieces")
        marks.unlink(missing_ok=True)
        _compare(expected, read_trace(twin, limits=ReadLimits(piece_bytes=piece, workers=1)), "pieces, compiled")
        if cut:
            assert proven() > 0, "no piece of the one-line twin was skimmed"
        with monkeypatch.context() as m:
            m.setattr(skim, "NATIVE", False)
            _compare(expected, read_trace(twin, limits=ReadLimits(piece_bytes=piece, workers=1)), "pieces, Python")
        with monkeypatch.context() as m:
            m.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
            marks.unlink(missing_ok=True)
            by_processes.clear()
            left = threading.enumerate()
            assert may_fork(), f"threads left running by an earlier test keep the reader from forking: {left}"
            _compare(expected, read_trace(twin, limits=ReadLimits(piece_bytes=piece, workers=2)), "two processes")
            if cut:
                assert by_processes == [True], "the parallel reader gave the one-line twin up"
                assert proven() > 0, "no piece of the one-line twin was skimmed by the parallel reader"
