"""The build step: a file or bytes -> a decoded document -> a `Trace`.

`read_trace` picks the path: a plain file that the caller may fork for is decoded by several
processes (`parallel`); everything else (gzip files, bytes, a process running other threads,
a document the parallel path cannot cut) is read piece by piece in this process (`pieces`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Any

import msgspec

from ..errors import TraceError
from ..model import DeviceProperties, KernelLaunch, Trace, TraceWindow
from ..runtime.membudget import DEFAULT_MAX_BYTES, MemoryBudget, ReadLimits
from . import parallel
from .devices import device_properties
from .document import Document
from .pieces import read_document
from .streams import BytesStream, FileStream
from .values import dims, is_int


def read_trace(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    gpu_properties: Mapping[int, DeviceProperties] | None = None,
    workers: int | None = None,
    limits: ReadLimits | None = None,
) -> Trace:
    """Read one trace file (`.json` or gzip-compressed) and parse it.

    `limits` bound the read (decompressed size, kept launches, piece size, processes); by
    default they come from the memory limit of the process's cgroup (`membudget`), with
    `max_bytes` (default `DEFAULT_MAX_BYTES`) and `workers` (default: one per core) applied.
    A file over a limit fails with a `too_large` TraceError. `gpu_properties` supply device
    properties for traces that carry none (the trace's own take precedence).
    """
    name = os.fspath(path)
    limits = _limits(limits, max_bytes, workers)
    fd = _open(name)
    try:
        doc = parallel.read_file(fd, name, limits)
        if doc is None:
            os.lseek(fd, 0, os.SEEK_SET)
            doc = read_document(FileStream(fd, name, limits.max_bytes), limits)
    except OSError as exc:
        raise TraceError(name, f"cannot read: {exc.strerror or exc}", kind="io_error") from None
    finally:
        os.close(fd)
    return build(doc, name, gpu_properties)


def parse_trace(
    data: bytes,
    path: str = "<bytes>",
    *,
    gpu_properties: Mapping[int, DeviceProperties] | None = None,
    workers: int | None = None,
    limits: ReadLimits | None = None,
) -> Trace:
    """Decode a trace document (object with `traceEvents`, or a bare event list) held in memory."""
    limits = _limits(limits, None, workers)
    doc = parallel.read_bytes(data, path, limits)
    if doc is None:
        doc = read_document(BytesStream(data, path, limits.max_bytes), limits)
    return build(doc, path, gpu_properties)


def _limits(limits: ReadLimits | None, max_bytes: int | None, workers: int | None) -> ReadLimits:
    if limits is not None:
        return limits
    return MemoryBudget.detect().read_limits(DEFAULT_MAX_BYTES if max_bytes is None else max_bytes, workers=workers)


def _open(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TraceError(path, "no such file", kind="io_error") from None
    except PermissionError:
        raise TraceError(path, "permission denied", kind="io_error") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}", kind="io_error") from None
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        os.close(fd)
        raise TraceError(path, "is a directory, not a trace file", kind="io_error")
    return fd


def build(doc: Document, path: str, gpu_properties: Mapping[int, DeviceProperties] | None) -> Trace:
    """A decoded document -> the Trace (device properties resolved, hip calls attached)."""
    header = doc.header
    if not doc.has_events and header.deviceProperties is None and header.schemaVersion is None:
        raise TraceError(path, "not a Kineto trace (no traceEvents, deviceProperties or schemaVersion)")
    warnings: list[str] = []
    devices = device_properties(header.deviceProperties, warnings)
    for dev_id, props in (gpu_properties or {}).items():
        devices.setdefault(dev_id, props)
    rank, world = _distributed(header.distributedInfo)
    base = header.baseTimeNanoseconds
    launches = doc.launches
    if doc.hip_calls:
        launches = _with_launch_api(launches, doc.correlations, doc.hip_calls)
    return Trace(
        path=path,
        devices=devices,
        launches=tuple(launches),
        span=None if doc.span is None else TraceWindow(doc.span[0], doc.span[1], "trace_span"),
        gpu_extent=(doc.gpu_lo, doc.gpu_hi) if doc.gpu_lo <= doc.gpu_hi else None,
        rank=rank,
        world_size=world,
        schema_version=header.schemaVersion if is_int(header.schemaVersion) else None,
        base_time_ns=base if is_int(base) else None,
        warnings=tuple(warnings),
    )


def _with_launch_api(
    launches: list[KernelLaunch], correlations: list[int], calls: Mapping[int, tuple[str, Any, Any]]
) -> list[KernelLaunch]:
    """Each launch with the HIP call that made it (`launch_api`, by `correlation`), and the call's
    grid and block where the kernel event has none (ROCm 6 writes them on the call only)."""
    out = []
    dims_of: dict[int, tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]] = {}
    for launch, c in zip(launches, correlations, strict=True):
        call = calls.get(c)
        if call is not None:
            name, grid, block = call
            if c not in dims_of:  # (lists again after a trip between processes)
                dims_of[c] = (dims(list(grid)) if grid else None, dims(list(block)) if block else None)
            g, b = dims_of[c]
            launch = msgspec.structs.replace(
                launch,
                launch_api=name,
                grid=launch.grid if launch.grid is not None else g,
                block=launch.block if launch.block is not None else b,
            )
        out.append(launch)
    return out


def _distributed(info: object) -> tuple[int | None, int | None]:
    if not isinstance(info, dict):
        return None, None
    rank = info.get("rank")
    world = info.get("world_size")
    return (rank if is_int(rank) else None, world if is_int(world) else None)
