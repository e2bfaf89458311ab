"""Hostile and broken traces: every input either analyses or fails with TraceError, nothing else.

A short deterministic slice of the mutation fuzzer in benchmarks/fuzz_trace.py (which runs
100,000+ inputs, and atheris, outside CI). Seeds are real traces from ../shared/traces.
"""

from __future__ import annotations

import gzip
import json
import random
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from support.paths import HTA, SHARED_TRACES
from warpwatch.analysis.window import analyze
from warpwatch.errors import TraceError
from warpwatch.trace import parse_trace, read_trace

SEED_SMALL = SHARED_TRACES / "pytorch__kineto" / "docs" / "traces" / "after_fix_trace.json"
SEED_KERNELS = HTA / "with_gpu_user_annotation" / "step_based_trace_2543932.json.gz"
PER_INPUT_SECONDS = 60.0
"""A hang guard per input (each takes milliseconds; a loaded machine may take a hundred times that)."""


def outcome(data: bytes, path: str = "fuzz.json", max_bytes: int | None = None) -> str:
    """'ok' or 'error'; any other exception, or a hang, fails the test."""
    start = time.monotonic()
    try:
        if max_bytes is not None and len(data) > max_bytes:
            raise TraceError(path, "over cap")
        trace = parse_trace(data, path)
        analyze(trace)
        result = "ok"
    except TraceError as exc:
        assert path in str(exc)
        result = "error"
    assert time.monotonic() - start < PER_INPUT_SECONDS
    return result


def seed_doc(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc: dict[str, Any] = json.load(fh)
    return doc


@pytest.mark.slow
def test_truncation_at_every_byte_position_of_a_real_trace() -> None:
    data = SEED_SMALL.read_bytes()
    results = {outcome(data[:n]) for n in range(len(data))}
    assert results == {"error"}  # every strict prefix is incomplete JSON
    assert outcome(data) == "ok"


@pytest.mark.slow
def test_random_byte_flips_of_a_real_trace() -> None:
    rng = random.Random(1234)
    data = bytearray(gzip.decompress(SEED_KERNELS.read_bytes()))
    counts = {"ok": 0, "error": 0}
    for _ in range(300):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        counts[outcome(bytes(mutated))] += 1
    assert counts["ok"] + counts["error"] == 300


WRONG_VALUES: list[Any] = [
    None,
    "x",
    "",
    [],
    {},
    [1, 2],
    {"a": 1},
    True,
    -1,
    0,
    2**70,
    -(2**70),
    1e308,
    -1e308,
    "inf",
    "nan",
    [2**40, 2**40, 2**40],
    [-1, 1, 1],
    "\x00\x1b[31m",
]
EVENT_FIELDS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args"]
ARG_FIELDS = [
    "device",
    "stream",
    "grid",
    "block",
    "registers per thread",
    "shared memory",
    "warps per SM",
    "blocks per SM",
    "est. achieved occupancy %",
]


@pytest.mark.slow
def test_wrong_types_in_every_field_used() -> None:
    doc = seed_doc(SEED_SMALL)
    kernel_index = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    seen = set()
    for value in WRONG_VALUES:
        for field in EVENT_FIELDS:
            mutated = json.loads(json.dumps(doc))
            mutated["traceEvents"][kernel_index][field] = value
            seen.add(outcome(json.dumps(mutated).encode()))
        for field in ARG_FIELDS:
            mutated = json.loads(json.dumps(doc))
            mutated["traceEvents"][kernel_index]["args"][field] = value
            seen.add(outcome(json.dumps(mutated).encode()))
        for key in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceEvents"):
            mutated = json.loads(json.dumps(doc))
            mutated[key] = value
            seen.add(outcome(json.dumps(mutated).encode()))
        for prop in ("numSms", "warpSize", "maxThreadsPerMultiprocessor", "computeMajor", "sharedMemPerBlockOptin"):
            mutated = json.loads(json.dumps(doc))
            mutated["deviceProperties"][0][prop] = value
            seen.add(outcome(json.dumps(mutated).encode()))
    assert seen == {"ok", "error"}


@pytest.mark.parametrize("token", [b"NaN", b"-Infinity", b"Infinity", b"inf", b"-inf", b"nan", b"1e999", b"-1e999"])
def test_non_finite_tokens_in_every_numeric_field(token: bytes) -> None:
    doc = seed_doc(SEED_SMALL)
    text = json.dumps(doc).encode()
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    for field in ("ts", "dur", *[f for f in ARG_FIELDS if isinstance(kernel["args"].get(f), (int, float))]):
        value = kernel[field] if field in ("ts", "dur") else kernel["args"][field]
        needle = f'"{field}": {json.dumps(value)}'.encode()
        assert needle in text
        outcome(text.replace(needle, f'"{field}": '.encode() + token, 1))


@pytest.mark.parametrize("where", ["args.grid", "args.foo", "event.extra", "top.extra"])
def test_deep_nesting_is_an_error_or_ignored_never_a_crash(where: str) -> None:
    deep = b"[" * 50_000 + b"]" * 50_000
    kernel = b'{"ph":"X","cat":"kernel","ts":1,"dur":1,"args":{"device":0,"grid":[1,1,1],"block":[32,1,1]}}'
    if where == "args.grid":
        kernel = kernel.replace(b'"grid":[1,1,1]', b'"grid":' + deep)
    elif where == "args.foo":
        kernel = kernel.replace(b'"device":0', b'"device":0,"foo":' + deep)
    elif where == "event.extra":
        kernel = kernel.replace(b'"ph":"X"', b'"ph":"X","extra":' + deep)
    top_extra = b'"extra":' + deep + b"," if where == "top.extra" else b""
    assert outcome(b"{" + top_extra + b'"traceEvents":[' + kernel + b"]}") in {"ok", "error"}


def test_enormous_strings_are_read_and_bounded_in_reports() -> None:
    name = "k" * 5_000_000
    doc = {"traceEvents": [{"ph": "X", "cat": "kernel", "name": name, "ts": 1, "dur": 1, "args": {}}]}
    assert outcome(json.dumps(doc).encode()) == "ok"


def test_gzip_edge_cases(tmp_path: Path) -> None:
    empty_member = tmp_path / "empty.json.gz"
    empty_member.write_bytes(gzip.compress(b""))
    with pytest.raises(TraceError, match="empty"):
        read_trace(empty_member)

    # a member whose trailer claims 4 GiB - 1 but holds a few bytes: the claim is never trusted
    real = gzip.compress(json.dumps(seed_doc(SEED_SMALL)).encode())
    lying = tmp_path / "lying.json.gz"
    lying.write_bytes(real[:-4] + struct.pack("<I", 0xFFFFFFFF))
    with pytest.raises(TraceError, match="gzip"):
        read_trace(lying)

    # a gzip bomb: 64 MiB of spaces in ~64 KiB, read under a 1 MiB cap
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (64 * 1024 * 1024), compresslevel=9))
    assert bomb.stat().st_size < 200_000
    with pytest.raises(TraceError, match="limit"):
        read_trace(bomb, max_bytes=1024 * 1024)

    # two members: concatenated gzip is valid gzip and reads as one document
    doc = json.dumps(seed_doc(SEED_SMALL)).encode()
    multi = tmp_path / "multi.json.gz"
    multi.write_bytes(gzip.compress(doc[:100]) + gzip.compress(doc[100:]))
    assert len(read_trace(multi).launches) == 1
