"""The analyze table at any width: nothing cut but names, rows distinct, words that explain."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from support.paths import HTA, ROOT
from support.tracebuild import H100, kernel, span, trace_doc, write
from warpwatch.analysis.window import analyze
from warpwatch.commands.table import distinct_cuts, render_table
from warpwatch.trace import read_trace

SAMPLE = ROOT / "agent" / "warpwatch" / "samples" / "a100_alexnet.json.gz"
SAMPLED = HTA / "timeline_analysis/sampled_rank-0.json.gz"
MI250 = HTA / "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def table(path: Path, width: int, top: int = 0) -> list[str]:
    out = io.StringIO()
    trace = read_trace(path)
    render_table(Console(file=out, width=width, highlight=False), trace, analyze(trace), top=top)
    return out.getvalue().splitlines()


def rows(lines: list[str]) -> list[str]:
    """The table's rows: the lines between the rule under the header and the first note."""
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("─")) + 1
    notes = ("  … ", "  (Narrow terminal", "  All kernels ran", "  Kernel: the", "  • ", "  Estimates of one")
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(notes) or not lines[i]), len(lines))
    return [line for line in lines[start:end] if not line.startswith("   ")]


@pytest.mark.parametrize("width", [80, 100, 200])
def test_no_line_is_wider_than_the_terminal_and_no_number_is_cut(width: int) -> None:
    lines = table(SAMPLE, width)
    assert max(len(line) for line in lines) <= width
    text = "\n".join(lines)
    # alexnet's vectorized FillFunctor and elementwise kernels: corrected warps per SM, by hand from the trace
    # (elementwise_kernel<128, 2, ...>: grid 4,704 x block 128 on 108 SMs -> 2452.54 is Σ-weighted; the number
    # must appear whole at every width, with the column's decimals: none where it holds thousands).
    for number in ("2,453", "1,287", "112"):
        assert number in text
    header = next(line for line in lines if line.startswith("  Kernel "))
    numbers_from = re.match(r"  Kernel +", header).end()  # type: ignore[union-attr]
    assert all("…" not in row[numbers_from:] for row in rows(lines))  # only the kernel column is ever cut


def test_a_narrow_terminal_says_which_columns_it_dropped_and_stacks_artefacts() -> None:
    lines = table(SAMPLE, 80)
    text = "\n".join(lines)
    assert "Narrow terminal: reported, resident, limiter, waves not shown" in text
    assert "    artefacts: smem 0% 6" in text
    header = next(line for line in lines if line.startswith("  Kernel "))
    assert "Reported" not in header and "Launches" in header and "Theor. occ" in header
    wide = "\n".join(table(SAMPLE, 200))
    assert "Narrow terminal" not in wide and "Reported" in wide


def test_rows_stay_distinct_when_names_are_cut() -> None:
    """sampled_rank-0 has 39 vectorized_elementwise_kernel<4, ...> kernels (the issue's four identical rows)."""
    for width in (80, 100):
        lines = table(SAMPLED, width)
        kernel_cells = [row.split("  ")[1] for row in rows(lines)]
        assert len(kernel_cells) == 194  # every kernel, those whose label starts with "(" too
        # A cell cut alike another is followed by the whole label, which tells them apart.
        whole = {
            k: lines[k + 1].strip() + lines[k + 2].strip()
            for k, line in enumerate(lines)
            if k + 2 < len(lines) and lines[k + 1].startswith("    kernel: ")
        }
        keyed = [(line.split("  ")[1], whole.get(k, "")) for k, line in enumerate(lines) if line in rows(lines)]
        assert len(set(keyed)) == 194
        assert len(whole) < 20  # most rows are told apart by their cut label alone


def test_distinct_cuts_keep_distinct_labels_distinct() -> None:
    labels = ["a" * 20 + "x" + "b" * 20, "a" * 20 + "y" + "b" * 20]
    cut = distinct_cuts(labels, 15)
    assert len(set(cut)) == 2 and all(len(c) <= 15 for c in cut)


