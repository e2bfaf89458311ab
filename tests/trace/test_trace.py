"""Reading trace files: formats, Kineto's invalid JSON, and every way a file can be bad."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from support.tracebuild import H100, kernel, span, trace_doc, write
from warpwatch.errors import TraceError
from warpwatch.trace import load_gpu_properties, parse_trace, read_trace


def test_reads_plain_and_gzipped_json_identically(tmp_path: Path) -> None:
    doc = trace_doc([span(0, 100), kernel(ts=1, dur=2)])
    a = read_trace(write(tmp_path / "a.json", doc))
    b = read_trace(write(tmp_path / "b.json.gz", doc, gz=True))
    assert a.launches == b.launches and len(a.launches) == 1
    assert a.devices[0].num_sms == 132 and a.span is not None and a.span.duration == 100


def test_reads_a_bare_event_list_and_2021_kernel_category(tmp_path: Path) -> None:
    k = kernel(ts=1, dur=2)
    k["cat"] = "Kernel"
    k["tid"] = "stream 7"
    trace = read_trace(write(tmp_path / "old.json", [span(0, 10), k]))
    assert len(trace.launches) == 1 and trace.launches[0].device == 0 and trace.devices == {}


def test_raw_control_characters_in_strings_are_tolerated(tmp_path: Path) -> None:
    text = json.dumps(trace_doc([kernel(name="K_NAME", ts=1, dur=2)])).replace("K_NAME", "bad\tname\x01")
    trace = parse_trace(text.encode(), "ctl.json")
    assert trace.launches[0].name == "bad\tname\x01"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b"hello world", "not JSON"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1', "truncated JSON"),
        (b'{"foo": 1}', "not a Kineto trace"),
        (b'{"traceEvents": 5}', "unexpected structure"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "x", "dur": 1}]}', "ts/dur must be finite"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": -5}]}', "ts/dur must be finite"),
    ],
)
def test_bad_files_raise_one_error_naming_the_file_and_reason(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        read_trace(path)
    assert str(path) in str(info.value)
    assert reason in str(info.value)


def test_truncated_gzip_is_reported_as_such(tmp_path: Path) -> None:
    data = gzip.compress(json.dumps(trace_doc([kernel()] * 50)).encode())
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        read_trace(path)


def test_corrupt_gzip_is_reported_as_such(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(b"\x1f\x8b\x08\x00" + b"\xff" * 64)
    with pytest.raises(TraceError, match="gzip"):
        read_trace(path)


def test_size_cap_refuses_large_files_with_a_clear_message(tmp_path: Path) -> None:
    path = write(tmp_path / "big.json.gz", trace_doc([kernel()] * 200), gz=True)
    with pytest.raises(TraceError, match="larger than the 1,000-byte limit"):
        read_trace(path, max_bytes=1000)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        read_trace(tmp_path / "nope.json")
    with pytest.raises(TraceError, match="directory"):
        read_trace(tmp_path)


def test_unusable_device_properties_entry_is_a_warning_not_a_failure() -> None:
    doc = trace_doc([kernel()], devices=[{"id": 0, "name": "x"}, {**H100, "id": 1}])
    trace = parse_trace(json.dumps(doc).encode())
    assert list(trace.devices) == [1]
    assert any("missing" in w for w in trace.warnings)


def test_gpu_properties_file_fills_traces_without_device_properties(tmp_path: Path) -> None:
    props = tmp_path / "gpus.json"
    props.write_text(json.dumps({"0": {k: v for k, v in H100.items() if k != "id"}}))
    doc = trace_doc([span(0, 100), kernel(ts=1, dur=2)], devices=[])
    path = write(tmp_path / "t.json", doc)
    trace = read_trace(path, gpu_properties=load_gpu_properties(props))
    assert trace.devices[0].num_sms == 132


def test_gpu_properties_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "gpus.json"
    bad.write_text('[{"id": 0}]')
    with pytest.raises(TraceError, match=r"gpus.json: invalid GPU properties: device 0: missing"):
        load_gpu_properties(bad)


def test_distributed_info_gives_the_rank() -> None:
    doc = trace_doc([kernel()], distributedInfo={"backend": "nccl", "rank": 3, "world_size": 8})
    trace = parse_trace(json.dumps(doc).encode())
    assert (trace.rank, trace.world_size) == (3, 8)
