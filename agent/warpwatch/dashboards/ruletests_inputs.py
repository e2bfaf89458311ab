"""The input series of the promtool tests (`ruletests`, `ruletests_recording`, `ruletests_overhead`):
their step, the labels a scrape attaches, promtool's notation for their values, and a scenario."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError
from ..export import metricdefs as md
from .settings import Settings, duration_seconds, series

STEP_S = 60
"""Input series interval and evaluation interval of the tests."""


def gauge(*segments: tuple[float | None, int]) -> str:
    """promtool values: each (value, n) is n samples of value (None: n missing samples)."""
    parts = []
    for value, n in segments:
        if n <= 0:
            continue
        if value is None:
            parts.append(f"_x{n}")
        else:
            parts.append(_num(value) if n == 1 else f"{_num(value)}x{n - 1}")
    return " ".join(parts)


def counter(start: float, step: float, n: int) -> str:
    """promtool values: n samples start, start+step, ..."""
    return f"{_num(start)}+{_num(step)}x{n - 1}"


def _num(value: float) -> str:
    value = round(float(value), 9)
    return repr(int(value)) if value.is_integer() else repr(value)


def ramp(*parts: tuple[float, int], start: float = 0.0, missing: int = 0) -> str:
    """promtool values of a counter: `missing` absent samples, then `start`, then for each
    (step, n) n samples growing by `step` each."""
    out = [f"_x{missing}"] if missing else []
    out.append(_num(start))
    value = start
    for step, n in parts:
        if n <= 0:
            continue
        first = value + step
        out.append(_num(first) if n == 1 else f"{_num(first)}+{_num(step)}x{n - 1}")
        value += step * n
    return " ".join(out)


def selector_labels(s: Settings) -> dict[str, str]:
    """The equality matchers of `Settings.selector` as labels the input series must carry."""
    labels: dict[str, str] = {}
    for part in filter(str.strip, s.selector.split(",")):
        match = re.fullmatch(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"\s*', part)
        if match is None:
            raise ConfigError(
                f"selector {s.selector!r}: the promtool tests can only be generated for equality "
                'matchers such as job="warpwatch"'
            )
        labels[match.group(1)] = match.group(2)
    return labels


def input_series(metric: md.MetricDef, labels: Mapping[str, str]) -> str:
    return series(metric, *(f'{k}="{v}"' for k, v in sorted(labels.items())))


AGENT = {"namespace": "ml", "deployment": "llm", "pod": "llm-0"}
"""What the chart's ServiceMonitor attaches to every target from the pod (namespace, pod, and
deployment from `app.kubernetes.io/instance`), plus what any scrape attaches (job, instance)."""
SCRAPE = {"job": "warpwatch", "instance": "10.0.0.7:9946", "container": "warpwatch"}


@dataclass(frozen=True, slots=True)
class Firing:
    """One alert expected: the series labels it carries (without alertname/severity) and value."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Scenario:
    """Input series and what the alert does at `eval_min` minutes: fire `fires`, or nothing."""

    name: str
    series: tuple[tuple[str, str], ...]
    eval_min: int
    fires: tuple[Firing, ...] = ()
    silent_at: tuple[int, ...] = ()
    """Further evaluation times (minutes) at which nothing may fire yet (the `for` period)."""


def minutes(duration: str) -> int:
    """A duration in test steps (minutes), rounded up."""
    return math.ceil(duration_seconds(duration) / STEP_S)
