"""Helpers of tests/analysis/test_occupancy_vs_cuda.py and test_occupancy_traces.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from warpwatch.analysis.occupancy import (
    OccupancyResult,
    _calculate,
    max_active_blocks,
    reserved_shared_mem_per_block,
)
from warpwatch.model import DeviceProperties

from .paths import SHARED_TRACES

ROOT = Path(__file__).resolve().parents[2]


DRIVER_SOURCE = ROOT / "tests" / "analysis" / "cuda_occ" / "occ_driver.cpp"


TRACES = SHARED_TRACES  # WARPWATCH_SHARED_TRACES, else ../shared/traces beside the clone


def _find_header_dir() -> Path | None:
    """A directory holding CUDA 13's cuda_occupancy.h (max compute capability 12.1)."""
    candidates: list[Path] = []
    if os.environ.get("CUDA_OCC_INCLUDE"):
        candidates.append(Path(os.environ["CUDA_OCC_INCLUDE"]))
    candidates += sorted(Path("/usr/local").glob("cuda-13*/include"), reverse=True)
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for directory in candidates:
        header = directory / "cuda_occupancy.h"
        if header.is_file():
            text = header.read_text(errors="replace")
            if "#define __CUDA_OCC_MAJOR__ 12" in text and "#define __CUDA_OCC_MINOR__ 1" in text:
                return directory
    return None


GXX = shutil.which("g++")


HEADER_DIR = _find_header_dir()


Case = tuple[DeviceProperties, int, int, int, bool]


def _device_line(d: DeviceProperties) -> str:
    fields = (
        d.compute_major,
        d.compute_minor,
        d.max_threads_per_block,
        d.max_threads_per_sm,
        d.regs_per_block,
        d.regs_per_sm,
        d.warp_size,
        d.shared_mem_per_block,
        d.shared_mem_per_sm,
        d.num_sms,
        d.shared_mem_per_block_optin,
        reserved_shared_mem_per_block(d.compute_major),
    )
    assert all(isinstance(v, int) for v in fields), d
    return " ".join(str(v) for v in fields)


def _run_header(driver: Path, cases: list[Case]) -> list[tuple[int, ...]]:
    """The header's answer per case: ("E", code) as (code,), or the 7 result numbers."""
    lines = [f"{_device_line(d)} {t} {r} {s} {int(optin)}" for d, t, r, s, optin in cases]
    done = subprocess.run(
        [str(driver)], input="\n".join(lines) + "\n", capture_output=True, text=True, check=True, timeout=120
    )
    answers: list[tuple[int, ...]] = []
    for line in done.stdout.splitlines():
        kind, *numbers = line.split()
        answers.append(tuple(int(n) for n in numbers))
        assert (kind == "E" and len(numbers) == 1) or (kind == "R" and len(numbers) == 7), line
    assert len(answers) == len(cases)
    return answers


def _ours(case: Case) -> tuple[int, ...]:
    device, block_size, registers, shared_memory, optin = case
    result = _calculate(device, block_size, registers, shared_memory, optin)
    public = max_active_blocks(
        device, block_size, registers, shared_memory, shmem_limit="optin" if optin else "default"
    )
    if isinstance(result, OccupancyResult):
        assert public == result
        return (
            result.active_blocks_per_sm,
            result.limiting_factors_mask,
            result.block_limit_warps,
            result.block_limit_registers,
            result.block_limit_shared_memory,
            result.block_limit_blocks,
            result.block_limit_barriers,
        )
    assert isinstance(result, int), f"not callable through the header: {case}"
    assert public is None
    return (result,)


def _compare(driver: Path, cases: list[Case], what: str) -> dict[str, int]:
    expected = _run_header(driver, cases)
    mismatches = []
    outcome = {"errors": 0, "zero": 0, "positive": 0}
    for case, want in zip(cases, expected, strict=True):
        got = _ours(case)
        if got != want:
            mismatches.append((case, want, got))
        if len(want) == 1:
            outcome["errors"] += 1
        else:
            outcome["zero" if want[0] == 0 else "positive"] += 1
    if mismatches:
        shown = "\n".join(
            f"  {d.compute_capability} {_device_line(d)} T={t} regs={r} smem={s} optin={o}: header {want}, port {got}"
            for (d, t, r, s, o), want, got in mismatches[:10]
        )
        pytest.fail(
            f"{len(mismatches)} of {len(cases)} {what} differ from cuda_occupancy.h "
            f"(header (active, factors, warps, regs, smem, blocks, barriers) or (error,)):\n{shown}"
        )
    return outcome


def _report(capsys: pytest.CaptureFixture[str], message: str) -> None:
    with capsys.disabled():
        print(f"\n[occupancy vs cuda_occupancy.h] {message}")