def test_a_long_kernel_reads_within_its_bounds_beside_what_the_trace_shows(tmp_path: Path) -> None:
    """W = 1000 us, one 900 us launch at 50 us: h = 1000/100 = 10 gives 9000 us (900 % of W); the trace
    shows 900 us (90 %), and only 50 us idle at each edge can hide a dropped straddler: at most 100 %."""
    doc = trace_doc([span(0, 1000), kernel("long_kernel", ts=50, dur=900, grid=(132, 1, 1), block=(256, 1, 1))])
    lines = table(write(tmp_path / "t.json", doc), 120)
    header = next(line for line in lines if line.startswith("  Kernel "))
    assert "Time %" in header and "Obs. %" in header
    (row,) = rows(lines)
    assert re.split(r"\s{2,}", row.strip())[2:4] == ["100.0", "90.0"]
    text = " ".join(line.strip() for line in lines)
    assert "900.0" not in text and "Obs. %: what the trace itself shows" in text
    assert "these are brought within what the trace shows possible" in text


def test_the_limiter_is_empty_at_full_theoretical_occupancy(tmp_path: Path) -> None:
    """H100, 256-thread blocks, 32 registers, no shared memory: 8 blocks x 8 warps = 64 warps = 100 %;
    1,024-thread blocks with 64 registers: one block (64 K registers) = 32 warps = 50 %, registers."""
    doc = trace_doc(
        [
            span(0, 1000),
            kernel("full", grid=(132, 1, 1), block=(256, 1, 1), regs=32),
            kernel("half", ts=300, grid=(132, 1, 1), block=(1024, 1, 1), regs=64),
        ]
    )
    lines = table(write(tmp_path / "t.json", doc), 200)
    (full,) = [line for line in lines if line.startswith("  full ")]
    (half,) = [line for line in lines if line.startswith("  half ")]
    assert "100%" in full and "registers" not in full and "warps " not in full.split("100%")[-1]
    assert " 50%" in half and "registers" in half


def test_a_device_without_a_name_is_unknown(tmp_path: Path) -> None:
    doc = trace_doc([span(0, 1000), kernel("k")], devices=[{**H100, "name": ""}])
    text = "\n".join(table(write(tmp_path / "t.json", doc), 120))
    assert "GPU 0: unknown (compute 9.0), 132 SMs, max 64 warps/SM" in text


def test_amd_devices_speak_of_cus_and_wavefronts() -> None:
    text = "\n".join(table(MI250, 160))
    assert "GPU 2: AMD Radeon Graphics (AMD), 104 CUs, max 32 wavefronts/CU" in text
    assert "Wavefronts/CU" in text and "compute 9.0" not in text and "Warps/SM" not in text


def run_analyze(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warpwatch", "analyze", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_piped_output_follows_columns() -> None:
    for columns in ("90", "150"):
        result = run_analyze(str(SAMPLE), env={"COLUMNS": columns})
        assert result.returncode == 0, result.stderr
        assert int(columns) - 12 < max(len(line) for line in result.stdout.splitlines()) <= int(columns)


def test_gpu_properties_that_match_no_device_are_named(tmp_path: Path) -> None:
    doc = trace_doc([span(0, 1000), kernel("k", device=3)], devices=[])
    path = write(tmp_path / "t.json", doc)
    props = tmp_path / "props.json"
    props.write_text('{"0": ' + json_of(H100) + "}")
    result = run_analyze(str(path), "--gpu-properties", str(props), env={"COLUMNS": "200"})
    assert result.returncode == 0
    assert (
        f"warning: --gpu-properties {props}: its device ids (0) match no device of {path}, whose kernels ran "
        "on device 3; as the trace then describes one device model, its properties apply to 3 (the output says "
        "so). Give each entry the `id` of the device it describes."
    ) in result.stderr.replace("\n", " ")
    assert "properties of device 0 applied" in result.stdout
    props.write_text('{"3": ' + json_of(H100) + "}")
    result = run_analyze(str(path), "--gpu-properties", str(props), env={"COLUMNS": "200"})
    assert result.stderr == "" and "GPU 3: NVIDIA H100 (compute 9.0), 132 SMs" in result.stdout


def json_of(props: dict[str, object]) -> str:
    import json

    return json.dumps({k: v for k, v in props.items() if k != "id"})
