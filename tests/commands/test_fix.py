"""`warpwatch fix TRACE -o OUT`: corrected args in a copy of the trace, everything else equal.

Expected values are arithmetic from the launch configuration (Python integers); the rest of the
document is compared with the input as the stdlib json module reads both. HolisticTraceAnalysis
(HTA 0.5.0, installed by .ci/run) reads the output as a trace viewer's loader would.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.paths import HTA
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.commands.fix import ARTEFACTS_ARG, REPORTED_PREFIX, fix_trace
from warpwatch.errors import TraceError

STEP = HTA / "with_gpu_user_annotation/step_based_trace_2543932.json.gz"
FIXED_ARGS = ("warps per SM", "blocks per SM", "est. achieved occupancy %")


def load(path: Path) -> Any:
    with gzip.open(path, "rt") if path.read_bytes()[:2] == b"\x1f\x8b" else open(path) as fh:
        return json.load(fh)


def undo(doc: Any) -> Any:
    """The document with warpwatch's additions removed and the reported values put back."""
    doc = copy.deepcopy(doc)
    for event in doc["traceEvents"] if isinstance(doc, dict) else doc:
        args = event.get("args")
        if not isinstance(args, dict):
            continue
        args.pop(ARTEFACTS_ARG, None)
        for key in FIXED_ARGS:
            if REPORTED_PREFIX + key in args:
                args[key] = args.pop(REPORTED_PREFIX + key)
    return doc


def small_trace() -> dict[str, Any]:
    return trace_doc(
        [
            span(0, 1000),
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": 5,
                "dur": 3,
                "args": {"External id": 9, "Input Dims": [[2, 2]]},
            },
            kernel("huge_grid_kernel", grid=(65536, 32768, 1), block=(128, 1, 1)),
            kernel("odd_block", ts=200, grid=(100, 1, 1), block=(48, 1, 1), occupancy=-100),
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 999},
        ],
        distributedInfo={"rank": 0},
        traceName="t.json",
    )


def test_the_corrected_values_replace_the_reported_ones_which_stay_beside_them(tmp_path: Path) -> None:
    src = write(tmp_path / "in.json", small_trace())
    counts = fix_trace(str(src), str(tmp_path / "out.json"))
    assert counts == {"kernels": 2, "corrected": 2, "artefacts": 2, "reasons": {}, "notes": []}
    out = load(tmp_path / "out.json")
    huge, odd = (e["args"] for e in out["traceEvents"] if e.get("cat") == "kernel")
    # H100, 132 SMs: 65536*32768 blocks of 4 warps; 100 blocks of 48 threads = 2 warps each.
    assert huge["warps per SM"] == pytest.approx(65536 * 32768 * 4 / 132, rel=1e-12)
    assert huge["blocks per SM"] == pytest.approx(65536 * 32768 / 132, rel=1e-12)
    assert huge["reported warps per SM"] < 0  # what Kineto wrote: the 32-bit product wrapped
    assert huge[ARTEFACTS_ARG] == ["negative_warps_per_sm", "grid_overflow"]
    assert odd["warps per SM"] == pytest.approx(100 * 2 / 132)
    assert odd["reported warps per SM"] == pytest.approx(100 * 48 / 32 / 132)
    assert odd["reported est. achieved occupancy %"] == -100
    assert 0 < odd["est. achieved occupancy %"] <= 100
    assert odd[ARTEFACTS_ARG] == ["occupancy_sentinel", "unrounded_warps"]


def test_everything_else_in_the_document_is_unchanged(tmp_path: Path) -> None:
    doc = small_trace()
    fix_trace(str(write(tmp_path / "in.json", doc)), str(tmp_path / "out.json"))
    out = load(tmp_path / "out.json")
    assert undo(out) == doc
    assert list(out) == list(doc)  # top-level keys, in order


def test_gzip_in_gives_gzip_out_and_plain_gives_plain(tmp_path: Path) -> None:
    fix_trace(str(write(tmp_path / "in.json.gz", small_trace(), gz=True)), str(tmp_path / "out.json.gz"))
    assert (tmp_path / "out.json.gz").read_bytes()[:2] == b"\x1f\x8b"
    fix_trace(str(write(tmp_path / "in.json", small_trace())), str(tmp_path / "out.json"))
    assert (tmp_path / "out.json").read_bytes()[:1] == b"{"


def test_the_input_is_never_overwritten(tmp_path: Path) -> None:
    src = write(tmp_path / "in.json", small_trace())
    before = src.read_bytes()
    with pytest.raises(TraceError, match="is the input trace"):
        fix_trace(str(src), str(src))
    assert src.read_bytes() == before


def test_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "fixed.json.gz"
    result = subprocess.run(
        [sys.executable, "-m", "warpwatch", "fix", str(STEP), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {out}: 130 kernel events, 130 with corrected values")
    bad = subprocess.run(
        [sys.executable, "-m", "warpwatch", "fix", str(tmp_path / "missing.json"), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_a_real_trace_fixed_is_equal_elsewhere_and_hta_reads_the_corrected_values(tmp_path: Path) -> None:
    """step_based_trace (GP100, 56 SMs, 130 kernels): HTA's parser, with every arg as a column."""
    out = tmp_path / "fixed.json.gz"
    fix_trace(str(STEP), str(out))
    original, fixed = load(STEP), load(out)
    assert undo(fixed) == original
    props = {p["id"]: p for p in original["deviceProperties"]}
    expected = []
    for event in original["traceEvents"]:
        if event.get("cat") == "kernel":
            a = event["args"]
            t = a["block"][0] * a["block"][1] * a["block"][2]
            b = a["grid"][0] * a["grid"][1] * a["grid"][2]
            expected.append(b * -(-t // props[a["device"]]["warpSize"]) / props[a["device"]]["numSms"])

    try:
        from hta.common.trace_parser import parse_trace_dataframe
        from hta.configs.parser_config import ParserConfig
    except ImportError as exc:  # never a skip: .ci/run installs it
        pytest.fail(
            f"HTA is missing ({exc}): pip install --no-deps holistictraceanalysis==0.5.0 && pip install "
            "pandas psutil (docs/development.md, 'Running the tests'; .ci/run does it)"
        )
    logging.disable(logging.WARNING)  # only once HTA imported: a failed import must not leave logging off
    try:
        cfg = ParserConfig().set_parse_all_args(True)
        _meta, df, symbols = parse_trace_dataframe(str(out), cfg)
    finally:
        logging.disable(logging.NOTSET)
    kernel_id = symbols.get_sym_id_map()["kernel"]
    kernels = df[df["cat"] == kernel_id].sort_values("index")
    assert len(kernels) == 130
    # HTA names args by lower-casing, `_` for spaces and dropping parenthesised parts.
    assert kernels["warps_per_sm"].tolist() == pytest.approx(expected, rel=1e-12)
    reported = [e["args"]["warps per SM"] for e in original["traceEvents"] if e.get("cat") == "kernel"]
    assert kernels["reported_warps_per_sm"].tolist() == pytest.approx(reported, rel=1e-12)
