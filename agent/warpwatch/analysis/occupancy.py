"""CUDA's occupancy calculator, ported to pure Python.

A faithful port of `cudaOccMaxActiveBlocksPerMultiprocessor` from CUDA 13's header-only
`cuda_occupancy.h` (`__CUDA_OCC_MAJOR__` 12, `__CUDA_OCC_MINOR__` 1: compute capabilities 3.x and
5.0 up to 12.1), checked case by case against the real header by `tests/analysis/test_occupancy_vs_cuda.py`.

Settings (spec `max_active_blocks_per_sm`)
------------------------------------------
- the launch's `shared memory` (static + dynamic, as the trace writes it) is passed as *dynamic*
  shared memory; the function's static `sharedSizeBytes` is 0;
- function attributes: `numRegs` = registers per thread, `maxThreadsPerBlock` = INT_MAX (as Kineto
  sets it: no per-function block-size limit), partitioned global caching off, `numBlockBarriers` = 1,
  no virtual resources;
- `shmem_limit="optin"` (the spec): `FUNC_SHMEM_LIMIT_OPTIN` with `maxDynamicSharedSizeBytes` =
  `sharedMemPerBlockOptin`; `shmem_limit="default"` (Kineto's own setting, which is why Kineto
  reports 0 % for every kernel above ~48 KiB): `FUNC_SHMEM_LIMIT_DEFAULT` with
  `maxDynamicSharedSizeBytes` = 0;
- default device state, as C++ `cudaOccDeviceState{}` builds it (and Kineto passes it):
  `CACHE_PREFER_NONE`, `SHAREDMEM_CARVEOUT_DEFAULT`, so an SM offers its whole
  `sharedMemPerMultiprocessor` (rounded up to the architecture's next carveout size);
- `reservedSharedMemPerBlock` (not in traces) = 1024 bytes for compute capability >= 8.0, else 0.

When the header fails, and what we return
-----------------------------------------
`max_active_blocks` returns None (unknown, never 0) exactly where the header returns an error, plus
where the header cannot be called at all:

- AMD devices (`vendor == "amd"`): the CUDA calculator does not apply;
- a property the calculator needs is missing (None): registers and shared memory per block and per
  SM always, `sharedMemPerBlockOptin` with `shmem_limit="optin"`;
- an input that the header's C types cannot hold: a negative byte count (the header's `size_t`
  fields and `dynamicSmemSize`), an `int` argument or property outside [-2^31, 2^31 - 1];
- `CUDA_OCC_ERROR_INVALID_INPUT`: block size <= 0; any of maxThreadsPerBlock,
  maxThreadsPerMultiprocessor, regsPerBlock, regsPerMultiprocessor, warpSize, sharedMemPerBlock,
  sharedMemPerMultiprocessor, numSms not positive; registers per thread < 0; from Volta on, a
  `sharedMemPerMultiprocessor` above the architecture's largest shared-memory carveout (96 KiB on
  7.0, 64 KiB on 7.5, 164 KiB on 8.0/8.7, 100 KiB on other 8.x and 12.x, 228 KiB on 9.0-11.x), or
  a block allowed more shared memory (opt-in limit + reserve) than that largest carveout and
  using it (only with inconsistent device properties);
- `CUDA_OCC_ERROR_UNKNOWN_DEVICE`: a compute capability the header does not know: a major other
  than 3 and 5-12 (so 13.0 and newer), 10.x/11.x with a minor other than 0, 1, 3, and 12.x with a
  minor other than 0, 1.

The header *succeeds with 0 active blocks* (and so do we; spec: "a launch whose block cannot fit
at all has max_active_blocks_per_sm = 0") when the block is larger than the device's
maxThreadsPerBlock (warps limit 0), registers per thread exceed the architecture's maximum (255
or 256) or a block's registers exceed regsPerBlock (registers limit 0), or a block's shared
memory exceeds the per-block limit: above `sharedMemPerBlockOptin` with "optin", above
`sharedMemPerBlock` with "default" (shared-memory limit 0). The limiting factors are then the
limits equal to 0.

Limits with no bound are reported as the header reports them, `NO_LIMIT` (INT_MAX): the registers
limit with 0 registers per thread, the shared-memory limit with 0 bytes allocated per block
(compute capability < 8.0 without shared memory), the barriers limit below compute capability 9.0
(the header only counts barriers from Hopper on).

All arithmetic is exact. The header computes in 32-bit `int`; it overflows (undefined behaviour in
C) only for inputs in the billions (block sizes near 2^31, shared memory above 2 GiB), never for
a legal launch; there we give the exact answer, 0 active blocks.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from ..model import DeviceProperties
from .cudaocc import (
    INT_MAX,
    INT_MIN,
    NO_LIMIT,
    SIZE_MAX,
    OccDevice,
    OccError,
    OccupancyResult,
    max_active_blocks_per_multiprocessor,
)

__all__ = ["NO_LIMIT", "OccupancyResult", "max_active_blocks", "reserved_shared_mem_per_block"]


def reserved_shared_mem_per_block(compute_major: int) -> int:
    """The driver's shared memory reserved per block: 1 KiB from compute capability 8.0 on, else 0."""
    return 1024 if compute_major >= 8 else 0


