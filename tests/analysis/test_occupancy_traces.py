"""The occupancy port against CUDA 13's `cuda_occupancy.h` on every kernel of the real traces (the driver:
tests/analysis/conftest.py; random and hand-made cases: test_occupancy_vs_cuda.py)."""

from __future__ import annotations

import gzip
import json
import os
import tarfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from support.cudaocc import (
    TRACES,
    Case,
    _compare,
    _report,
)
from warpwatch.model import DeviceProperties

# --- Real traces ---------------------------------------------------------------------------------

_DEVICE_KEYS = {
    "compute_major": "computeMajor",
    "compute_minor": "computeMinor",
    "num_sms": "numSms",
    "warp_size": "warpSize",
    "max_threads_per_block": "maxThreadsPerBlock",
    "max_threads_per_sm": "maxThreadsPerMultiprocessor",
    "regs_per_block": "regsPerBlock",
    "regs_per_sm": "regsPerMultiprocessor",
    "shared_mem_per_block": "sharedMemPerBlock",
    "shared_mem_per_sm": "sharedMemPerMultiprocessor",
    "shared_mem_per_block_optin": "sharedMemPerBlockOptin",
}


def _trace_files() -> list[Path]:
    return sorted(p for p in TRACES.rglob("*") if p.name.endswith((".json", ".json.gz", ".tar.gz")))


def _documents(path: Path) -> Iterator[bytes]:
    """The raw JSON documents of one file (the dlrm tar.gz holds 8)."""
    if path.name.endswith(".tar.gz"):
        with tarfile.open(path) as archive:
            for member in archive.getmembers():
                file = archive.extractfile(member) if member.isfile() else None
                if file is not None and member.name.endswith(".json"):
                    yield file.read()
    elif path.name.endswith(".gz"):
        with gzip.open(path) as f:
            yield f.read()
    else:
        yield path.read_bytes()


TraceInput = tuple[DeviceProperties, int, int, int]
"""(device, block size T, registers per thread, shared memory) of one kernel event."""


def _kernel_inputs(path: Path) -> tuple[list[TraceInput], int]:
    """The kernel inputs of one trace file, and how many of its documents have deviceProperties."""
    inputs: list[TraceInput] = []
    with_properties = 0
    for raw in _documents(path):
        if b'"deviceProperties"' not in raw:
            continue  # cheap: most of the parsing time goes to files without deviceProperties
        document = json.loads(raw)
        if not isinstance(document, dict) or not document.get("deviceProperties"):
            continue  # a bare event list, or empty deviceProperties: nothing to compute against
        with_properties += 1
        devices: dict[int, DeviceProperties] = {}
        for entry in document["deviceProperties"]:
            if all(isinstance(entry.get(key), int) for key in _DEVICE_KEYS.values()):
                fields = {name: entry[key] for name, key in _DEVICE_KEYS.items()}
                devices[entry["id"]] = DeviceProperties(id=0, name="", **fields)
        for event in document.get("traceEvents", ()):
            if event.get("cat") not in ("kernel", "Kernel"):
                continue
            args = event.get("args") or {}
            device = devices.get(args.get("device"))  # type: ignore[arg-type]
            block = args.get("block")
            registers, shared = args.get("registers per thread"), args.get("shared memory")
            if device is None or args.get("grid") is None or block is None or registers is None or shared is None:
                continue  # e.g. ROCm kernels (no registers) or devices without the needed properties
            inputs.append((device, block[0] * block[1] * block[2], registers, shared))
    return inputs, with_properties


def _trace_cases() -> tuple[set[TraceInput], int, int]:
    """Distinct inputs of all kernel events (devices keyed by hardware, not id), event and file counts.

    Files are parsed in parallel: json.loads of ~400 MB dominates the test's time.
    """
    files = _trace_files()
    with ProcessPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1)) as pool:
        per_file = list(pool.map(_kernel_inputs, files))
    inputs = {one for file_inputs, _ in per_file for one in file_inputs}
    return inputs, sum(len(i) for i, _ in per_file), sum(n for _, n in per_file)


@pytest.mark.slow
def test_every_kernel_of_the_public_traces_agrees_with_the_header(
    occ_driver: Path, capsys: pytest.CaptureFixture[str], shared_traces: Path
) -> None:
    # no silent skip: without the corpus the `shared_traces` fixture fails, naming where it looked
    inputs, kernels, files = _trace_cases()
    assert kernels > 10_000 and len(inputs) > 100
    distinct: list[Case] = [(d, t, r, s, optin) for d, t, r, s in sorted(inputs, key=repr) for optin in (True, False)]
    outcome = _compare(occ_driver, distinct, "trace kernel inputs")
    ccs = sorted({d.compute_capability for d, *_ in distinct})
    _report(
        capsys,
        f"{kernels} kernel events in {files} traces with deviceProperties -> "
        f"{len(distinct) // 2} distinct (device, block size, registers, shared memory) inputs on compute "
        f"capabilities {', '.join(ccs)}, x 2 shared-memory limit modes = {len(distinct)} cases agree exactly "
        f"({outcome['positive']} with active blocks > 0, {outcome['zero']} with 0, {outcome['errors']} errors)",
    )
