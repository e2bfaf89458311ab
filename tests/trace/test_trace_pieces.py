"""Documents read in pieces, in one process or several: the same Trace, the same errors, as in one go.

Pieces are shrunk here (a few KB) so that small documents are cut into many; the reference is
the same document decoded in one piece (a piece size larger than the document).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from support.paths import HTA
from support.tracebuild import H100, kernel, span, trace_doc
from warpwatch.errors import TraceError
from warpwatch.model import Trace
from warpwatch.runtime.membudget import ReadLimits
from warpwatch.trace import parallel, parse_trace, pieces, read_trace, skim, streams

PIECE = 4_000


@pytest.fixture(autouse=True, params=["compiled", "python"])
def scanner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test twice: skimming with the compiled scanner (`_gpuscan.c`) and in Python alone."""
    if request.param == "python":
        monkeypatch.setattr(skim, "NATIVE", False)


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces, "SEARCH_BYTES", 1_000)
    monkeypatch.setattr(streams, "READ_BYTES", 1_500)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 20_000)
    monkeypatch.setattr(parallel, "EDGE_BYTES", 2_000)


def whole(data: bytes) -> Trace:
    """The reference: one piece, one process."""
    return parse_trace(data, "doc.json", limits=ReadLimits(piece_bytes=len(data) * 2, workers=1))


def cut(data: bytes, workers: int = 1, **limits: Any) -> Trace:
    return parse_trace(data, "doc.json", limits=ReadLimits(piece_bytes=PIECE, workers=workers, **limits))


def big_doc(n: int = 400, **top: Any) -> dict[str, Any]:
    events: list[dict[str, Any]] = [span(0, 10 * n + 100)]
    for i in range(n):
        events.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op{i}",
                "pid": 1,
                "tid": 1,
                "ts": 10 * i,
                "dur": 5,
                "args": {"External id": i},
            }
        )
        events.append({"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": 10 * i, "cat": "ac2g", "name": "ac2g"})
        events.append(kernel(f"k{i % 7}", ts=10 * i + 1, dur=3, grid=(i + 1, 1, 1), block=(128, 1, 1)))
        if i % 50 == 0:
            events.append(
                {
                    "ph": "X",
                    "cat": "gpu_memcpy",
                    "name": "Memcpy HtoD",
                    "pid": 0,
                    "tid": 7,
                    "ts": 10 * i + 5,
                    "dur": 2,
                    "args": {"device": 0, "bytes": 4},
                }
            )
    return trace_doc(events, **top)


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, indent=1).encode()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pieces_give_the_same_trace_as_one_go(workers: int) -> None:
    data = dumps(big_doc(distributedInfo={"rank": 2, "world_size": 4}))
    expected = whole(data)
    assert len(expected.launches) == 400 and expected.rank == 2
    assert len(data) > 40 * PIECE
    assert cut(data, workers) == expected


@pytest.mark.slow
def test_device_properties_after_the_events_and_a_bare_list_are_read() -> None:
    doc = big_doc()
    reordered = {"traceEvents": doc["traceEvents"], "deviceProperties": [H100, {**H100, "id": 1}], "schemaVersion": 1}
    data = dumps(reordered)
    for workers in (1, 2):
        assert cut(data, workers) == whole(data)
        assert sorted(cut(data, workers).devices) == [0, 1]
    bare = dumps(doc["traceEvents"])
    assert cut(bare) == whole(bare) == cut(bare, 2)


def test_unknown_phases_odd_types_and_one_line_documents_still_match() -> None:
    doc = big_doc()
    events = doc["traceEvents"]
    k = [i for i, ev in enumerate(events) if ev["cat"] == "kernel"]
    events[100]["ph"] = "Q"  # not a Trace Event Format phase: the permissive decoder takes over
    events[200]["cat"] = 5
    events[k[100]]["args"]["grid"] = [1, 2]  # a malformed grid: unknown, not an error
    events[k[101]]["args"]["warps per SM"] = "inf"
    events[k[102]].pop("args")
    data = dumps(doc)
    assert cut(data) == whole(data) == cut(data, 2)
    one_line = json.dumps(doc).encode()  # no newline between events: cut anywhere `}, {` is, each cut checked
    assert b"\n" not in one_line
    assert cut(one_line) == whole(data)


