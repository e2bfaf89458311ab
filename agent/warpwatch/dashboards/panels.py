"""What a dashboard is made of, independent of grafanalib: panels, queries, columns, template
variables. `boards.py` defines the dashboards with these; `grafana.py` renders them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..export import metricdefs as md
from .queries import Level, record_series
from .settings import DASHBOARD_VARIABLE_DEFAULTS, Scope, Settings, dashboard_series, record_matchers, series


@dataclass(frozen=True, slots=True)
class Query:
    """One panel query. `instant` asks for a single value; `table` for Grafana's table format."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass(frozen=True, slots=True)
class Column:
    """A table column from one query (`Value #<refId>`): its title and unit."""

    ref_id: str
    title: str
    unit: str


PanelKind = Literal["timeseries", "stat", "table", "bargauge", "text"]


@dataclass(frozen=True, slots=True)
class PanelDef:
    """A panel, independent of grafanalib. Queries get refIds A, B, C... in order."""

    kind: PanelKind
    title: str
    description: str
    unit: str = ""
    queries: tuple[Query, ...] = ()
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    thresholds: tuple[tuple[str, float | None], ...] = (("green", None),)
    """(colour, from value) steps; the first starts at minus infinity (None)."""
    columns: tuple[Column, ...] = ()
    keep_labels: tuple[str, ...] = ()
    """Tables: label columns shown (others hidden)."""
    sort_by: str = ""
    content: str = ""
    """Text panels: Markdown."""
    mappings: tuple[tuple[str, str, str], ...] = ()
    """Value mappings (value, text, colour)."""
    links: tuple[tuple[str, str], ...] = ()
    """Data links (title, URL) on every field of the panel."""


def table_panel(
    title: str,
    description: str,
    cells: Sequence[tuple[str, str | None, str]],
    *,
    height: int,
    keep_labels: tuple[str, ...],
    sort_by: str = "",
) -> PanelDef:
    """A full-width table of instant queries, one value column per cell (expr, column title, unit).
    The columns are named by the refIds (A, B, C...) that the queries get in order, so the two
    cannot drift apart; a cell without a title (an info metric read for its labels) has no value
    column."""
    queries = tuple(Query(expr, instant=True, table=True) for expr, _, _ in cells)
    columns = tuple(Column(ref_id(i), name, unit) for i, (_, name, unit) in enumerate(cells) if name is not None)
    return PanelDef(
        "table",
        title,
        description,
        "none",
        queries,
        width=24,
        height=height,
        columns=columns,
        keep_labels=keep_labels,
        sort_by=sort_by,
    )


Variable = Literal["cluster", "namespace", "deployment", "pod", "gpu", "kernel"]


@dataclass(frozen=True, slots=True)
class VariableDef:
    """A query variable: the label `name` of `metric`, narrowed by the variables before it."""

    name: Variable
    label: str
    metric: md.MetricDef
    scope: Scope
    level: Level | None = None
    """Read the values from this tier's record of `metric` instead of the raw series (the fleet board)."""


VARIABLES: dict[str, VariableDef] = {
    "cluster": VariableDef("cluster", "Cluster", md.BUILD_INFO, "none"),
    "namespace": VariableDef("namespace", "Namespace", md.BUILD_INFO, "none"),
    "deployment": VariableDef("deployment", "Deployment", md.GPU_OBSERVED_SECONDS, "none", level="fleet"),
    "pod": VariableDef("pod", "Pod", md.BUILD_INFO, "none"),
    "gpu": VariableDef("gpu", "GPU", md.GPU_OBSERVED_SECONDS, "agent"),
    "kernel": VariableDef("kernel", "Kernel", md.KERNEL_SECONDS, "gpu"),
}


ALL_VALUE = ".*"
"""What a variable's All stands for in the queries' `=~` matchers: every value, and no label at all."""


