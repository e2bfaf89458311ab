"""Issue 47: every multi-value variable opens on All, and a `cluster` variable (setting `cluster_label`)
narrows every raw-series selector of every board through the one place selectors are built; the
recorded series only where the recording rules keep the label (it is one of `fleet_labels`)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from support.boardkit import boards
from warpwatch.dashboards.boards import all_queries
from warpwatch.dashboards.grafana import all_dashboards
from warpwatch.dashboards.settings import DASHBOARD_VARIABLE_DEFAULTS, Settings
from warpwatch.errors import ConfigError

RAW = re.compile(r"(?<![\w:])(warpwatch_\w+)(\{[^}]*\})?")
"""A raw series selector: a metric name not part of a record's `level:name:operation`."""
RECORD = re.compile(r"(?<![\w:])([a-z_]+:warpwatch_[\w:]*)(\{[^}]*\})?")
CLUSTER = 'cluster=~"$cluster"'
FLEET_WITH_CLUSTER = "cluster,namespace,deployment"


def exprs(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target, annotation query and variable query of a board, but the
    cluster variable's own (it is what the others are narrowed by)."""
    out = [
        (f"{p['title']}/{t['refId']}", t["expr"]) for p in board["panels"] for t in p.get("targets", []) if t["expr"]
    ]
    out += [(f"annotation {a['name']}", a["expr"]) for a in board["annotations"]["list"] if "expr" in a]
    out += [
        (f"variable {v['name']}", v["query"])
        for v in board["templating"]["list"]
        if v["type"] == "query" and v["name"] != "cluster"
    ]
    return out


def selectors(s: Settings, pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """(where, selector) for every series `pattern` finds on every board built with `s`."""
    return [
        (f"{uid}: {where}: {name}{matchers}", matchers)
        for uid, board in all_dashboards(s).items()
        for where, expr in exprs(board)
        for name, matchers in pattern.findall(expr)
    ]


def test_every_multi_value_variable_opens_on_all() -> None:
    """includeAll with `.*` (the queries match with `=~`, and `.*` matches a missing label too), and All
    selected: a board opens on every pod, GPU and kernel, not on whichever Grafana lists first."""
    for uid, board in boards().items():
        variables = [v for v in board["templating"]["list"] if v["type"] == "query"]
        assert variables, uid
        for v in variables:
            where = f"{uid}/{v['name']}"
            assert v["multi"] and v["includeAll"], where
            assert v["allValue"] == ".*", where
            assert v["current"] == {"selected": True, "text": ["All"], "value": ["$__all"]}, where


def test_the_cluster_matcher_is_on_every_raw_selector_exactly_when_cluster_label_is_set() -> None:
    with_cluster = selectors(Settings(cluster_label="cluster"), RAW)
    assert len(with_cluster) > 50
    for where, matchers in with_cluster:
        assert CLUSTER in matchers, where
    for where, matchers in selectors(Settings(), RAW):
        assert "cluster" not in matchers, where


def test_records_carry_the_cluster_matcher_only_where_the_rules_keep_the_label() -> None:
    """The recording rules sum by `fleet_labels`: a cluster label outside them is gone from the records
    (or, a Thanos external label, not known to be on them), so only raw series are narrowed."""
    assert selectors(Settings(cluster_label="cluster"), RECORD)
    for where, matchers in selectors(Settings(cluster_label="cluster"), RECORD):
        assert "cluster" not in matchers, where
    kept = selectors(Settings(cluster_label="cluster", fleet_labels=FLEET_WITH_CLUSTER), RECORD)
    assert kept
    for where, matchers in kept:
        assert CLUSTER in matchers, where


def test_the_cluster_variable_comes_first_and_reads_the_configured_label() -> None:
    for uid, board in all_dashboards(Settings(cluster_label="k8s_cluster")).items():
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[:2] == ["datasource", "cluster"], uid
        cluster = board["templating"]["list"][1]
        assert cluster["query"] == cluster["definition"] == "label_values(warpwatch_build_info, k8s_cluster)"
        assert cluster["includeAll"] and cluster["allValue"] == ".*" and cluster["multi"], uid
        namespace = next(v for v in board["templating"]["list"] if v["name"] == "namespace")
        assert namespace["query"] == 'label_values(warpwatch_build_info{k8s_cluster=~"$cluster"}, namespace)'
    for uid, board in boards().items():
        assert "cluster" not in [v["name"] for v in board["templating"]["list"]], uid


def test_cluster_queries_are_plain_promql_once_substituted() -> None:
    """`$cluster` is one of the variables `all_queries` substitutes (`.*`, Grafana's All)."""
    assert DASHBOARD_VARIABLE_DEFAULTS["$cluster"] == ".*"
    queries = all_queries(Settings(cluster_label="cluster"))
    assert any('cluster=~".*"' in expr for _, expr in queries)
    for where, expr in queries:
        assert "$" not in expr, f"{where}: {expr}"


def test_cluster_label_must_be_a_label_name() -> None:
    with pytest.raises(ConfigError, match=r"cluster_label='my cluster': not a label name"):
        Settings(cluster_label="my cluster")
