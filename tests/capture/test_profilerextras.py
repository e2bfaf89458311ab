"""What a server's profiler records beyond kernels, seen in its trace (`capture.servers.profilerextras`), and
the vllm source's one loud warning about it."""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import pytest

from support.paths import SHARED_TRACES
from warpwatch.capture import CapturedWindow
from warpwatch.capture.registry import vllm_source
from warpwatch.capture.servers.profilerextras import SCAN_BYTES, recorded_extras


def write(path: Path, events: list[dict[str, object]]) -> Path:
    data = json.dumps({"traceEvents": events}).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


STACK = {"ph": "X", "cat": "python_function", "name": "forward", "ts": 1, "dur": 1}
MEMORY = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 2}
SHAPES = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "args": {"Input Dims": [[2, 2]]}}
KERNEL = {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 3, "dur": 1, "args": {"grid": [1, 1, 1]}}


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_each_option_is_seen_by_its_mark(tmp_path: Path, suffix: str) -> None:
    assert recorded_extras(write(tmp_path / f"a{suffix}", [KERNEL])) == []
    assert recorded_extras(write(tmp_path / f"b{suffix}", [KERNEL, STACK])) == ["torch_profiler_with_stack"]
    assert recorded_extras(write(tmp_path / f"c{suffix}", [MEMORY, SHAPES, STACK])) == [
        "torch_profiler_with_stack",
        "torch_profiler_with_memory",
        "torch_profiler_record_shapes",
    ]


def test_only_the_first_bytes_are_read_and_bad_files_give_nothing(tmp_path: Path) -> None:
    late = write(tmp_path / "late.json", [KERNEL] * 2000 + [STACK])
    assert recorded_extras(late, limit=1000) == [] and recorded_extras(late) == ["torch_profiler_with_stack"]
    (tmp_path / "bad.json.gz").write_bytes(b"\x1f\x8bnot gzip at all")
    assert recorded_extras(tmp_path / "bad.json.gz") == []
    assert recorded_extras(tmp_path / "missing.json") == []


def parsed_extras(path: Path) -> list[str]:
    """The same question answered by parsing the whole trace as JSON."""
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as f:
        events = json.load(f).get("traceEvents", [])
    events = [e for e in events if isinstance(e, dict)]
    found = {
        "torch_profiler_with_stack": any(e.get("cat") == "python_function" for e in events),
        "torch_profiler_with_memory": any(e.get("name") == "[memory]" for e in events),
        "torch_profiler_record_shapes": any(
            isinstance(e.get("args"), dict) and "Input Dims" in e["args"] for e in events
        ),
    }
    return [k for k, v in found.items() if v]


def test_on_the_real_traces_it_agrees_with_parsing_them_whole() -> None:
    traces = [p for p in sorted(SHARED_TRACES.rglob("*.json*")) if p.is_file() and p.stat().st_size < 2 << 20]
    traces = [
        p for p in traces if len(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()) <= SCAN_BYTES
    ]
    seen: set[str] = set()
    checked = 0
    for p in traces:
        try:
            expected = parsed_extras(p)
        except (ValueError, OSError, AttributeError):
            continue  # not a Kineto trace (or a malformed one): nothing to compare
        assert recorded_extras(p) == expected, p
        seen.update(expected)
        checked += 1
    assert checked >= 10 and "torch_profiler_record_shapes" in seen, seen  # stacks: test_vllm_real_stacks.py


def test_the_vllm_source_warns_once_naming_the_switches(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = vllm_source("http://127.0.0.1:9", tmp_path)
    stacked = write(tmp_path / "rank0.1.pt.trace.json.gz", [KERNEL, STACK, MEMORY])
    with caplog.at_level(logging.WARNING, logger="warpwatch.capture.servers"):
        for _ in range(3):
            src.inspect_windows([CapturedWindow(src.name, stacked)])
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert '"torch_profiler_with_stack": false, "torch_profiler_with_memory": false' in warnings[0]
    assert '"ignore_frontend": true' in warnings[0]
