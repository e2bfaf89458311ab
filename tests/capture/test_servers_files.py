"""`files.is_complete_trace_file` and `SettleTracker` on real traces: what the vllm/sglang sources
(and the dir source) take for a finished trace file."""

from __future__ import annotations

import gzip
import os
import shutil
import time
import zlib
from pathlib import Path

import pytest

from support.engines.threaded import ALEXNET
from support.paths import SHARED_TRACES
from warpwatch.capture.files import SettleTracker, is_complete_gzip, is_complete_trace_file

PLAIN_JSON = SHARED_TRACES / "pytorch__kineto/docs/traces/after_fix_trace.json"

pytestmark = pytest.mark.skipif(not ALEXNET.exists(), reason="shared traces not present")


def test_complete_gzip(tmp_path: Path) -> None:
    p = tmp_path / "a.pt.trace.json.gz"
    shutil.copy(ALEXNET, p)
    assert is_complete_trace_file(p) and is_complete_gzip(p)


def test_truncated_gzip(tmp_path: Path) -> None:
    data = ALEXNET.read_bytes()
    for cut in (1, 10, len(data) // 2, len(data) - 4, len(data) - 1):
        p = tmp_path / f"t{cut}.json.gz"
        p.write_bytes(data[:cut])
        assert not is_complete_trace_file(p), cut


def test_growing_gzip(tmp_path: Path) -> None:
    p = tmp_path / "growing.pt.trace.json.gz"
    payload = gzip.decompress(ALEXNET.read_bytes())
    with open(p, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb") as gz:
        gz.write(payload[: len(payload) // 2])
        gz.flush()  # a readable prefix, no trailer yet
        raw.flush()
        assert not is_complete_trace_file(p)
        gz.write(payload[len(payload) // 2 :])
        gz.flush()
        raw.flush()
        assert not is_complete_trace_file(p)
    assert is_complete_trace_file(p)


def test_gzip_edge_cases(tmp_path: Path) -> None:
    data = ALEXNET.read_bytes()
    bad_crc = bytearray(data)
    bad_crc[-6] ^= 0xFF
    cases = {
        "bad-crc": (bytes(bad_crc), False),
        "two-members": (data + gzip.compress(b'{"x": 1}'), True),
        "zero-padding": (data + b"\0" * 512, True),
        "garbage-after": (data + b"garbage", False),
        "half-second-member": (data + gzip.compress(b'{"x": 1}')[:10], False),
        "not-gzip": (b'{"traceEvents": []}', False),
        "empty": (b"", False),
    }
    for name, (content, expected) in cases.items():
        p = tmp_path / f"{name}.json.gz"
        p.write_bytes(content)
        assert is_complete_gzip(p) is expected, name
    assert not is_complete_trace_file(tmp_path / "missing.json.gz")


def test_large_gzip_streamed(tmp_path: Path) -> None:
    """Output far larger than the decompressor's per-call limit (4 MiB per call)."""
    payload = b'{"traceEvents": [' + b'{"ph": "X", "cat": "kernel"},' * 600_000 + b"{}]}"
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    data = comp.compress(payload) + comp.flush()
    p = tmp_path / "big.json.gz"
    p.write_bytes(data)
    assert is_complete_gzip(p)
    p.write_bytes(data[:-3])
    assert not is_complete_gzip(p)


def test_json_traces(tmp_path: Path) -> None:
    p = tmp_path / "trace.json"
    shutil.copy(PLAIN_JSON, p)
    assert is_complete_trace_file(p)
    text = PLAIN_JSON.read_bytes()
    p.write_bytes(text[: len(text) // 2])
    assert not is_complete_trace_file(p)
    p.write_bytes(b"")
    assert not is_complete_trace_file(p)
    tmp = tmp_path / "trace.json.tmp"
    shutil.copy(PLAIN_JSON, tmp)
    assert not is_complete_trace_file(tmp)
    other = tmp_path / "trace.txt"
    shutil.copy(PLAIN_JSON, other)
    assert not is_complete_trace_file(other)


def test_settle_tracker(tmp_path: Path) -> None:
    p = tmp_path / "x.json.gz"
    data = ALEXNET.read_bytes()
    p.write_bytes(data[:100])
    tracker = SettleTracker()
    assert not tracker.observe(p)  # first sight
    assert not tracker.observe(p)  # stable but incomplete
    with open(p, "ab") as f:
        f.write(data[100:])
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert not tracker.observe(p)  # changed
    assert tracker.observe(p)  # stable and complete
    assert tracker.size(p) == len(data)
    p.unlink()
    assert not tracker.observe(p)
