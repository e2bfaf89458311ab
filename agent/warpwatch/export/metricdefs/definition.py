"""What one metric definition holds, the label sets most share, and the name a scrape shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram", "info"]


@dataclass(frozen=True, slots=True)
class MetricDef:
    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""


GPU = ("gpu",)
KERNEL = ("gpu", "kernel")


def exposed_name(m: MetricDef) -> str:
    """The sample name as scraped: counters carry `_total`."""
    return m.name + "_total" if m.type == "counter" else m.name
