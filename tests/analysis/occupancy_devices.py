"""Devices and allocation arithmetic shared by the occupancy tests (test_occupancy.py,
test_occupancy_unknown.py): deviceProperties as Kineto writes them, and the register and shared
memory granularities that CUDA 13's `cuda_occupancy.h` documents."""

from __future__ import annotations

import dataclasses

from warpwatch.model import DeviceProperties

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

RESERVE = 1024  # reservedSharedMemPerBlock from compute capability 8.0 on
REGS_PER_SUB_PARTITION = 65536 // 4  # 4 sub-partitions per SM
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


def warps_of(threads: int) -> int:
    return -(-threads // 32)


def regs_per_warp(regs_per_thread: int) -> int:
    """Registers allocated per warp: regs x 32, rounded up to 256."""
    return -(-regs_per_thread * 32 // 256) * 256


def smem_allocated(bytes_: int, granularity: int = 128, reserve: int = RESERVE) -> int:
    return -(-(bytes_ + reserve) // granularity) * granularity
