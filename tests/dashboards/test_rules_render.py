"""Alert rules rendered for Grafana's alerting (file provisioning and API), and the pieces the rule
files are written with: Prometheus templates, durations, promtool's value notation."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from warpwatch.dashboards import rules, ruletests
from warpwatch.dashboards.alerts import alerts
from warpwatch.dashboards.settings import (
    DEFAULT_SETTINGS,
    duration_seconds,
    format_duration,
)

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "dashboards" / "alerts"
ALERT_NAMES = [a.name for a in alerts()]


def load(name: str) -> Any:
    return yaml.safe_load((ALERTS / name).read_text())


def prometheus_rules() -> list[dict[str, Any]]:
    """The alerting rules (the recording rules are `recording()`)."""
    return [r for g in load("warpwatch-rules.yaml")["groups"] for r in g["rules"] if "alert" in r]


def test_grafana_alerting_file_structure() -> None:
    doc = load("grafana-alerting.yaml")
    assert doc["apiVersion"] == 1
    uids, titles = [], []
    prom = {r["alert"]: r for r in prometheus_rules()}
    for group in doc["groups"]:
        assert {"orgId", "name", "folder", "interval", "rules"} <= set(group)
        duration_seconds(group["interval"])
        for rule in group["rules"]:
            assert {
                "uid",
                "title",
                "condition",
                "data",
                "for",
                "labels",
                "annotations",
                "noDataState",
                "execErrState",
            } <= set(rule)
            uids.append(rule["uid"])
            titles.append(rule["title"])
            assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", rule["uid"])
            assert duration_seconds(rule["for"]) >= 0
            assert rule["noDataState"] in {"OK", "NoData", "Alerting", "KeepLast"}
            assert rule["execErrState"] in {"OK", "Error", "Alerting", "KeepLast"}
            refs = [d["refId"] for d in rule["data"]]
            assert rule["condition"] in refs and len(refs) == len(set(refs))
            for d in rule["data"]:
                assert {"refId", "relativeTimeRange", "datasourceUid", "model"} <= set(d)
                assert d["model"]["refId"] == d["refId"]
                assert set(d["relativeTimeRange"]) == {"from", "to"}
            query = rule["data"][0]
            assert query["datasourceUid"] == DEFAULT_SETTINGS.datasource_uid
            # One source: the same PromQL, for-duration and severity as the Prometheus rule.
            source = prom[rule["title"]]
            assert query["model"]["expr"] == source["expr"]
            assert (rule["for"], rule["labels"]) == (source["for"], source["labels"])
            for name, text in rule["annotations"].items():
                assert not re.search(r"\$value\b", text), "Grafana has $values.A.Value, not $value"
                assert text == source["annotations"][name].replace("$value", "$values.A.Value")
            expressions = {d["refId"]: d["model"] for d in rule["data"][1:]}
            assert expressions["B"]["expression"] == "is_number($A) || is_nan($A) || is_inf($A)"
            assert expressions["C"]["expression"] == "B" and expressions["C"]["type"] == "threshold"
    assert len(uids) == len(set(uids)) == len(ALERT_NAMES)
    assert sorted(titles) == sorted(ALERT_NAMES)


def test_grafana_api_rules_carry_folder_and_group() -> None:
    api = rules.grafana_api_rules(DEFAULT_SETTINGS)
    assert [r["title"] for r in api] == ALERT_NAMES
    for r in api:
        assert r["folderUID"] == DEFAULT_SETTINGS.folder_uid and r["ruleGroup"].startswith("warpwatch-")


@pytest.mark.parametrize(
    ("template", "value", "expected"),
    [
        ('{{ printf "%.0f" $value }} launches', 30.000000000000004, "30 launches"),
        ('{{ printf "%.2f" $value }}x', 0.5599999999999999, "0.56x"),
        ("{{ humanizePercentage $value }}", 0.2, "20%"),
        ("{{ humanizePercentage $value }}", 1 / 3, "33.33%"),
        ("{{ $labels.kernel }} on GPU {{$labels.gpu}}{{ $labels.absent }}", 0.0, "gemm on GPU 3"),
    ],
)
def test_render_template_matches_prometheus(template: str, value: float, expected: str) -> None:
    assert rules.render_template(template, {"kernel": "gemm", "gpu": "3"}, value) == expected


def test_render_template_refuses_what_it_cannot_predict() -> None:
    with pytest.raises(ValueError, match=r"unsupported template action \{\{ \$value \| humanize \}\}"):
        rules.render_template("{{ $value | humanize }}", {}, 1.0)


def test_durations() -> None:
    assert duration_seconds("1d") == 86400 and duration_seconds("1h30m") == 5400
    assert duration_seconds("500ms") == 0.5
    assert format_duration(86400 + 40 * 60) == "1d40m" and format_duration(60) == "1m"
    with pytest.raises(ValueError, match="not a Prometheus duration: '5 min'"):
        duration_seconds("5 min")


def test_promtool_value_notation() -> None:
    assert ruletests.gauge((None, 3), (0.6, 4), (0.3, 1)) == "_x3 0.6x3 0.3"
    assert ruletests.counter(0, 2, 5) == "0+2x4"
    assert ruletests.ramp((6, 3), (1.5, 2), missing=2) == "_x2 0 6+6x2 19.5+1.5x1"
