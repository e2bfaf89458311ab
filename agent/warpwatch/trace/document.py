"""What a document's pieces add up to: the `Document` (header, kernel launches, Trace span, GPU
extent, hip calls), and the `Collector` that adds each piece's contribution (`schema.Scanned`)
in document order, whichever reader decoded it (`pieces` in this process, `parallel` in several).

The collector holds the memory cap: a read that would keep more kernel launches than
`ReadLimits.max_launches` stops with a `too_large` TraceError. An error found in a skimmed piece
(whose events were not all counted) cannot name the index of its event: the collector raises
`Restart`, and the document is read again strictly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import TraceError
from ..model import KernelLaunch
from ..runtime.membudget import ReadLimits
from .messages import over_budget
from .schema import HEADER_FIELDS, FastHeader, Header, Scanned


@dataclass
class Document:
    """A decoded trace before device properties are resolved."""

    header: Header
    has_events: bool
    launches: list[KernelLaunch] = field(default_factory=list)
    span: tuple[float, float] | None = None
    gpu_lo: float = math.inf
    gpu_hi: float = -math.inf
    hip_calls: dict[int, tuple[str, Any, Any]] = field(default_factory=dict)
    """correlation -> (name, grid, block) of the hip* runtime events."""
    correlations: list[int] = field(default_factory=list)
    events: int = 0
    span_seen: bool = False


class Restart(Exception):
    """An error message needs the index of an event in a skimmed document: read it again, strictly."""


class Collector:
    """Adds up the pieces' contributions, in document order, under the launch cap."""

    def __init__(self, path: str, limits: ReadLimits) -> None:
        self.path = path
        self.limits = limits
        self.doc = Document(Header(), False)
        self.exact = True
        """Every event counted so far (no skimmed piece)."""

    def add(self, s: Scanned) -> None:
        """Add the next piece. A skimmed piece (`events` -1: only its GPU events were decoded)
        leaves the events uncounted, so an error message can no longer give an event's index:
        Restart."""
        doc = self.doc
        skimmed = s.events < 0
        if (s.bad is not None or (not doc.span_seen and s.span_bad is not None)) and (skimmed or not self.exact):
            raise Restart
        self.exact = self.exact and not skimmed
        if s.bad is not None:
            index, message = s.bad
            raise TraceError(self.path, message.format(index=doc.events + index))
        if not doc.span_seen and s.span_bad is not None:
            index, message = s.span_bad
            raise TraceError(self.path, message.format(index=doc.events + index))
        if not doc.span_seen and s.span is not None:
            doc.span = s.span
            doc.span_seen = True
        doc.events += max(0, s.events)
        doc.has_events = doc.has_events or s.events > 0
        doc.launches += s.launches
        if s.hip_calls:
            doc.hip_calls.update((c, (name, grid, block)) for c, name, grid, block in s.hip_calls)
        doc.correlations += s.correlations
        doc.gpu_lo = min(doc.gpu_lo, s.gpu_lo)
        doc.gpu_hi = max(doc.gpu_hi, s.gpu_hi)
        cap = self.limits.max_launches
        if cap is not None and len(doc.launches) > cap:
            raise TraceError(self.path, over_budget(cap, self.limits.budget), kind="too_large")

    def header(self, top: Header | FastHeader) -> None:
        for key in HEADER_FIELDS:
            if getattr(top, key) is not None:
                setattr(self.doc.header, key, getattr(top, key))


def has_amd_device(props: object) -> bool:
    """An AMD device in `deviceProperties`: its trace's runtime events say the grid's unit."""
    entries = props if isinstance(props, list) else [props]
    return any(isinstance(e, dict) and (e.get("warpSize") == 64 or "AMD" in str(e.get("name"))) for e in entries)