@pytest.mark.slow
def test_a_cut_inside_an_event_is_found_out_and_the_piece_extended() -> None:
    """Pretty-printed args holding a list of objects put `},\\n{` inside events: a piece cut
    there does not decode as whole events, and is extended to the next cut."""
    doc = big_doc()
    for ev in doc["traceEvents"]:
        if ev["cat"] == "cpu_op":
            ev["args"]["inputs"] = [{"shape": [1, 2]}, {"shape": [3]}, {"shape": []}]
    data = dumps(doc)
    assert data.count(b"},\n") > 3 * data.count(b'"cat": "kernel"')
    assert cut(data) == whole(data) == cut(data, 2)


def test_kinetos_invalid_json_is_repaired_in_the_piece_that_needs_it() -> None:
    text = dumps(big_doc()).decode()
    text = text.replace('"warps per SM": 0.030303030303030304', '"warps per SM": -inf', 1)
    text = text.replace("aten::op7", "aten\u0001op7")
    text = text.replace('"k3"', '"k\tthree"', 1)
    data = text.encode()
    trace = cut(data)
    assert trace == whole(data)
    assert "-inf" in [launch.reported_warps_per_sm for launch in trace.launches]
    assert "k\tthree" in {launch.name for launch in trace.launches}


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda e: e[700]["args"].update({"device": 0}) or e[700].update({"ts": "x"}), "ts/dur must be finite"),
        (lambda e: e[700].update({"args": 5}), "unexpected structure"),
        (lambda e: e[0].update({"dur": "x"}), "ts/dur must be finite"),
    ],
)
@pytest.mark.slow
def test_errors_name_the_event_by_its_index_in_the_whole_document(edit: Any, reason: str) -> None:
    doc = big_doc()
    events = doc["traceEvents"]
    events[700] = kernel("bad", ts=5, dur=1)
    edit(events)
    data = dumps(doc)
    with pytest.raises(TraceError) as one_go:
        whole(data)
    for workers in (1, 2):
        with pytest.raises(TraceError) as in_pieces:
            cut(data, workers)
        assert str(in_pieces.value) == str(one_go.value)
    assert reason in str(one_go.value)
    index = 0 if events[0].get("dur") == "x" else 700
    assert f"traceEvents[{index}]" in str(one_go.value)
    assert one_go.value.kind == "invalid_trace"


def test_an_event_that_is_no_object_is_named_by_its_index() -> None:
    doc = big_doc()
    doc["traceEvents"][9] = 5  # in the first piece, which is always decoded whole
    expected = r"unexpected structure: Expected `object`, got `int` - at `\$\.traceEvents\[9\]`"
    for workers in (1, 2):
        with pytest.raises(TraceError, match=expected):
            cut(dumps(doc), workers)


