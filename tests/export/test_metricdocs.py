"""docs/metrics.md lists every metric the agent exports, with its labels (the names are public API)."""

from __future__ import annotations

import re
from pathlib import Path

from warpwatch.export import metricdefs as md

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented(m: md.MetricDef, text: str) -> bool:
    """The exposed name followed by exactly its labels (`name{a,b}`, or the bare name when it has none)."""
    listed = md.exposed_name(m) + ("{" + ",".join(m.labels) + "}" if m.labels else "")
    return re.search(re.escape(listed) + r"(?![\w{])", text) is not None


def test_every_metric_is_listed_with_its_labels() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [m.name for m in (*md.ALL, *md.AGENT) if not documented(m, text)]
    assert missing == []


def test_a_metric_listed_with_other_labels_is_not_documented() -> None:
    m = md.SERVED_SLOWDOWN
    assert documented(m, "    warpwatch_served_slowdown_ratio{source}   # x")
    assert not documented(m, "    warpwatch_served_slowdown_ratio   # x")
    assert not documented(m, "    warpwatch_served_slowdown_ratio{source,gpu}")
