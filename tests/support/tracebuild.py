"""Build small Kineto-format traces in tests, with the profiler's own (buggy) arithmetic.

`kineto_reported()` reproduces libkineto's computation (kineto-facts.md §1): the grid product in
a signed 32-bit int, blocks/SM as float, warps per SM = blocks/SM * threads / 32. Tests use it to
produce exactly what a real profiler would write for a launch, then check warpwatch's corrections
against arithmetic written in the test.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

H100 = {
    "id": 0,
    "name": "NVIDIA H100",
    "totalGlobalMem": 102085492736,
    "computeMajor": 9,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "numSms": 132,
    "regsPerMultiprocessor": 65536,
    "sharedMemPerBlockOptin": 232448,
    "sharedMemPerMultiprocessor": 233472,
}
A100 = {
    "id": 0,
    "name": "NVIDIA A100-SXM4-80GB",
    "totalGlobalMem": 84990623744,
    "computeMajor": 8,
    "computeMinor": 0,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "regsPerMultiprocessor": 65536,
    "warpSize": 32,
    "sharedMemPerBlock": 49152,
    "sharedMemPerMultiprocessor": 167936,
    "numSms": 108,
    "sharedMemPerBlockOptin": 166912,
}
MI300X = {  # deviceProperties as ROCm's Kineto writes them
    "id": 0,
    "name": "AMD Instinct MI300X",
    "totalGlobalMem": 205822885888,
    "computeMajor": 9,
    "computeMinor": 4,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536,
    "warpSize": 64,
    "sharedMemPerBlock": 65536,
    "numSms": 304,
    "maxSharedMemoryPerMultiProcessor": 65536,
}


def int32(x: int) -> int:
    """Wrap to a signed 32-bit int, as C++ does for Kineto's grid product."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x >= 1 << 31 else x


def kineto_reported(grid: tuple[int, int, int], block: tuple[int, int, int], sms: int) -> tuple[float, float]:
    """(blocks per SM, warps per SM) exactly as libkineto computes them (float32 aside)."""
    blocks = int32(grid[0] * grid[1] * grid[2])
    threads = block[0] * block[1] * block[2]
    blocks_per_sm = blocks / float(sms)
    return blocks_per_sm, blocks_per_sm * threads / 32


def kernel(
    name: str = "k",
    ts: float = 100.0,
    dur: float = 10.0,
    grid: tuple[int, int, int] | None = (1, 1, 1),
    block: tuple[int, int, int] | None = (128, 1, 1),
    regs: int = 32,
    smem: int = 0,
    device: int = 0,
    sms: int | None = 132,
    occupancy: Any = 0,
    **extra_args: Any,
) -> dict[str, Any]:
    args: dict[str, Any] = {
        "External id": 1,
        "queued": 0,
        "device": device,
        "context": 1,
        "stream": 7,
        "correlation": 1,
        "registers per thread": regs,
        "shared memory": smem,
    }
    if grid is not None and block is not None:
        args["grid"] = list(grid)
        args["block"] = list(block)
        if sms is not None:
            bps, wps = kineto_reported(grid, block, sms)
            args["blocks per SM"] = bps
            args["warps per SM"] = wps
            args["est. achieved occupancy %"] = occupancy
    args.update(extra_args)
    return {"ph": "X", "cat": "kernel", "name": name, "pid": device, "tid": 7, "ts": ts, "dur": dur, "args": args}


def span(ts: float, dur: float) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "Trace",
        "ts": ts,
        "dur": dur,
        "pid": "Spans",
        "tid": "PyTorch Profiler",
        "name": "PyTorch Profiler (0)",
        "args": {"Op count": 0},
    }


def trace_doc(events: list[dict[str, Any]], devices: list[dict[str, Any]] | None = None, **top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [H100] if devices is None else devices}
    doc.update(top)
    doc["traceEvents"] = events
    return doc


def write(path: Path, doc: dict[str, Any] | list[Any], *, gz: bool = False) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
