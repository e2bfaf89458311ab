"""File descriptors: raise the soft RLIMIT_NOFILE at start, and size the HTTP server from it.

Every HTTP connection holds a descriptor. Containers and systemd units often start a process with
a soft limit of 1024, or 256 (macOS, some CI runners), and a hard limit far above: a flood of
idle connections then takes every descriptor, and the agent can no longer list its trace folder,
open a trace, reach an engine or accept the scraper. So the agent raises its soft limit to the
hard one (what any process may do, as Go's runtime does since 1.19), and the HTTP server holds
at most what is left after `FD_RESERVE` for everything else.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import replace

from ..logs import event
from .connection import Limits

log = logging.getLogger("warpwatch.service")

FD_RESERVE = 64
"""Descriptors kept from the HTTP server for the rest of the agent: stdio, the event loops'
epoll and self-pipes, trace files being read, the folder being listed, the kineto-daemon socket,
HTTP clients of vllm:/sglang: sources, NVML's device files (an idle agent holds about 20)."""
MIN_CONNECTIONS = 8
"""The fewest connections the server is sized for, however low the limit (a scraper must get in)."""


def raise_nofile() -> tuple[int, int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit; (soft before, soft now, hard). Logged once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    now = soft
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        # An unlimited hard limit is refused above the kernel's nr_open: ask for that, not infinity.
        target = hard if hard != resource.RLIM_INFINITY else _nr_open(soft)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            now = target
        except (ValueError, OSError) as exc:
            event(log, "fd_limit_unchanged", logging.WARNING, soft=soft, hard=hard, error=str(exc))
    event(log, "fd_limit", soft_was=soft, soft=now, hard=hard)
    return soft, now, hard


def _nr_open(soft: int) -> int:
    try:
        with open("/proc/sys/fs/nr_open", encoding="ascii") as f:
            return max(soft, int(f.read().strip()))
    except (OSError, ValueError):
        return soft


def http_limits(limits: Limits, soft: int | None = None) -> Limits:
    """`limits` with `max_connections` and `refusals_in_flight` lowered so that, at most, the HTTP
    server holds `soft - FD_RESERVE` descriptors (each connection one, each refusal whose 503 is
    being flushed one, the accepted socket being decided one); `soft` defaults to the current soft
    limit."""
    if soft is None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return limits
    budget = max(soft - FD_RESERVE - 1, 2 * MIN_CONNECTIONS)
    refusals = min(limits.refusals_in_flight, budget // 4)
    connections = max(MIN_CONNECTIONS, min(limits.max_connections, budget - refusals))
    # Evicted sockets not yet closed: what the budget leaves, plus a quarter of the reserve (an
    # idle agent holds about 20 of its 64).
    evictions = max(1, min(limits.evictions_per_yield, budget - refusals - connections + FD_RESERVE // 4))
    return replace(limits, max_connections=connections, refusals_in_flight=refusals, evictions_per_yield=evictions)
