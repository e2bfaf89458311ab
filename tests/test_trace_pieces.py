"""Large documents are decoded in pieces, by several processes: same Trace, same errors, as in one go.

The piece size is shrunk here so that small documents are cut into many pieces; the reference is
the same document decoded in one piece (`warpwatch.trace._parse_whole`, what small files get).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from conftest import HTA
from tracebuild import H100, kernel, span, trace_doc
from warpwatch import trace as T
from warpwatch.errors import TraceError


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(T, "PART_BYTES", 4_000)
    monkeypatch.setattr(T, "PARTS_MIN_BYTES", 20_000)
    monkeypatch.setattr(T, "PARALLEL_MIN_BYTES", 20_000)


def whole(data: bytes) -> T.Trace:
    """The reference: one piece, one process."""
    return T._build(T._parse_whole(data, "doc.json"), "doc.json", None)


def pieces(data: bytes, workers: int = 2) -> T.Trace:
    assert T._cuts(T._BytesSource(data)) is not None, "the document must be cut for this test"
    return T.parse_trace(data, "doc.json", workers=workers)


def big_doc(n: int = 400, **top: Any) -> dict[str, Any]:
    events: list[dict[str, Any]] = [span(0, 10 * n + 100)]
    for i in range(n):
        events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{i}", "pid": 1, "tid": 1, "ts": 10 * i,
                       "dur": 5, "args": {"External id": i}})
        events.append({"ph": "f", "id": i, "pid": 0, "tid": 7, "ts": 10 * i, "cat": "ac2g", "name": "ac2g"})
        events.append(kernel(f"k{i % 7}", ts=10 * i + 1, dur=3, grid=(i + 1, 1, 1), block=(128, 1, 1)))
        if i % 50 == 0:
            events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7,
                           "ts": 10 * i + 5, "dur": 2, "args": {"device": 0, "bytes": 4}})
    return trace_doc(events, **top)


def dumps(doc: Any) -> bytes:
    return json.dumps(doc, indent=1).encode()


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pieces_give_the_same_trace_as_one_go(workers: int) -> None:
    data = dumps(big_doc(distributedInfo={"rank": 2, "world_size": 4}))
    expected = whole(data)
    assert len(expected.launches) == 400 and expected.rank == 2
    assert pieces(data, workers) == expected


def test_device_properties_after_the_events_and_a_bare_list_are_read() -> None:
    doc = big_doc()
    reordered = {"traceEvents": doc["traceEvents"], "deviceProperties": [H100], "schemaVersion": 1}
    data = dumps(reordered)
    assert pieces(data) == whole(data)
    assert pieces(data).devices[0].num_sms == 132
    bare = dumps(doc["traceEvents"])
    assert pieces(bare) == whole(bare)


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
    assert pieces(data) == whole(data)
    one_line = json.dumps(doc).encode()  # no newline between events: cannot be cut, decoded whole
    assert T._cuts(T._BytesSource(one_line)) is None
    assert T.parse_trace(one_line, "doc.json", workers=2) == whole(data)


def test_kinetos_invalid_json_is_sanitised_in_large_documents_too() -> None:
    text = dumps(big_doc()).decode()
    text = text.replace('"warps per SM": 0.030303030303030304', '"warps per SM": -inf', 1)
    text = text.replace("aten::op7", "aten\u0001op7")
    data = text.encode()
    trace = T.parse_trace(data, "doc.json", workers=2)
    assert trace == T._build(T._parse_whole(T._sanitize(data), "doc.json"), "doc.json", None)
    assert "-inf" in [launch.reported_warps_per_sm for launch in trace.launches]


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda e: e[700]["args"].update({"device": 0}) or e[700].update({"ts": "x"}), "ts/dur must be finite"),
        (lambda e: e[700].update({"args": 5}), "unexpected structure"),
        (lambda e: e[0].update({"dur": "x"}), "ts/dur must be finite"),
    ],
)
def test_errors_name_the_event_by_its_index_in_the_whole_document(edit: Any, reason: str) -> None:
    doc = big_doc()
    events = doc["traceEvents"]
    events[700] = kernel("bad", ts=5, dur=1)
    edit(events)
    data = dumps(doc)
    with pytest.raises(TraceError) as one_go:
        whole(data)
    with pytest.raises(TraceError) as cut:
        pieces(data)
    assert str(cut.value) == str(one_go.value)
    assert reason in str(cut.value)
    index = 0 if "dur" in events[0] and events[0]["dur"] == "x" else 700
    assert f"traceEvents[{index}]" in str(cut.value)


def test_truncated_and_corrupt_large_documents_are_errors(tmp_path: Path) -> None:
    data = dumps(big_doc())
    path = tmp_path / "cut.json"
    path.write_bytes(data[: len(data) - 5000])
    with pytest.raises(TraceError, match="truncated JSON"):
        T.read_trace(path, workers=2)
    middle = data.index(b'"ts"', len(data) // 2)
    path.write_bytes(data[:middle] + b"@" + data[middle + 1 :])
    with pytest.raises(TraceError, match="invalid JSON"):
        T.read_trace(path, workers=2)


def test_read_trace_reads_plain_files_in_pieces_and_gzip_files_whole(tmp_path: Path) -> None:
    data = dumps(big_doc())
    plain = tmp_path / "t.json"
    plain.write_bytes(data)
    packed = tmp_path / "t.json.gz"
    packed.write_bytes(gzip.compress(data))
    expected = whole(data)
    for path in (plain, packed):
        got = T.read_trace(path, workers=2)
        assert got.launches == expected.launches and got.span == expected.span and got.devices == expected.devices
    with pytest.raises(TraceError, match="larger than the 1,000-byte limit"):
        T.read_trace(plain, max_bytes=1000)


def test_a_real_trace_cut_in_hundreds_of_pieces() -> None:
    data = gzip.decompress((HTA / "nccl_parser_config" / "nccl_data.json.gz").read_bytes())
    assert len(T._cuts(T._BytesSource(data)) or []) > 100
    assert pieces(data) == whole(data)
