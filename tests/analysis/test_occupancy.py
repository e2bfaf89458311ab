"""Hand-checked cases of the occupancy calculator port (warpwatch.analysis.occupancy).

Every expected number is derived here as arithmetic from the limits that CUDA 13's
`cuda_occupancy.h` documents for the architecture (register allocation of 256 registers per warp
in 4 sub-partitions, shared memory granularity 128 bytes from 8.0 on and 256 before, the
1 KiB per-block reserve from 8.0 on, the carveout sizes and the blocks-per-SM table).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from warpwatch.analysis.occupancy import NO_LIMIT, OccupancyResult, max_active_blocks
from warpwatch.model import LIMITING_FACTORS, DeviceProperties

KIB = 1024

# deviceProperties as Kineto writes them (A100 and V100 from HolisticTraceAnalysis traces,
# RTX 2080 Ti from facebookresearch/param, H100 from pytorch/kineto docs/traces).
A100 = DeviceProperties(
    id=0,
    name="NVIDIA A100-SXM4-80GB",
    compute_major=8,
    compute_minor=0,
    num_sms=108,
    warp_size=32,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    regs_per_block=65536,
    regs_per_sm=65536,
    shared_mem_per_block=49152,
    shared_mem_per_sm=167936,
    shared_mem_per_block_optin=166912,
)
V100 = DeviceProperties(
    id=0,
    name="Tesla V100-SXM2-32GB",
    compute_major=7,
    compute_minor=0,
    num_sms=80,
    warp_size=32,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    regs_per_block=65536,
    regs_per_sm=65536,
    shared_mem_per_block=49152,
    shared_mem_per_sm=98304,
    shared_mem_per_block_optin=98304,
)
RTX2080TI = DeviceProperties(
    id=0,
    name="NVIDIA GeForce RTX 2080 Ti",
    compute_major=7,
    compute_minor=5,
    num_sms=68,
    warp_size=32,
    max_threads_per_block=1024,
    max_threads_per_sm=1024,
    regs_per_block=65536,
    regs_per_sm=65536,
    shared_mem_per_block=49152,
    shared_mem_per_sm=65536,
    shared_mem_per_block_optin=65536,
)
RTX3090 = dataclasses.replace(
    A100,
    name="NVIDIA GeForce RTX 3090",
    compute_minor=6,
    num_sms=82,
    max_threads_per_sm=1536,
    shared_mem_per_sm=102400,
    shared_mem_per_block_optin=101376,
)
RTX4090 = dataclasses.replace(RTX3090, name="NVIDIA GeForce RTX 4090", compute_minor=9, num_sms=128)
H100 = dataclasses.replace(
    A100,
    name="NVIDIA H100",
    compute_major=9,
    compute_minor=0,
    num_sms=132,
    shared_mem_per_sm=233472,
    shared_mem_per_block_optin=232448,
)
B200 = dataclasses.replace(H100, name="NVIDIA B200", compute_major=10, num_sms=148)
RTX5090 = dataclasses.replace(
    RTX3090,
    name="NVIDIA GeForce RTX 5090",
    compute_major=12,
    compute_minor=0,
    num_sms=170,
)
GP100 = DeviceProperties(
    id=0,
    name="Quadro GP100",
    compute_major=6,
    compute_minor=0,
    num_sms=56,
    warp_size=32,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    regs_per_block=65536,
    regs_per_sm=65536,
    shared_mem_per_block=49152,
    shared_mem_per_sm=65536,
    shared_mem_per_block_optin=49152,
)
MI250 = DeviceProperties(
    id=0,
    name="AMD Radeon Graphics",
    compute_major=9,
    compute_minor=0,
    num_sms=104,
    warp_size=64,
    max_threads_per_block=1024,
    max_threads_per_sm=2048,
    regs_per_block=65536,
    regs_per_sm=65536,
    shared_mem_per_block=65536,
    shared_mem_per_sm=65536,
    shared_mem_per_block_optin=65536,
    vendor="amd",
)

RESERVE = 1024  # reservedSharedMemPerBlock from compute capability 8.0 on
REGS_PER_SUB_PARTITION = 65536 // 4  # 4 sub-partitions per SM


def warps_of(threads: int) -> int:
    return -(-threads // 32)


def regs_per_warp(regs_per_thread: int) -> int:
    """Registers allocated per warp: regs x 32, rounded up to 256."""
    return -(-regs_per_thread * 32 // 256) * 256


def smem_allocated(bytes_: int, granularity: int = 128, reserve: int = RESERVE) -> int:
    return -(-(bytes_ + reserve) // granularity) * granularity


def test_a_small_kernel_on_a100_is_limited_by_warp_slots() -> None:
    result = max_active_blocks(A100, 256, 16, 0)
    assert result is not None
    warp_limit = (2048 // 32) // warps_of(256)  # 64 warp slots / 8 warps = 8
    reg_limit = (REGS_PER_SUB_PARTITION // regs_per_warp(16)) * 4 // warps_of(256)  # 32*4/8 = 16
    assert warp_limit == 8 and reg_limit == 16
    assert result.active_blocks_per_sm == warp_limit
    assert result.limiting_factors == ("warps",)
    assert result.block_limit_warps == 8
    assert result.block_limit_registers == 16
    # only the 1 KiB reserve: the 164 KiB carveout holds 164 blocks
    assert result.block_limit_shared_memory == (164 * KIB) // smem_allocated(0) == 164
    assert result.block_limit_blocks == 32
    assert result.block_limit_barriers == NO_LIMIT  # barriers only count from Hopper on


def test_every_limit_equal_to_the_result_is_a_limiting_factor() -> None:
    result = max_active_blocks(A100, 256, 32, 0)
    assert result is not None
    # 32 regs x 32 threads = 1024 per warp: 16 warps per sub-partition, 64 per SM = warp slots
    assert result.block_limit_registers == (REGS_PER_SUB_PARTITION // 1024) * 4 // 8 == 8
    assert result.active_blocks_per_sm == 8
    assert result.limiting_factors == ("warps", "registers")
    assert result.limiting_factors_mask == 0x01 | 0x02


def test_registers_limit_a100_kernel_with_64_registers_per_thread() -> None:
    result = max_active_blocks(A100, 256, 64, 0)
    assert result is not None
    expected = (REGS_PER_SUB_PARTITION // regs_per_warp(64)) * 4 // warps_of(256)  # 8*4/8 = 4
    assert expected == 4
    assert result.active_blocks_per_sm == expected
    assert result.limiting_factors == ("registers",)


def test_registers_are_allocated_per_warp_in_units_of_256() -> None:
    # 33 regs x 32 = 1056 registers per warp, allocated as 1280: 12 warps per sub-partition
    result = max_active_blocks(A100, 256, 33, 0)
    assert result is not None
    assert regs_per_warp(33) == 1280
    assert result.block_limit_registers == (REGS_PER_SUB_PARTITION // 1280) * 4 // 8 == 6
    # not the naive 65536 / (33 * 256) = 7.76 -> 7
    assert result.active_blocks_per_sm == 6


def test_a_kernel_using_255_registers_fits_one_256_thread_block() -> None:
    result = max_active_blocks(A100, 256, 255, 0)
    assert result is not None
    assert regs_per_warp(255) == 8192
    assert result.active_blocks_per_sm == (REGS_PER_SUB_PARTITION // 8192) * 4 // 8 == 1


def test_a_block_whose_registers_exceed_regs_per_block_cannot_run() -> None:
    # 1024 threads x 65 regs: 32 warps x 2304 registers > 65536
    result = max_active_blocks(A100, 1024, 65, 0)
    assert result is not None
    assert 32 * regs_per_warp(65) > 65536
    assert result.active_blocks_per_sm == 0
    assert result.block_limit_registers == 0
    assert result.limiting_factors == ("registers",)
    fits = max_active_blocks(A100, 1024, 64, 0)
    assert fits is not None and fits.active_blocks_per_sm == 1


def test_more_registers_per_thread_than_the_architecture_allows_cannot_run() -> None:
    result = max_active_blocks(A100, 32, 257, 0)
    assert result is not None
    assert result.active_blocks_per_sm == 0
    assert result.limiting_factors == ("registers",)
    ok = max_active_blocks(A100, 32, 256, 0)  # 256 is the maximum from Volta on
    assert ok is not None and ok.active_blocks_per_sm > 0
    pascal = max_active_blocks(GP100, 32, 256, 0)  # 255 before Volta
    assert pascal is not None and pascal.active_blocks_per_sm == 0


def test_zero_registers_do_not_limit_occupancy() -> None:
    result = max_active_blocks(A100, 128, 0, 0)
    assert result is not None
    assert result.block_limit_registers == NO_LIMIT
    assert result.active_blocks_per_sm == 16  # 64 warp slots / 4 warps
    assert result.limiting_factors == ("warps",)


def test_a_99_kib_shared_memory_kernel_fits_one_block_on_a100_with_the_optin_limit() -> None:
    smem = 99 * KIB
    allocated = smem_allocated(smem)  # 99 KiB + 1 KiB reserve = 102400, a multiple of 128
    assert allocated == 102400
    # per-block limit: the opt-in 166912 + the reserve = 167936 >= 102400; the 164 KiB carveout
    assert allocated <= 166912 + RESERVE
    result = max_active_blocks(A100, 256, 32, smem)
    assert result is not None
    assert result.block_limit_shared_memory == (164 * KIB) // allocated == 1
    assert result.active_blocks_per_sm == 1
    assert result.limiting_factors == ("shared_memory",)


def test_the_same_kernel_cannot_run_under_kinetos_default_shared_memory_limit() -> None:
    # FUNC_SHMEM_LIMIT_DEFAULT: the per-block limit is sharedMemPerBlock + reserve = 50176 < 102400
    result = max_active_blocks(A100, 256, 32, 99 * KIB, shmem_limit="default")
    assert result is not None
    assert result.active_blocks_per_sm == 0
    assert result.block_limit_shared_memory == 0
    assert result.limiting_factors == ("shared_memory",)
    assert smem_allocated(99 * KIB) > 49152 + RESERVE


def test_two_80_kib_blocks_share_the_a100_carveout() -> None:
    result = max_active_blocks(A100, 128, 32, 80 * KIB)
    assert result is not None
    assert result.active_blocks_per_sm == (164 * KIB) // smem_allocated(80 * KIB) == 2


def test_shared_memory_up_to_exactly_the_optin_limit_fits_and_one_byte_more_does_not() -> None:
    at_limit = max_active_blocks(A100, 128, 32, 166912)
    assert at_limit is not None and at_limit.active_blocks_per_sm == 1
    over = max_active_blocks(A100, 128, 32, 166912 + 1)
    assert over is not None
    assert over.active_blocks_per_sm == 0
    assert over.limiting_factors == ("shared_memory",)


def test_shared_memory_is_allocated_in_128_byte_units_from_ampere_and_256_before() -> None:
    # A100: 1 byte + 1 KiB reserve -> 1152 bytes per block: 167936 // 1152 = 145
    a100 = max_active_blocks(A100, 32, 0, 1)
    assert a100 is not None
    assert a100.block_limit_shared_memory == (164 * KIB) // smem_allocated(1) == 145
    # V100: no reserve, 1 byte -> 256: the 96 KiB carveout holds 384
    v100 = max_active_blocks(V100, 32, 0, 1)
    assert v100 is not None
    assert v100.block_limit_shared_memory == (96 * KIB) // 256 == 384


def test_no_shared_memory_before_ampere_does_not_limit_occupancy() -> None:
    result = max_active_blocks(V100, 256, 32, 0)
    assert result is not None
    assert result.block_limit_shared_memory == NO_LIMIT


def test_a_48_thread_block_occupies_two_warps() -> None:
    result = max_active_blocks(A100, 48, 0, 0)
    assert result is not None
    assert warps_of(48) == 2
    assert result.block_limit_warps == 64 // 2 == 32  # not 64 / 1.5 = 42
    thirty_three = max_active_blocks(A100, 33, 0, 0)
    assert thirty_three is not None and thirty_three.block_limit_warps == 32


@pytest.mark.parametrize(
    ("device", "blocks"),
    [
        (V100, 32),
        (RTX2080TI, 16),
        (A100, 32),
        (RTX3090, 16),
        (RTX4090, 24),
        (H100, 32),
        (B200, 32),
        (RTX5090, 24),
        (GP100, 32),
    ],
    ids=lambda value: value.compute_capability if isinstance(value, DeviceProperties) else str(value),
)
def test_the_blocks_per_sm_limit_follows_the_architecture_table(device: DeviceProperties, blocks: int) -> None:
    result = max_active_blocks(device, 32, 0, 0)
    assert result is not None
    assert result.block_limit_blocks == blocks
    warp_slots = device.max_threads_per_sm // 32
    assert result.active_blocks_per_sm == min(blocks, warp_slots)
    assert "blocks" in result.limiting_factors


def test_hopper_counts_two_barriers_per_block_slot() -> None:
    result = max_active_blocks(H100, 32, 0, 0)
    assert result is not None
    assert result.block_limit_barriers == 2 * 32
    assert result.block_limit_warps == 64  # one warp per block, 64 warp slots
    assert result.active_blocks_per_sm == 32
    assert result.limiting_factors == ("blocks",)


def test_consumer_blackwell_has_one_barrier_per_block_slot_so_barriers_limit_with_blocks() -> None:
    result = max_active_blocks(RTX5090, 32, 0, 0)
    assert result is not None
    assert result.block_limit_barriers == result.block_limit_blocks == 24
    assert result.limiting_factors == ("blocks", "barriers")


def test_limiting_factors_are_spelled_and_ordered_as_the_model_says() -> None:
    result = max_active_blocks(A100, 1024, 65, 200 * KIB)
    assert result is not None
    assert set(result.limiting_factors) <= set(LIMITING_FACTORS)
    assert list(result.limiting_factors) == [f for f in LIMITING_FACTORS if f in result.limiting_factors]
    assert result.limiting_factors == ("registers", "shared_memory")


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
