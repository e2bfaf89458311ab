"""The lenient readings of an event's typed fields: what a JSON value counts as when a trace writes an
int, a finite number, grid/block dimensions or a profiler's own figure (which may be a string)."""

from __future__ import annotations

import math


def is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def finite_number(v: object) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def dims(v: object) -> tuple[int, int, int] | None:
    if isinstance(v, list) and len(v) == 3 and all(is_int(x) and x >= 0 for x in v):
        return (v[0], v[1], v[2])
    return None


def reported(v: object) -> float | str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return v[:32]
    return None
