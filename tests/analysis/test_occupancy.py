"""Hand-checked cases of the occupancy calculator port (warpwatch.analysis.occupancy).

Every expected number is derived here as arithmetic from the limits that CUDA 13's
`cuda_occupancy.h` documents for the architecture (register allocation of 256 registers per warp
in 4 sub-partitions, shared memory granularity 128 bytes from 8.0 on and 256 before, the
1 KiB per-block reserve from 8.0 on, the carveout sizes and the blocks-per-SM table).
"""

from __future__ import annotations

import pytest
from occupancy_devices import (
    A100,
    B200,
    GP100,
    H100,
    KIB,
    REGS_PER_SUB_PARTITION,
    RESERVE,
    RTX2080TI,
    RTX3090,
    RTX4090,
    RTX5090,
    V100,
    regs_per_warp,
    smem_allocated,
    warps_of,
)

from warpwatch.analysis.occupancy import NO_LIMIT, max_active_blocks
from warpwatch.model import LIMITING_FACTORS, DeviceProperties


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
