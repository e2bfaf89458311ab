"""The functions of CUDA 13's `cuda_occupancy.h` that `cudaOccMaxActiveBlocksPerMultiprocessor` calls,
ported name for name (`occupancy` says which settings and inputs it is called with, and what it returns)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..model import LIMITING_FACTORS

INT_MAX = 2**31 - 1
INT_MIN = -(2**31)
SIZE_MAX = 2**64 - 1

NO_LIMIT = INT_MAX
"""The value of a block limit that does not bound occupancy (the header's INT_MAX)."""

CUDA_OCC_SUCCESS = 0
CUDA_OCC_ERROR_INVALID_INPUT = 1
CUDA_OCC_ERROR_UNKNOWN_DEVICE = 2

# cudaOccLimitingFactor bits, in the order of warpwatch.model.LIMITING_FACTORS.
_OCC_LIMIT_WARPS = 0x01
_OCC_LIMIT_REGISTERS = 0x02
_OCC_LIMIT_SHARED_MEMORY = 0x04
_OCC_LIMIT_BLOCKS = 0x08
_OCC_LIMIT_BARRIERS = 0x10
_FACTOR_BITS: tuple[tuple[int, str], ...] = tuple(
    zip(
        (_OCC_LIMIT_WARPS, _OCC_LIMIT_REGISTERS, _OCC_LIMIT_SHARED_MEMORY, _OCC_LIMIT_BLOCKS, _OCC_LIMIT_BARRIERS),
        LIMITING_FACTORS,
        strict=True,
    )
)

_KIB = 1024


@dataclass(frozen=True, slots=True)
class OccupancyResult:
    """What `cudaOccMaxActiveBlocksPerMultiprocessor` reports for one launch configuration.

    `limiting_factors` holds, in `LIMITING_FACTORS` order, every factor whose block limit equals
    the result (the header's `limitingFactors` bitmask). A block limit of `NO_LIMIT` means the
    resource does not bound occupancy.
    """

    active_blocks_per_sm: int
    limiting_factors: tuple[str, ...]
    block_limit_warps: int
    block_limit_registers: int
    block_limit_shared_memory: int
    block_limit_blocks: int
    block_limit_barriers: int

    @property
    def limiting_factors_mask(self) -> int:
        """The header's `limitingFactors` bitmask (OCC_LIMIT_WARPS = 1 ... OCC_LIMIT_BARRIERS = 16)."""
        return sum(bit for bit, name in _FACTOR_BITS if name in self.limiting_factors)


class OccError(Exception):
    """A `cudaOccError` other than CUDA_OCC_SUCCESS."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass(frozen=True, slots=True)
class OccDevice:
    """`cudaOccDeviceProp`."""

    major: int
    minor: int
    max_threads_per_block: int
    max_threads_per_sm: int
    regs_per_block: int
    regs_per_sm: int
    warp_size: int
    smem_per_block: int
    smem_per_sm: int
    num_sms: int
    smem_per_block_optin: int
    reserved_smem_per_block: int


def _divide_round_up(x: int, y: int) -> int:
    return (x + (y - 1)) // y


def _round_up(x: int, y: int) -> int:
    return y * _divide_round_up(x, y)


# --- Architectural properties (one function per header function) -------------------------------


def _smem_allocation_granularity(d: OccDevice) -> int:
    if d.major in (3, 5, 6, 7):
        return 256
    if d.major in (8, 9, 10, 11, 12):
        return 128
    raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)


def _reg_allocation_max_per_thread(d: OccDevice) -> int:
    if d.major in (3, 5, 6):
        return 255
    if d.major in (7, 8, 9, 10, 11, 12):
        return 256
    raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)


def _reg_allocation_granularity(d: OccDevice) -> int:
    if d.major in (3, 5, 6, 7, 8, 9, 10, 11, 12):
        return 256
    raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)


def _sub_partitions_per_multiprocessor(d: OccDevice) -> int:
    if d.major in (3, 5, 7, 8, 9, 10, 11, 12):
        return 4
    if d.major == 6:
        return 4 if d.minor else 2
    raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)


def _max_blocks_per_multiprocessor(d: OccDevice) -> int:
    if d.major == 3:
        return 16
    if d.major in (5, 6):
        return 32
    if d.major == 7:
        return 16 if d.minor == 5 else 32  # Turing
    if d.major == 8:
        if d.minor == 0:
            return 32
        return 24 if d.minor == 9 else 16
    if d.major == 9:
        return 32
    if d.major == 10:
        return 24 if d.minor == 1 else 32
    if d.major == 11:
        return 24 if d.minor == 0 else 32
    if d.major == 12:
        return 24
    raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)


# Shared memory carveout sizes per SM (cudaOccAlignUpShmemSizeVoltaPlus), ascending. A table
# starting with 0 maps a request of 0 to 0; Turing's smallest size is 32 KiB.
_CARVEOUTS_TURING = (32 * _KIB, 64 * _KIB)
_CARVEOUTS_VOLTA = (0, 8 * _KIB, 16 * _KIB, 32 * _KIB, 64 * _KIB, 96 * _KIB)
_CARVEOUTS_100K = (0, 8 * _KIB, 16 * _KIB, 32 * _KIB, 64 * _KIB, 100 * _KIB)
_CARVEOUTS_164K = (*_CARVEOUTS_100K, 132 * _KIB, 164 * _KIB)
_CARVEOUTS_228K = (*_CARVEOUTS_164K, 196 * _KIB, 228 * _KIB)


def _carveouts(d: OccDevice) -> tuple[int, ...]:
    if d.major == 7:
        return _CARVEOUTS_TURING if d.minor == 5 else _CARVEOUTS_VOLTA
    if d.major == 8:
        return _CARVEOUTS_164K if d.minor in (0, 7) else _CARVEOUTS_100K
    if d.major == 9:
        return _CARVEOUTS_228K
    if d.major in (10, 11):
        if d.minor in (0, 1, 3):
            return _CARVEOUTS_228K
        raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)
    if d.major == 12:
        if d.minor in (0, 1):
            return _CARVEOUTS_100K
        raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)
    raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)


def _align_up_shmem_size_volta_plus(size: int, d: OccDevice) -> int:
    for carveout in _carveouts(d):
        if size <= carveout:
            return carveout
    raise OccError(CUDA_OCC_ERROR_INVALID_INPUT)


def _smem_per_multiprocessor(d: OccDevice) -> int:
    """cudaOccSMemPerMultiprocessor with the default device state (no carveout or cache preference)."""
    if d.major >= 7:
        # cudaOccSMemPreferenceVoltaPlus: SHAREDMEM_CARVEOUT_DEFAULT and CACHE_PREFER_NONE keep the
        # whole sharedMemPerMultiprocessor, aligned up to the next carveout size.
        return _align_up_shmem_size_volta_plus(d.smem_per_sm, d)
    # cudaOccSMemPreference: Kepler with CACHE_PREFER_NONE, Maxwell and Pascal all use the high value.
    if d.major in (3, 5, 6):
        return d.smem_per_sm
    raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)


def _smem_per_block(d: OccDevice, optin: bool, smem_per_cta: int) -> int:
    if 2 <= d.major <= 6:
        limit = d.smem_per_block
    elif 7 <= d.major <= 12:
        limit = d.smem_per_block_optin if optin and smem_per_cta > d.smem_per_block else d.smem_per_block
    else:
        raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)
    # Starting with Ampere, the driver reserves additional shared memory per block.
    if d.major >= 8:
        limit += d.reserved_smem_per_block
    return limit


def _block_barriers_available(d: OccDevice, cta_limit_blocks: int) -> int:
    if d.major in (5, 6, 7, 9):
        return cta_limit_blocks * 2
    if d.major == 8:
        return cta_limit_blocks * 2 if d.minor == 0 else cta_limit_blocks
    if d.major == 10:
        return cta_limit_blocks if d.minor == 1 else cta_limit_blocks * 2
    if d.major == 11:
        return cta_limit_blocks if d.minor == 0 else cta_limit_blocks * 2
    if d.major == 12:
        return cta_limit_blocks
    raise OccError(CUDA_OCC_ERROR_UNKNOWN_DEVICE)


# --- Per-resource limits -----------------------------------------------------------------------


def _regs_limit(d: OccDevice, num_regs: int, block_size: int) -> int:
    """cudaOccMaxBlocksPerSMRegsLimit with partitioned global caching off."""
    allocation_granularity = _reg_allocation_granularity(d)
    max_regs_per_thread = _reg_allocation_max_per_thread(d)
    num_sub_partitions = _sub_partitions_per_multiprocessor(d)

    warps_allocated_per_cta = _divide_round_up(block_size, d.warp_size)
    # Registers are allocated to warps: regs per thread x warp size, rounded up to the granularity.
    regs_allocated_per_warp = _round_up(num_regs * d.warp_size, allocation_granularity)
    regs_allocated_per_cta = regs_allocated_per_warp * warps_allocated_per_cta
    # The hardware check assumes allocations to all sub-partitions at once.
    regs_assumed_per_cta = regs_allocated_per_warp * _round_up(warps_allocated_per_cta, num_sub_partitions)

    if (
        d.regs_per_block < regs_assumed_per_cta
        or d.regs_per_block < regs_allocated_per_cta
        or num_regs > max_regs_per_thread
    ):
        return 0
    if regs_allocated_per_warp == 0:
        return INT_MAX
    num_regs_per_sub_partition = d.regs_per_sm // num_sub_partitions
    num_warps_per_sub_partition = num_regs_per_sub_partition // regs_allocated_per_warp
    return (num_warps_per_sub_partition * num_sub_partitions) // warps_allocated_per_cta


def _warps_limit(d: OccDevice, block_size: int) -> int:
    """cudaOccMaxBlocksPerSMWarpsLimit with partitioned global caching off."""
    if block_size > d.max_threads_per_block:
        return 0
    max_warps_per_sm = d.max_threads_per_sm // d.warp_size
    return max_warps_per_sm // _divide_round_up(block_size, d.warp_size)


def _smem_limit(d: OccDevice, dynamic_smem_size: int, optin: bool, max_dynamic_shared_size_bytes: int) -> int:
    """cudaOccMaxBlocksPerSMSmemLimit with sharedSizeBytes = 0 and the default device state."""
    allocation_granularity = _smem_allocation_granularity(d)
    user_smem_preference = _smem_per_multiprocessor(d)

    static_smem_size = 0 + d.reserved_smem_per_block
    total_smem_usage_per_cta = static_smem_size + dynamic_smem_size
    smem_allocated_per_cta = _round_up(total_smem_usage_per_cta, allocation_granularity)
    max_smem_usage_per_cta = static_smem_size + max_dynamic_shared_size_bytes

    dynamic_smem_size_exceeded = optin and dynamic_smem_size > max_dynamic_shared_size_bytes
    smem_limit_per_cta = _smem_per_block(d, optin, max_smem_usage_per_cta)
    total_smem_size_exceeded = smem_allocated_per_cta > smem_limit_per_cta
    if dynamic_smem_size_exceeded or total_smem_size_exceeded:
        return 0

    # The preferred carveout is used as long as one block fits in it; otherwise (Volta and newer)
    # the carveout grows to the next size that holds one block.
    if user_smem_preference >= smem_allocated_per_cta:
        shared_mem_per_multiprocessor = user_smem_preference
    elif d.major >= 7:
        shared_mem_per_multiprocessor = _align_up_shmem_size_volta_plus(smem_allocated_per_cta, d)
    else:
        shared_mem_per_multiprocessor = d.smem_per_sm
    if smem_allocated_per_cta > 0:
        return shared_mem_per_multiprocessor // smem_allocated_per_cta
    return INT_MAX


def max_active_blocks_per_multiprocessor(
    d: OccDevice,
    *,
    block_size: int,
    num_regs: int,
    dynamic_smem_size: int,
    shmem_limit_optin: bool,
    max_dynamic_shared_size_bytes: int,
) -> OccupancyResult:
    """cudaOccMaxActiveBlocksPerMultiprocessor; raises OccError where the header returns an error."""
    if block_size <= 0:
        raise OccError(CUDA_OCC_ERROR_INVALID_INPUT)
    # cudaOccDevicePropCheck: each of these limits must be positive.
    if (
        d.max_threads_per_block <= 0
        or d.max_threads_per_sm <= 0
        or d.regs_per_block <= 0
        or d.regs_per_sm <= 0
        or d.warp_size <= 0
        or d.smem_per_block <= 0
        or d.smem_per_sm <= 0
        or d.num_sms <= 0
    ):
        raise OccError(CUDA_OCC_ERROR_INVALID_INPUT)
    # cudaOccFuncAttributesCheck (maxThreadsPerBlock is INT_MAX).
    if num_regs < 0:
        raise OccError(CUDA_OCC_ERROR_INVALID_INPUT)

    cta_limit_regs = _regs_limit(d, num_regs, block_size)
    # GP100 (6.0) has 2 sub-partitions, GP10x 4: a block that cannot run on GP10x is refused on
    # every Pascal, for forward compatibility within the family.
    if d.major == 6 and d.minor == 0 and cta_limit_regs and _regs_limit(replace(d, minor=1), num_regs, block_size) == 0:
        cta_limit_regs = 0

    cta_limit_warps = _warps_limit(d, block_size)
    cta_limit_blocks = _max_blocks_per_multiprocessor(d)
    cta_limit_smem = _smem_limit(d, dynamic_smem_size, shmem_limit_optin, max_dynamic_shared_size_bytes)
    cta_limit_virtual = INT_MAX  # virtualResourceCount = 0

    cta_limit = min(cta_limit_regs, cta_limit_smem, cta_limit_warps, cta_limit_blocks, cta_limit_virtual)
    factors: list[str] = []
    if cta_limit == cta_limit_warps:
        factors.append("warps")
    if cta_limit == cta_limit_regs:
        factors.append("registers")
    if cta_limit == cta_limit_smem:
        factors.append("shared_memory")
    if cta_limit == cta_limit_blocks:
        factors.append("blocks")
    # (OCC_LIMIT_VIRTUAL_RESOURCES never applies: the warps and blocks limits are always finite.)

    # From Hopper on, block barriers limit occupancy (numBlockBarriers = 1).
    if d.major >= 9:
        num_block_barriers = 1
        cta_limit_bars = _block_barriers_available(d, cta_limit_blocks) // num_block_barriers
        cta_limit = min(cta_limit_bars, cta_limit)
        if cta_limit == cta_limit_bars:
            factors.append("barriers")
    else:
        cta_limit_bars = INT_MAX

    return OccupancyResult(
        active_blocks_per_sm=cta_limit,
        limiting_factors=tuple(factors),
        block_limit_warps=cta_limit_warps,
        block_limit_registers=cta_limit_regs,
        block_limit_shared_memory=cta_limit_smem,
        block_limit_blocks=cta_limit_blocks,
        block_limit_barriers=cta_limit_bars,
    )
