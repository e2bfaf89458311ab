"""Memory budget: what one trace read may take, from the cgroup memory limit the process runs in.

A sidecar is killed by the kernel when its cgroup goes over `memory.max` (v2) or
`memory.limit_in_bytes` (v1). The reader's memory is bounded by construction apart from two
terms (see `trace/`): the pieces being decoded (`workers` x `piece_bytes` x `PIECE_FACTOR`) and
the kernel launches a window keeps (`BYTES_PER_LAUNCH` each, reading and analysis together).
The budget sizes the first and caps the second, so that a window can never take the process
past its limit: a window that would keep more launches is refused as `too_large`, with these
figures in its message, before it gets there.

The figures are measured (benchmarks/README.md, "memory budget"): PIECE_FACTOR is the peak
memory of decoding one piece over its size, BYTES_PER_LAUNCH the peak growth per kept launch
of `read_trace` + `analyze` on the reference trace, both rounded up.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MiB = 1024**2
DEFAULT_MAX_BYTES = 2 * 1024**3
"""Default cap on a trace's decompressed size (2 GiB); configurable everywhere it is used."""
PIECE_BYTES = 8 * MiB
"""Largest piece of a document decoded at once (smaller under a tight limit)."""
MIN_PIECE_BYTES = 1 * MiB
PIECE_FACTOR = 6
"""Peak memory of decoding one piece, in piece sizes (the piece, its decoded events, a repair copy)."""
BYTES_PER_LAUNCH = 500
"""Peak memory per kept kernel launch, one process: the launch, its share of the reader's lists,
the analysis (measured: 280-370 bytes)."""
BYTES_PER_LAUNCH_FORKED = 750
"""The same when worker processes decode: each launch also crosses from a worker to the parent
(msgpack in a scratch file, then decoded again; measured: ~700 bytes)."""
HEADROOM = 0.10
"""Share of the limit left unplanned (allocator slack, the HTTP server, a scrape)."""
MIN_HEADROOM = 24 * MiB
_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class ReadLimits:
    """What one `read_trace` may use. `max_launches` None: no cap (no memory limit known)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_launches: int | None = None
    piece_bytes: int = PIECE_BYTES
    workers: int | None = None
    """Processes that decode pieces; None: one per core (when the process may fork)."""
    budget: str = ""
    """The figures behind `max_launches`, for the message of a refused window."""
    cancel: Callable[[], bool] | None = None
    """Checked between pieces: True abandons the read (an agent that is stopping)."""


@dataclass(frozen=True)
class CgroupLimit:
    """The memory limit that applies to this process, and where it was read."""

    limit: int | None
    where: str
    """The file read (`.../memory.max`), or why there is none."""


def cgroup_memory_limit(proc: Path = Path("/proc/self"), root: Path = Path("/sys/fs/cgroup")) -> CgroupLimit:
    """The tightest memory limit of this process's cgroup and its ancestors, v2 or v1.

    In a container (its own cgroup namespace) `/proc/self/cgroup` says `0::/` and `root` is the
    container's own cgroup, whose `memory.max` is the pod's limit for it.
    """
    try:
        lines = (proc / "cgroup").read_text().splitlines()
    except OSError as exc:
        return CgroupLimit(None, f"no /proc/self/cgroup ({exc.strerror or exc})")
    found: list[tuple[int, Path]] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, rel = parts
        if hierarchy == "0" and controllers == "":
            found += _walk(root, rel, "memory.max")
        elif "memory" in controllers.split(","):
            found += _walk(root / "memory", rel, "memory.limit_in_bytes")
    limited = [(v, p) for v, p in found if v < _UNLIMITED]
    if not limited:
        where = found[0][1] if found else root
        return CgroupLimit(None, f"no memory limit ({where})")
    value, path = min(limited)
    return CgroupLimit(value, str(path))


def _walk(base: Path, rel: str, name: str) -> list[tuple[int, Path]]:
    """The limits in `name` from the cgroup `rel` up to the root of `base` (those that exist)."""
    out = []
    rel_path = Path(rel.strip() or "/")
    for parent in [rel_path, *rel_path.parents]:
        f = base / str(parent).lstrip("/") / name
        try:
            text = f.read_text().strip()
        except OSError:
            continue
        out.append((_UNLIMITED if text == "max" else int(text), f))
    return out


def rss_bytes(proc: Path = Path("/proc/self")) -> int:
    """Resident memory of this process now (0 where unknown)."""
    try:
        return int((proc / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@dataclass(frozen=True)
class MemoryBudget:
    """The share of the cgroup limit that one window's read and analysis may take."""

    cgroup: CgroupLimit

    @classmethod
    def detect(cls) -> MemoryBudget:
        return cls(cgroup_memory_limit())

    @property
    def limit(self) -> int | None:
        return self.cgroup.limit

    def read_limits(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        workers: int | None = None,
        in_use: int | None = None,
        cancel: Callable[[], bool] | None = None,
    ) -> ReadLimits:
        """The limits of the next read, the process holding `in_use` bytes (default: its RSS now).

        Without a limit: `max_bytes` only. With one: pieces of at most 1/32 of what is free,
        as many decoding processes as the free memory allows, and the rest for launches.
        """
        limit = self.cgroup.limit
        if limit is None:
            return ReadLimits(max_bytes=max_bytes, workers=workers, cancel=cancel)
        used = rss_bytes() if in_use is None else in_use
        headroom = max(MIN_HEADROOM, int(limit * HEADROOM))
        free = max(0, limit - headroom - used)
        piece = max(MIN_PIECE_BYTES, min(PIECE_BYTES, free // (4 * PIECE_FACTOR) // MiB * MiB))
        per_worker = piece * PIECE_FACTOR
        allowed = max(1, (free // 2) // per_worker)  # pieces never take more than half
        n = min(allowed, _cores() if may_fork() else 1) if workers is None else min(workers, allowed)
        launch_bytes = free - n * per_worker
        each = BYTES_PER_LAUNCH if n == 1 else BYTES_PER_LAUNCH_FORKED
        max_launches = max(0, launch_bytes // each)
        budget = (
            f"memory limit {limit / MiB:,.0f} MiB ({self.cgroup.where}), {used / MiB:,.0f} MiB in use, "
            f"{headroom / MiB:,.0f} MiB headroom, {n} x {piece * PIECE_FACTOR / MiB:,.0f} MiB for pieces: "
            f"{launch_bytes / MiB:,.0f} MiB for launches at {each} bytes each"
        )
        return ReadLimits(
            max_bytes=max_bytes,
            max_launches=max_launches,
            piece_bytes=piece,
            workers=n if workers is not None or n < _cores() else None,
            budget=budget,
            cancel=cancel,
        )

    def describe(self, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
        """Figures for the agent's start log line."""
        limits = self.read_limits(max_bytes, workers=1)
        return {
            "memory_limit_mib": None if self.limit is None else round(self.limit / MiB),
            "memory_limit_from": self.cgroup.where,
            "max_launches_per_window": limits.max_launches,
            "piece_mib": limits.piece_bytes // MiB,
            "max_trace_bytes": max_bytes,
        }


def may_fork() -> bool:
    """Whether the process may fork decoding workers: forking a process that runs other threads
    can deadlock the child (locks held by them)."""
    return (
        hasattr(os, "fork") and threading.active_count() == 1 and threading.current_thread() is threading.main_thread()
    )


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