def test_truncated_and_corrupt_large_documents_are_errors_naming_the_offset(tmp_path: Path) -> None:
    data = dumps(big_doc())
    path = tmp_path / "cut.json"
    path.write_bytes(data[: len(data) - 5000])
    for workers in (1, 2):
        with pytest.raises(TraceError, match="truncated JSON"):
            read_trace(path, limits=ReadLimits(piece_bytes=PIECE, workers=workers))
    in_a_kernel = data.index(b'"ts"', data.index(b'"cat": "kernel"', len(data) // 2))
    path.write_bytes(data[:in_a_kernel] + b"@" + data[in_a_kernel + 1 :])
    for workers in (1, 2):
        with pytest.raises(TraceError, match=rf"invalid JSON \(.*\(byte {in_a_kernel:,}\)\)"):
            read_trace(path, limits=ReadLimits(piece_bytes=PIECE, workers=workers))


def test_skimmed_pieces_do_not_decode_cpu_events(tmp_path: Path) -> None:
    """The documented price of skimming: invalid JSON inside a CPU-side event after the first
    piece goes unnoticed; the GPU events, and so the Trace, are exactly those of the intact file."""
    data = dumps(big_doc())
    in_a_cpu_op = data.index(b'"ts"', data.index(b'"cat": "cpu_op"', len(data) // 2))
    broken = data[:in_a_cpu_op] + b"@" + data[in_a_cpu_op + 1 :]
    assert cut(broken) == whole(data)
    with pytest.raises(TraceError, match="invalid JSON"):
        whole(broken)  # decoded whole (a small document), it is an error


def test_plain_and_gzip_files_are_read_in_pieces(tmp_path: Path) -> None:
    data = dumps(big_doc())
    plain = tmp_path / "t.json"
    plain.write_bytes(data)
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(data[: len(data) // 2]) + gzip.compress(data[len(data) // 2 :]))  # 2 members
    expected = whole(data)
    for path in (plain, packed):
        for workers in (1, 2):
            assert _same(read_trace(path, limits=ReadLimits(piece_bytes=PIECE, workers=workers)), expected)
    for path in (plain, packed):
        with pytest.raises(TraceError, match="larger than the 1,000-byte limit") as info:
            read_trace(path, limits=ReadLimits(max_bytes=1000, piece_bytes=PIECE))
        assert info.value.kind == "too_large"


def _same(a: Trace, b: Trace) -> bool:
    return (a.launches, a.span, a.devices, a.gpu_extent) == (b.launches, b.span, b.devices, b.gpu_extent)


def test_a_window_keeping_more_launches_than_the_budget_is_refused_with_the_figures() -> None:
    data = dumps(big_doc())
    assert len(cut(data, max_launches=400).launches) == 400
    for workers in (1, 2):
        with pytest.raises(TraceError) as info:
            cut(data, workers, max_launches=399, budget="memory limit 256 MiB")
        assert info.value.kind == "too_large"
        assert "keeps more than 399 kernel launches" in str(info.value)
        assert "memory limit 256 MiB" in str(info.value)


def test_hip_runtime_calls_give_their_kernels_launch_api() -> None:
    doc = big_doc()
    events = doc["traceEvents"]
    kernels = [ev for ev in events if ev["cat"] == "kernel"]
    for i, ev in enumerate(kernels):
        ev["args"]["correlation"] = 1000 + i
    events.insert(
        3,
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
            "args": {"correlation": 1000},
        },
    )
    events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipExtModuleLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
            "args": {"correlation": 1399},
        }
    )
    events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": 1,
            "dur": 1,
            "args": {"correlation": 1200},
        }
    )
    data = dumps(doc)
    for trace in (whole(data), cut(data), cut(data, 2)):
        apis = [launch.launch_api for launch in trace.launches]
        assert apis[0] == "hipLaunchKernel" and apis[399] == "hipExtModuleLaunchKernel"
        assert apis[1:399] == [None] * 398


@pytest.mark.slow
def test_a_real_trace_cut_in_hundreds_of_pieces() -> None:
    data = gzip.decompress((HTA / "nccl_parser_config" / "nccl_data.json.gz").read_bytes())
    assert len(data) > 200 * PIECE
    expected = whole(data)
    assert cut(data) == expected == cut(data, 2)


def _shared_traces() -> list[Path]:
    from support.paths import SHARED_TRACES

    return sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")) and p.is_file())


@pytest.mark.slow
@pytest.mark.parametrize("path", _shared_traces(), ids=lambda p: p.name)
def test_every_shared_trace_read_in_skimmed_pieces_is_the_trace_read_whole(path: Path) -> None:
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    try:
        expected = whole(data)
    except TraceError as exc:
        with pytest.raises(TraceError) as info:
            parse_trace(data, "doc.json", limits=ReadLimits(piece_bytes=16_000, workers=1))
        assert info.value.kind == exc.kind
        return
    assert parse_trace(data, "doc.json", limits=ReadLimits(piece_bytes=16_000, workers=1)) == expected
    assert parse_trace(data, "doc.json", limits=ReadLimits(piece_bytes=16_000, workers=2)) == expected


def test_a_read_is_abandoned_between_pieces_when_asked() -> None:
    """The agent asks (on SIGTERM) through `cancel`: the read stops at the next piece, not at the end."""
    data = dumps(big_doc())
    asked: list[int] = []

    def cancel() -> bool:
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(TraceError, match="read abandoned: the agent is stopping") as info:
        cut(data, cancel=cancel)
    assert info.value.kind == "io_error"
    assert len(asked) == 4 and len(data) > 10 * PIECE  # stopped long before the end
