"""AMD traces: the unit of `grid` by the HIP call that launched the kernel (spec "AMD traces").

ROCm's profiler writes globalWorkSize (work-items) in the same `grid` field as gridDim (blocks);
the runtime event with the same `correlation` id names the call. Expected values are arithmetic
written here, from the launch configuration as the trace spells it (read with the stdlib json).
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest

from support.paths import HTA
from support.tracebuild import MI300X, span, trace_doc, write
from warpwatch.analysis.window import analyze, launch_metrics
from warpwatch.runtime.membudget import ReadLimits
from warpwatch.trace import read_trace

MI250 = HTA / "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def test_mi250_work_item_launches_count_blocks_of_work_items() -> None:
    """The shared MI250 trace (ROCm 6.2) writes grid and block on the HIP call, not on the kernel:
    two Tensile GEMMs by hipExtModuleLaunchKernel (grid in work-items), the rest by hipLaunchKernel."""
    with gzip.open(MI250, "rt") as fh:
        doc = json.load(fh)
    calls = {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"}
    cus = {p["id"]: p["numSms"] for p in doc["deviceProperties"]}
    metrics = list(launch_metrics(read_trace(MI250)))
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    assert len(metrics) == len(kernels) == 14
    work_item_launches = 0
    for event, lm in zip(kernels, metrics, strict=True):
        call = calls[event["args"]["correlation"]]
        grid, block = call["args"]["grid"], call["args"]["block"]
        assert lm.launch.launch_api == call["name"]
        wavefronts = -(-math.prod(block) // 64)
        if call["name"] == "hipExtModuleLaunchKernel":
            work_item_launches += 1
            blocks = math.prod(-(-g // b) for g, b in zip(grid, block, strict=True))
        else:
            assert call["name"] == "hipLaunchKernel"
            blocks = math.prod(grid)
        assert lm.warps_per_sm == pytest.approx(blocks * wavefronts / cus[event["args"]["device"]], rel=1e-12)
        assert "missing_launch_config" not in lm.artifacts
    assert work_item_launches == 2
    # The closing-note figures: grid (512, 1, 1) and (512, 8, 1) of 256-work-item blocks on 104 CUs.
    gemms = [lm.warps_per_sm for lm in metrics if lm.launch.launch_api == "hipExtModuleLaunchKernel"]
    assert gemms == pytest.approx([2 * 4 / 104, 16 * 4 / 104])


def _amd_doc(kernel_args: dict[str, Any], call: str | None) -> dict[str, Any]:
    events = [
        span(0, 1000),
        {
            "ph": "X",
            "cat": "kernel",
            "name": "batched_transpose_32x32_half",
            "pid": 0,
            "tid": 0,
            "ts": 100.0,
            "dur": 10.0,
            "args": {"device": 0, "stream": 0, "correlation": 7, **kernel_args},
        },
    ]
    if call is not None:
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": call,
                "pid": 1,
                "tid": 1,
                "ts": 90.0,
                "dur": 5.0,
                "args": {"correlation": 7, "External id": 3},
            }
        )
    return trace_doc(events, devices=[MI300X])


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        # work-items: 1,048,576 x 16 work-items in 256-work-item blocks -> 4096 x 16 blocks of 4 wavefronts
        ("hipExtModuleLaunchKernel", 4096 * 16 * 4 / 304),
        ("hipHccModuleLaunchKernel", 4096 * 16 * 4 / 304),
        # blocks: the grid is gridDim
        ("hipLaunchKernel", 1048576 * 16 * 4 / 304),
        ("hipModuleLaunchKernel", 1048576 * 16 * 4 / 304),
    ],
)
def test_the_launching_call_decides_the_grid_unit(tmp_path: Path, call: str, expected: float) -> None:
    doc = _amd_doc({"grid": [1048576, 16, 1], "block": [256, 1, 1]}, call)
    (lm,) = launch_metrics(read_trace(write(tmp_path / "t.json", doc)))
    assert lm.launch.launch_api == call
    assert lm.warps_per_sm == pytest.approx(expected, rel=1e-12)
    assert lm.artifacts == ()


def test_no_runtime_event_and_dims_that_cannot_decide_leave_the_unit_unknown(tmp_path: Path) -> None:
    doc = _amd_doc({"grid": [1048576, 16, 1], "block": [256, 1, 1]}, None)
    trace = read_trace(write(tmp_path / "t.json", doc))
    (lm,) = launch_metrics(trace)
    assert lm.launch.launch_api is None
    assert lm.warps_per_sm is None
    assert lm.artifacts == ("grid_units_unknown",)
    assert analyze(trace).artifacts == {"grid_units_unknown": 1}


def test_a_grid_that_is_no_multiple_of_the_block_counts_blocks(tmp_path: Path) -> None:
    doc = _amd_doc({"grid": [1000, 1, 1], "block": [256, 1, 1]}, None)
    (lm,) = launch_metrics(read_trace(write(tmp_path / "t.json", doc)))
    assert lm.warps_per_sm == pytest.approx(1000 * 4 / 304)
    assert lm.artifacts == ()


def test_an_nvidia_runtime_event_is_no_launch_api(tmp_path: Path) -> None:
    doc = trace_doc(
        [
            span(0, 1000),
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": 100.0,
                "dur": 10.0,
                "args": {"device": 0, "correlation": 5, "grid": [64, 1, 1], "block": [128, 1, 1]},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 90.0,
                "dur": 5.0,
                "args": {"correlation": 5},
            },
        ]
    )
    (lm,) = launch_metrics(read_trace(write(tmp_path / "t.json", doc)))
    assert lm.launch.launch_api is None
    assert lm.warps_per_sm == pytest.approx(64 * 4 / 132)


@pytest.mark.parametrize("workers", [1, 3])
def test_launch_apis_survive_a_trace_decoded_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    """The MI250 events spread over many pieces (runtime events and kernels in different ones),
    decoded in this process or by three (whose results travel back as msgpack)."""
    from warpwatch.trace import parallel, pieces, streams

    monkeypatch.setattr(pieces, "SEARCH_BYTES", 1_000)
    monkeypatch.setattr(streams, "READ_BYTES", 1_500)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 20_000)
    monkeypatch.setattr(parallel, "EDGE_BYTES", 2_000)
    with gzip.open(MI250, "rt") as fh:
        doc = json.load(fh)
    # CPU events before and after, newlines between events (where pieces may be cut).
    pad = [{"ph": "X", "cat": "cpu_op", "name": "aten::pad", "pid": 1, "tid": 1, "ts": 1.0, "dur": 1.0}] * 1500
    doc["traceEvents"] = pad + doc["traceEvents"] + pad
    path = tmp_path / "mi250.json"
    path.write_text(json.dumps(doc, indent=1))
    whole = [(lm.launch.launch_api, lm.launch.grid, lm.warps_per_sm) for lm in launch_metrics(read_trace(MI250))]
    limits = ReadLimits(piece_bytes=4_000, workers=workers)
    cut = [
        (lm.launch.launch_api, lm.launch.grid, lm.warps_per_sm)
        for lm in launch_metrics(read_trace(path, limits=limits))
    ]
    assert cut == whole
    assert sum(api == "hipExtModuleLaunchKernel" for api, _, _ in cut) == 2
