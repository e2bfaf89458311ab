"""The bundled samples: every file attributed, and the SM-count reproduction true to what Kineto wrote.

`2021_pt19_sm_count_-1_repro.json` reproduces PyTorch 1.8/1.9's SM count of -1 (ATTRIBUTION.md).
Its reported values are checked against Kineto's 2021 formulas evaluated here with S = -1 (exact
fractions, C's truncating int cast), its layout against a real trace written by the same Kineto
writer (pytorch/kineto tb_plugin sample of June 2021), and its device against a real RTX 2080 Ti
record (facebookresearch/param resnet_kineto.json.gz). Then `warpwatch analyze` must show the
negative reported value beside the corrected one, and a busy GPU.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from support.paths import ROOT

SAMPLES = ROOT / "agent" / "warpwatch" / "samples"
REPRO = SAMPLES / "2021_pt19_sm_count_-1_repro.json"
KINETO_2021 = "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RTX_2080_TI = "facebookresearch__param/et_replay/tests/inputs/resnet_kineto.json.gz"
SM_COUNT_BUG = -1


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def repro() -> dict[str, Any]:
    return _load(REPRO)


def _by_cat(doc: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat]


def test_every_bundled_sample_is_attributed() -> None:
    text = (SAMPLES / "ATTRIBUTION.md").read_text(encoding="utf-8")
    files = sorted(p.name for p in SAMPLES.iterdir() if p.name.endswith((".json", ".json.gz")))
    assert len(files) >= 3
    for name in files:
        assert f"| `{name}` |" in text, name
    row = next(line for line in text.splitlines() if line.startswith(f"| `{REPRO.name}` |"))
    assert "a reproduction, not a recording" in row
    # replay: plays a folder in name order: the reproduction is the first window of the quick start.
    assert files[0] == REPRO.name


def test_the_documented_launch_reads_as_pytorch_19_wrote_it(repro: dict[str, Any]) -> None:
    """A 99x1x1 grid of 128-thread blocks with S = -1: -99 blocks, -396 warps, occupancy -1237 %."""
    relu = [k for k in _by_cat(repro, "Kernel") if k["args"]["grid"] == [99, 1, 1]]
    assert len(relu) == 3
    for k in relu:
        assert k["args"]["block"] == [128, 1, 1]
        assert k["args"]["blocks per SM"] == -99.0
        assert k["args"]["warps per SM"] == -396.0
        # 100 * min(active, -99) * 128 / 1024 = -1237.5; (int)(0.5 - 1237.5) = -1237 (truncation)
        assert k["args"]["est. achieved occupancy %"] == -1237
    text = REPRO.read_text(encoding="utf-8")
    assert '"blocks per SM": -99.0,' in text and '"warps per SM": -396.0,' in text  # fmt of 2021: "5.0"


def test_every_reported_value_is_kinetos_2021_formula_with_an_sm_count_of_minus_one(repro: dict[str, Any]) -> None:
    (device,) = repro["deviceProperties"]
    for k in _by_cat(repro, "Kernel"):
        args = k["args"]
        blocks = math.prod(args["grid"])
        threads = math.prod(args["block"])
        blocks_per_sm = Fraction(blocks, SM_COUNT_BUG)
        warps_per_sm = blocks_per_sm * threads / 32  # 32 hard-coded, no rounding up
        assert args["blocks per SM"] == blocks_per_sm
        assert args["warps per SM"] == warps_per_sm
        # min(activeBlocksPerSM, blocks per SM) is the negative value, whatever the calculator says.
        occupancy = blocks_per_sm * threads / device["maxThreadsPerMultiprocessor"]
        assert args["est. achieved occupancy %"] == math.trunc(Fraction(1, 2) + 100 * occupancy)
        assert args["est. achieved occupancy %"] < 0 and args["warps per SM"] < 0


@pytest.mark.slow
def test_the_layout_is_that_of_a_real_mid_2021_trace(repro: dict[str, Any], shared_traces: Path) -> None:
    real = _load(shared_traces / KINETO_2021)
    assert list(repro) == list(real) == ["schemaVersion", "deviceProperties", "traceEvents"]
    assert repro["schemaVersion"] == real["schemaVersion"]
    assert list(repro["deviceProperties"][0]) == list(real["deviceProperties"][0])
    for cat in ("Kernel", "Runtime", "Operator", "Trace"):
        ours, theirs = _by_cat(repro, cat), _by_cat(real, cat)
        assert ours and theirs, cat
        assert {tuple(e) for e in ours} == {tuple(theirs[0])}, cat  # event keys, in order
        if cat in ("Kernel", "Runtime"):
            assert {tuple(e["args"]) for e in ours} == {tuple(theirs[0]["args"])}, cat
        assert {type(e["tid"]) for e in ours} == {type(theirs[0]["tid"])}, cat  # "stream 7", "20513"
    kernel = _by_cat(repro, "Kernel")[0]
    assert re.fullmatch(r"stream \d+", kernel["tid"])
    flows = {e["ph"] for e in repro["traceEvents"] if e.get("cat") == "async"}
    assert flows == {"s", "f"}
    # Every kernel's launch is there, linked by correlation id.
    runtime = {e["args"]["correlation"] for e in _by_cat(repro, "Runtime")}
    assert {k["args"]["correlation"] for k in _by_cat(repro, "Kernel")} <= runtime


@pytest.mark.slow
def test_the_device_is_a_real_rtx_2080_ti_record(repro: dict[str, Any], shared_traces: Path) -> None:
    real = _load(shared_traces / RTX_2080_TI)["deviceProperties"][0]
    assert repro["deviceProperties"] == [real]
    assert real["numSms"] == 68 and (real["computeMajor"], real["computeMinor"]) == (7, 5)


@pytest.mark.slow
def test_analyze_shows_the_negative_value_beside_the_corrected_one_and_a_busy_gpu(repro: dict[str, Any]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "warpwatch", "analyze", "--format", "json", str(REPRO)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    (trace,) = json.loads(result.stdout)["traces"]
    relu = next(k for k in trace["kernels"] if "threshold_kernel_impl" in k["name"])
    assert relu["reported_warps_per_sm_min"] == -396
    assert relu["warps_per_sm"] == pytest.approx(99 * 4 / 68)  # B * ceil(128 / 32) / numSms
    assert trace["artifacts"]["sm_count_invalid"] == 9
    # Kineto keeps a kernel of duration d only if it lies wholly inside the window W, so each
    # captured kernel stands for W / (W - d) of them: busy = sum d / (W - d) over the 9 launches.
    span = _by_cat(repro, "Trace")[0]["dur"]
    assert span == 422
    expected_busy = 3 * (38 / (422 - 38) + 6 / (422 - 6) + 9 / (422 - 9))
    (device,) = trace["devices"]
    assert device["busy_ratio"] == pytest.approx(expected_busy, rel=1e-9)
    assert 0.40 < expected_busy < 0.41
    table = subprocess.run(
        [sys.executable, "-m", "warpwatch", "analyze", str(REPRO)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin"},
    )
    assert table.returncode == 0, table.stderr
    assert "-396" in table.stdout and "5.82" in table.stdout
    assert "busy 40.6%" in table.stdout