def variable_selector(s: Settings, var: VariableDef) -> str:
    """The series selector of a variable's `label_values(...)` query (Grafana asks the label-values
    API with it as `match[]` when the datasource names its Prometheus version)."""
    if var.name == "cluster":
        return series(var.metric, s.selector)  # the first variable: nothing to narrow it by
    extra = ('namespace=~"$namespace"',) if var.name in ("pod", "deployment") else ()
    if var.level is not None:
        return record_series(s, var.metric, var.level, *record_matchers(s, var.scope), *extra)
    return dashboard_series(s, var.metric, var.scope, *extra)


def variable_query(s: Settings, var: VariableDef) -> str:
    """A variable's query: the values of its label (`cluster_label` for `cluster`)."""
    label = s.cluster_label if var.name == "cluster" else var.name
    return f"label_values({variable_selector(s, var)}, {label})"


@dataclass(frozen=True, slots=True)
class DashboardDef:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    panels: tuple[PanelDef, ...]
    tags: tuple[str, ...] = field(default=("warpwatch",))

    @property
    def filename(self) -> str:
        return f"{self.uid}.json"


def board_variables(s: Settings, dash: DashboardDef) -> tuple[VariableDef, ...]:
    """A board's variables in picker order: `cluster` first where `cluster_label` is set, then its own."""
    cluster = (VARIABLES["cluster"],) if s.cluster_label else ()
    return (*cluster, *(VARIABLES[name] for name in dash.variables))


@dataclass(frozen=True, slots=True)
class AnnotationDef:
    """A Grafana annotation from a Prometheus query: a marker at each step where `expr` is above 0."""

    name: str
    expr: str
    step: str
    """The query's step, and the shortest time between two markers of one series."""
    title: str
    text: str
    tag_keys: tuple[str, ...]
    color: str


AGENT_STARTS = "Agent starts"


def agent_starts(s: Settings, dash: DashboardDef) -> AnnotationDef:
    """A marker where an agent starts reporting: a `warpwatch_build_info` series (one per pod and
    version) present at a step and absent one step (`$__interval`) before, counted per pod, or per
    fleet labels on a board without pods. A rollout, a new version or a pod that was gone for a scrape
    or more; the zeros after `or` keep every running agent in the answer and draw nothing (Grafana
    marks values above 0)."""
    per_pod = "pod" in dash.variables
    scope: Scope = "agent" if per_pod else "fleet"
    where = ("namespace", "pod") if per_pod else s.fleet
    cluster = (s.cluster_label,) if s.cluster_label and s.cluster_label not in where else ()
    by = ", ".join((*cluster, *where, "version"))
    info = dashboard_series(s, md.BUILD_INFO, scope)
    return AnnotationDef(
        AGENT_STARTS,
        f"count by ({by}) (\n  {info}\n  unless {info} offset $__interval\n)\nor count by ({by}) ({info}) * 0",
        "1m",
        "warpwatch started: " + " / ".join("{{" + label + "}}" for label in where),
        "version {{version}}",
        ("version",),
        "blue",
    )


GPU_LEGEND = "{{pod}} GPU {{gpu}}"
KERNEL_LEGEND = "{{kernel}} (GPU {{gpu}})"
PERCENT = "percentunit"
COUNT = "short"
PER_SECOND = "cps"
SECONDS = "s"
RATE = "$__rate_interval"
"""The range of a panel's rates: Grafana's, at least the min interval plus a scrape."""
RANGE = "$__range"
"""The board's time range, for tables over the selected range."""


def substitute_variables(expr: str) -> str:
    """`expr` with Grafana's variables replaced by `DASHBOARD_VARIABLE_DEFAULTS` (plain PromQL)."""
    # Longest names first so `$__rate_interval` is not cut by a shorter prefix.
    for name in sorted(DASHBOARD_VARIABLE_DEFAULTS, key=len, reverse=True):
        expr = expr.replace(name, DASHBOARD_VARIABLE_DEFAULTS[name])
    return expr


def ref_id(index: int) -> str:
    """Grafana refId of the index-th query of a panel: A, B, ..."""
    return chr(ord("A") + index)
