"""Every metric name README.md and docs/*.md write is one the agent exports (export/metricdefs/):
a renamed or removed metric that a page still names fails here. (That every exported metric is
defined in docs/metrics.md is tests/export/test_metricdocs.py.)"""

from __future__ import annotations

import re

from support.docblocks import PAGES
from warpwatch.export import metricdefs as md

NAME = re.compile(r"(?<![\w:.-])warpwatch_[a-z0-9_]+")
"""A metric name as pages write it; one after `:` is inside a recording rule's name, not a metric."""
SERIES_SUFFIXES = ("", "_bucket", "_sum", "_count")


def unknown(text: str, exported: set[str]) -> list[str]:
    out = []
    for name in NAME.findall(text):
        if any(name.removesuffix(s) in exported for s in SERIES_SUFFIXES if name.endswith(s)):
            continue
        if name.endswith("_") and any(e.startswith(name) for e in exported):  # `warpwatch_daemon_*`
            continue
        out.append(name)
    return out


def test_every_metric_a_page_names_is_exported() -> None:
    exported = {md.exposed_name(m) for m in (*md.ALL, *md.AGENT)}
    problems = [
        f"{page.name}: {name}" for page in PAGES for name in unknown(page.read_text(encoding="utf-8"), exported)
    ]
    assert not problems, problems


def test_a_name_the_agent_does_not_export_is_caught() -> None:
    exported = {"warpwatch_windows_total", "warpwatch_window_processing_seconds"}
    text = (
        "`warpwatch_windows_total{outcome}`, warpwatch_window_processing_seconds_bucket, "
        "`warpwatch_daemon_*`, warpwatch_window_total, pod:warpwatch_overhead_budget_used:ratio"
    )
    assert unknown(text, exported) == ["warpwatch_daemon_", "warpwatch_window_total"]
