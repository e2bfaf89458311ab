"""The committed dashboards as the dashboard tests read them, and the metric names a PromQL
expression selects."""

from __future__ import annotations

import json
import re
from typing import Any

from warpwatch.dashboards.boards import dashboards

from .paths import ROOT

COMMITTED = ROOT / "dashboards"


def boards() -> dict[str, dict[str, Any]]:
    return {d.uid: json.loads((COMMITTED / d.filename).read_text()) for d in dashboards()}


def panels() -> list[tuple[str, dict[str, Any]]]:
    return [(uid, p) for uid, board in boards().items() for p in board["panels"]]


_NOT_METRICS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers that are not functions, keywords, label
    names (in matchers or grouping clauses), durations or numbers."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\boffset\s+-?\w+", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        before = e[m.start() - 1] if m.start() else " "
        if before.isdigit() or before == ".":
            continue  # exponent of a number such as 1e3
        if e[m.end() :].lstrip().startswith("(") or m.group(0).lower() in _NOT_METRICS:
            continue
        names.add(m.group(0))
    return names
