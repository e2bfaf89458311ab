"""Where the occupancy calculator port (warpwatch.analysis.occupancy) answers zero, unknown or an
error: blocks that cannot run, devices and inputs the CUDA header does not know or rejects; and its
cache (the hand-checked limits: test_occupancy.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from occupancy_devices import (
    A100,
    GP100,
    KIB,
    MI250,
    regs_per_warp,
)

from warpwatch.analysis.occupancy import OccupancyResult, max_active_blocks


def test_a_block_larger_than_max_threads_per_block_has_zero_active_blocks() -> None:
    result = max_active_blocks(A100, 1025, 16, 0)
    assert result is not None
    assert result.active_blocks_per_sm == 0
    assert result.block_limit_warps == 0
    assert "warps" in result.limiting_factors


def test_a_gp100_block_refused_on_other_pascal_chips_is_refused_on_gp100_too() -> None:
    # 704 threads = 22 warps of 88 regs (2816 per warp): 22 * 2816 = 61952 fits GP100's 2
    # sub-partitions, but GP10x rounds to 24 warps: 67584 > 65536; the header refuses both.
    assert 22 * regs_per_warp(88) <= 65536 < 24 * regs_per_warp(88)
    result = max_active_blocks(GP100, 704, 88, 0)
    assert result is not None
    assert result.active_blocks_per_sm == 0
    assert result.block_limit_registers == 0
    gp102 = max_active_blocks(dataclasses.replace(GP100, compute_minor=1), 704, 88, 0)
    assert gp102 is not None and gp102.active_blocks_per_sm == 0


def test_an_amd_device_has_no_cuda_occupancy() -> None:
    assert max_active_blocks(MI250, 256, 32, 0) is None


@pytest.mark.parametrize(
    "missing",
    ["regs_per_block", "regs_per_sm", "shared_mem_per_block", "shared_mem_per_sm", "shared_mem_per_block_optin"],
)
def test_a_missing_device_property_makes_occupancy_unknown(missing: str) -> None:
    change: dict[str, Any] = {missing: None}
    assert max_active_blocks(dataclasses.replace(A100, **change), 256, 32, 0) is None


def test_kinetos_default_limit_does_not_need_the_optin_property() -> None:
    device = dataclasses.replace(A100, shared_mem_per_block_optin=None)
    assert max_active_blocks(device, 256, 32, 0) is None
    result = max_active_blocks(device, 256, 32, 0, shmem_limit="default")
    assert result is not None and result.active_blocks_per_sm == 8


@pytest.mark.parametrize(("major", "minor"), [(13, 0), (10, 2), (12, 2), (2, 0), (4, 0), (1, 3)])
def test_a_compute_capability_the_header_does_not_know_is_unknown(major: int, minor: int) -> None:
    device = dataclasses.replace(A100, compute_major=major, compute_minor=minor)
    assert max_active_blocks(device, 256, 32, 0) is None


@pytest.mark.parametrize(
    ("block_size", "registers", "shared_memory"),
    [(0, 32, 0), (-32, 32, 0), (256, -1, 0), (256, 32, -1), (2**31, 32, 0), (256, 2**31, 0)],
)
def test_inputs_the_header_rejects_or_cannot_take_are_unknown(
    block_size: int, registers: int, shared_memory: int
) -> None:
    assert max_active_blocks(A100, block_size, registers, shared_memory) is None


@pytest.mark.parametrize(
    "change",
    [
        {"num_sms": 0},
        {"warp_size": 0},
        {"max_threads_per_sm": -1},
        {"shared_mem_per_block": 0},
        {"shared_mem_per_sm": 200 * KIB},
    ],
    ids=[
        "no SMs",
        "no warp size",
        "negative threads per SM",
        "no shared memory per block",
        "more shared memory per SM than any A100 carveout",
    ],
)
def test_device_properties_the_header_rejects_make_occupancy_unknown(change: dict[str, Any]) -> None:
    assert max_active_blocks(dataclasses.replace(A100, **change), 256, 32, 0) is None


def test_an_unknown_shared_memory_limit_mode_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="shmem_limit"):
        max_active_blocks(A100, 256, 32, 0, shmem_limit="max")  # type: ignore[arg-type]


def test_results_are_cached_and_immutable() -> None:
    first = max_active_blocks(A100, 256, 32, 0)
    assert first is max_active_blocks(A100, 256, 32, 0)
    assert isinstance(first, OccupancyResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.active_blocks_per_sm = 1  # type: ignore[misc]