def max_active_blocks(
    props: DeviceProperties,
    block_size: int,
    registers_per_thread: int,
    shared_memory: int,
    *,
    shmem_limit: Literal["optin", "default"] = "optin",
) -> OccupancyResult | None:
    """Resident blocks per SM for one launch, as CUDA's occupancy calculator computes them.

    `block_size` is T (threads per block), `shared_memory` the launch's static + dynamic shared
    memory in bytes. Returns None where the calculator does not apply or the header reports an
    error (see the module docstring for the exact cases), and a result with
    `active_blocks_per_sm == 0` where the header says the block cannot run at all.
    Results are cached: the same inputs cost one dictionary lookup.
    """
    if shmem_limit not in ("optin", "default"):
        raise ValueError(f"shmem_limit must be 'optin' or 'default', not {shmem_limit!r}")
    return _cached(props, block_size, registers_per_thread, shared_memory, shmem_limit == "optin")


@lru_cache(maxsize=1 << 16)
def _cached(
    props: DeviceProperties, block_size: int, registers: int, shared_memory: int, optin: bool
) -> OccupancyResult | None:
    result = _calculate(props, block_size, registers, shared_memory, optin)
    return result if isinstance(result, OccupancyResult) else None


def _calculate(
    props: DeviceProperties, block_size: int, registers: int, shared_memory: int, optin: bool
) -> OccupancyResult | int | None:
    """The port itself: an `OccupancyResult`, a `cudaOccError` code, or None (not callable)."""
    if props.vendor != "nvidia":
        return None
    regs_per_block = props.regs_per_block
    regs_per_sm = props.regs_per_sm
    smem_per_block = props.shared_mem_per_block
    smem_per_sm = props.shared_mem_per_sm
    smem_optin = props.shared_mem_per_block_optin
    if regs_per_block is None or regs_per_sm is None or smem_per_block is None or smem_per_sm is None:
        return None
    if optin and smem_optin is None:
        return None
    dev = OccDevice(
        major=props.compute_major,
        minor=props.compute_minor,
        max_threads_per_block=props.max_threads_per_block,
        max_threads_per_sm=props.max_threads_per_sm,
        regs_per_block=regs_per_block,
        regs_per_sm=regs_per_sm,
        warp_size=props.warp_size,
        smem_per_block=smem_per_block,
        smem_per_sm=smem_per_sm,
        num_sms=props.num_sms,
        smem_per_block_optin=smem_optin if smem_optin is not None else 0,
        reserved_smem_per_block=reserved_shared_mem_per_block(props.compute_major),
    )
    ints = (
        dev.major,
        dev.minor,
        dev.max_threads_per_block,
        dev.max_threads_per_sm,
        dev.regs_per_block,
        dev.regs_per_sm,
        dev.warp_size,
        dev.num_sms,
        block_size,
        registers,
    )
    sizes = (dev.smem_per_block, dev.smem_per_sm, dev.smem_per_block_optin, shared_memory)
    if not all(INT_MIN <= v <= INT_MAX for v in ints) or not all(0 <= v <= SIZE_MAX for v in sizes):
        return None
    try:
        return max_active_blocks_per_multiprocessor(
            dev,
            block_size=block_size,
            num_regs=registers,
            dynamic_smem_size=shared_memory,
            shmem_limit_optin=optin,
            max_dynamic_shared_size_bytes=dev.smem_per_block_optin if optin else 0,
        )
    except OccError as error:
        return error.code
