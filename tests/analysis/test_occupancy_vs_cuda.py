"""The occupancy port agrees exactly with CUDA 13's own `cuda_occupancy.h`.

A small C++ driver (`tests/analysis/cuda_occ/occ_driver.cpp`) is compiled with g++ against the real header
(header only: no GPU, no CUDA runtime) and fed every case on stdin in one batch. For each case
the active blocks per SM, the limiting-factors bitmask and all five block limits must be equal,
and where the header returns an error the port must return the same error code (and the public
`max_active_blocks` None).

Cases: seeded random launches on realistic devices of every architecture the header knows
(plus fuzzed and unsupported devices, to exercise its error paths), in both shared-memory limit
modes; and every distinct kernel launch of the public Kineto traces in `../shared/traces/` that
carry `deviceProperties` (sources and licences: `../shared/traces/SOURCES.md`).

Skipped, with the reason, when g++ or CUDA 13's `cuda_occupancy.h` is not installed; point
`CUDA_OCC_INCLUDE` at a directory holding the header to use another copy.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest

from support.cudaocc import (
    GXX,
    HEADER_DIR,
    Case,
    _compare,
    _report,
)
from warpwatch.analysis.occupancy import (
    reserved_shared_mem_per_block,
)
from warpwatch.model import DeviceProperties

KIB = 1024


if GXX is None:
    pytest.skip("g++ is not installed: cannot compile the cuda_occupancy.h driver", allow_module_level=True)
if HEADER_DIR is None:
    pytest.skip(
        "CUDA 13's cuda_occupancy.h (__CUDA_OCC_MAJOR__ 12.1) not found under /usr/local/cuda-13*/include, "
        "$CUDA_HOME/include, /usr/local/cuda/include or $CUDA_OCC_INCLUDE",
        allow_module_level=True,
    )

"""(device, block size, registers per thread, shared memory, optin)."""


# --- Random cases --------------------------------------------------------------------------------


def _nv(
    name: str,
    major: int,
    minor: int,
    sms: int,
    threads_per_sm: int,
    smem_per_sm: int,
    optin: int,
    regs_per_sm: int = 65536,
) -> DeviceProperties:
    return DeviceProperties(
        id=0,
        name=name,
        compute_major=major,
        compute_minor=minor,
        num_sms=sms,
        warp_size=32,
        max_threads_per_block=1024,
        max_threads_per_sm=threads_per_sm,
        regs_per_block=65536,
        regs_per_sm=regs_per_sm,
        shared_mem_per_block=48 * KIB,
        shared_mem_per_sm=smem_per_sm,
        shared_mem_per_block_optin=optin,
    )


# Device properties as cudaGetDeviceProperties reports them, one or two per compute capability.
REAL_DEVICES: tuple[DeviceProperties, ...] = (
    _nv("Tesla K40", 3, 5, 15, 2048, 48 * KIB, 48 * KIB),
    _nv("Tesla K80", 3, 7, 13, 2048, 112 * KIB, 48 * KIB, regs_per_sm=131072),
    _nv("Tesla M40", 5, 2, 24, 2048, 96 * KIB, 48 * KIB),
    _nv("Quadro GP100", 6, 0, 56, 2048, 64 * KIB, 48 * KIB),
    _nv("Tesla P40", 6, 1, 30, 2048, 96 * KIB, 48 * KIB),
    _nv("Tesla V100", 7, 0, 80, 2048, 96 * KIB, 96 * KIB),
    _nv("Jetson AGX Xavier", 7, 2, 8, 2048, 96 * KIB, 96 * KIB),
    _nv("GeForce RTX 2080 Ti", 7, 5, 68, 1024, 64 * KIB, 64 * KIB),
    _nv("A100", 8, 0, 108, 2048, 164 * KIB, 163 * KIB),
    _nv("GeForce RTX 3090", 8, 6, 82, 1536, 100 * KIB, 99 * KIB),
    _nv("Jetson AGX Orin", 8, 7, 16, 1536, 164 * KIB, 163 * KIB),
    _nv("GeForce RTX 4090", 8, 9, 128, 1536, 100 * KIB, 99 * KIB),
    _nv("H100", 9, 0, 132, 2048, 228 * KIB, 227 * KIB),
    _nv("B200", 10, 0, 148, 2048, 228 * KIB, 227 * KIB),
    _nv("B300", 10, 3, 148, 2048, 228 * KIB, 227 * KIB),
    _nv("Jetson Thor", 11, 0, 20, 1536, 228 * KIB, 227 * KIB),
    _nv("GeForce RTX 5090", 12, 0, 170, 1536, 100 * KIB, 99 * KIB),
    _nv("DGX Spark GB10", 12, 1, 48, 1536, 100 * KIB, 99 * KIB),
)
# Compute capabilities the header does not know (CUDA_OCC_ERROR_UNKNOWN_DEVICE).
UNSUPPORTED_DEVICES: tuple[DeviceProperties, ...] = (
    _nv("future", 13, 0, 148, 2048, 228 * KIB, 227 * KIB),
    _nv("unknown Blackwell", 10, 2, 148, 2048, 228 * KIB, 227 * KIB),
    _nv("unknown consumer Blackwell", 12, 2, 48, 1536, 100 * KIB, 99 * KIB),
    _nv("Fermi", 2, 0, 16, 1536, 48 * KIB, 48 * KIB),
)

EDGE_BLOCK_SIZES = (
    1,
    2,
    31,
    32,
    33,
    47,
    48,
    63,
    64,
    65,
    95,
    96,
    97,
    127,
    128,
    129,
    192,
    255,
    256,
    257,
    384,
    511,
    512,
    513,
    640,
    767,
    768,
    769,
    1000,
    1023,
    1024,
    1025,
    1056,
    1536,
    2048,
)
EDGE_REGISTERS = (
    0,
    1,
    2,
    7,
    8,
    9,
    16,
    24,
    31,
    32,
    33,
    40,
    48,
    56,
    63,
    64,
    65,
    72,
    80,
    96,
    127,
    128,
    168,
    232,
    254,
    255,
    256,
    257,
    300,
)


def _fuzz_device(rng: random.Random) -> DeviceProperties:
    """A realistic device with one to three properties changed to odd (but C-representable) values."""
    device = rng.choice(REAL_DEVICES + UNSUPPORTED_DEVICES)
    choices: dict[str, tuple[int, ...]] = {
        "compute_major": tuple(range(15)),
        "compute_minor": tuple(range(10)),
        "max_threads_per_block": (-1, 0, 64, 512, 1024, 2048),
        "max_threads_per_sm": (-1, 0, 512, 1024, 1536, 2048, 4096),
        "regs_per_block": (0, 32768, 65536, 131072),
        "regs_per_sm": (-5, 0, 32768, 65536, 131072),
        "warp_size": (0, 16, 32, 64),
        "shared_mem_per_block": (0, 16 * KIB, 48 * KIB, 64 * KIB),
        "shared_mem_per_sm": (
            0,
            1,
            16 * KIB,
            32 * KIB,
            64 * KIB,
            96 * KIB,
            100 * KIB,
            132 * KIB,
            164 * KIB,
            228 * KIB,
            256 * KIB,
            rng.randrange(300 * KIB),
        ),
        "num_sms": (-1, 0, 1, 108),
        "shared_mem_per_block_optin": (0, 48 * KIB, 99 * KIB, 163 * KIB, 227 * KIB, rng.randrange(300 * KIB)),
    }
    changed = rng.sample(sorted(choices), rng.randint(1, 3))
    changes: dict[str, Any] = {name: rng.choice(choices[name]) for name in changed}
    return dataclasses.replace(device, **changes)


def _block_size(rng: random.Random, device: DeviceProperties) -> int:
    kind = rng.random()
    if kind < 0.25:
        return rng.randint(1, 1024)
    if kind < 0.50:
        return 32 * rng.randint(1, 32)
    if kind < 0.70:
        return rng.choice(EDGE_BLOCK_SIZES)
    if kind < 0.85:
        return rng.randint(1, max(1, device.max_threads_per_block) + 64)
    if kind < 0.99:
        return 1 << rng.randint(0, 10)
    return rng.choice((0, -1, -32))


def _registers(rng: random.Random, block_size: int) -> int:
    kind = rng.random()
    if kind < 0.30:
        return rng.randint(0, 255)
    if kind < 0.50:
        return rng.choice(EDGE_REGISTERS)
    if kind < 0.75:
        return rng.randint(16, 128)
    if kind < 0.99:
        # around the largest count whose warps (rounded to 4 sub-partitions) fit in 64 Ki registers
        warps = max(1, -(-block_size // 32))
        fit = 65536 // (-(-warps // 4) * 4 * 32)
        return max(0, fit + rng.choice((-9, -8, -1, 0, 1, 8, 9)))
    return -1


def _shared_memory(rng: random.Random, device: DeviceProperties) -> int:
    optin = device.shared_mem_per_block_optin or 0
    per_block = device.shared_mem_per_block or 0
    reserve = reserved_shared_mem_per_block(device.compute_major)
    kind = rng.random()
    if kind < 0.25:
        return 0
    if kind < 0.45:
        return rng.randint(0, optin + 4096)
    if kind < 0.70:
        carveouts = (8, 16, 32, 64, 96, 100, 132, 164, 196, 228)
        boundary = rng.choice(
            (
                per_block,
                optin,
                per_block - reserve,
                optin - reserve,
                *(k * KIB // n - reserve for k in carveouts for n in (1, 2, 3)),
            )
        )
        return max(0, boundary + rng.choice((-257, -256, -129, -128, -127, -1, 0, 1, 127, 128, 129, 256, 257)))
    if kind < 0.85:
        return rng.randint(0, 16 * KIB)
    return KIB * rng.randint(0, optin // KIB + 2)


def _random_cases(count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.85:
            device = rng.choice(REAL_DEVICES)
        elif kind < 0.88:
            device = rng.choice(UNSUPPORTED_DEVICES)
        else:
            device = _fuzz_device(rng)
        block_size = _block_size(rng, device)
        registers = _registers(rng, block_size)
        shared_memory = _shared_memory(rng, device)
        for optin in (True, False):
            cases.append((device, block_size, registers, shared_memory, optin))
    return cases


RANDOM_LAUNCHES = 12_000  # each in both shared-memory limit modes


@pytest.mark.slow
def test_random_launches_on_every_architecture_agree_with_the_header(
    occ_driver: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = _random_cases(RANDOM_LAUNCHES, seed=20260413)
    outcome = _compare(occ_driver, cases, "random cases")
    ccs = sorted({(d.compute_major, d.compute_minor) for d, *_ in cases if d in REAL_DEVICES})
    _report(
        capsys,
        f"{len(cases)} random cases ({RANDOM_LAUNCHES} launches x 2 shared-memory limit modes, "
        f"{len(ccs)} real compute capabilities {ccs[0][0]}.{ccs[0][1]}..{ccs[-1][0]}.{ccs[-1][1]} plus fuzzed "
        f"and unsupported devices) agree exactly: {outcome['positive']} with active blocks > 0, "
        f"{outcome['zero']} with 0, {outcome['errors']} header errors",
    )
    # the random cases do reach every kind of outcome
    assert min(outcome.values()) > 100
    for optin in (True, False):
        assert {(d.compute_major, d.compute_minor) for d, *_, o in cases if o is optin} >= set(ccs)


def test_both_shared_memory_limit_modes_are_compared() -> None:
    cases = _random_cases(100, seed=1)
    assert sum(1 for *_, optin in cases if optin) == sum(1 for *_, optin in cases if not optin) == 100
