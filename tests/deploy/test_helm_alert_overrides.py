"""Alerts tuned from the chart's values (`prometheusRule.disabled`, `.rules`, `.runbookUrlBase`,
`.evidenceUrl`): the real helm renders them, the real promtool checks and unit-tests the result.

The oracle is the generator itself: a threshold or `for` set from Helm must render the very rule
that `warpwatch dashboards build --set` renders for the same setting, byte for byte.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.helm import (
    CHART,
    MONITORING,
    NAMESPACE,
    PROMTOOL,
    RELEASE,
    ROOT,
    SchemaError,
    _helm,
    needs_helm,
    schema_errors,
)
from warpwatch.dashboards import deploysync, helmrules, rules, ruletests
from warpwatch.dashboards.alerts import alerts
from warpwatch.dashboards.settings import DEFAULT_SETTINGS, Settings

needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not found (Debian package prometheus)")
RUNBOOKS = "https://wiki.example.com/runbooks/"
EVIDENCE = "https://warpwatch.example.com/{namespace}/{pod}/evidence"

OVERRIDES: dict[str, Any] = {
    "runbookUrlBase": RUNBOOKS,
    "evidenceUrl": EVIDENCE,
    "disabled": {"WarpwatchCaptureDutyHigh": True},
    "rules": {
        "WarpwatchWindowsFailing": {"threshold": 0.8},
        "WarpwatchKernelLaunchChanged": {"for": "20m"},
        "WarpwatchNoRecentWindow": {"severity": "critical", "labels": {"team": "ml-infra"}},
    },
}
"""The documented example (helm/warpwatch/README.md, "Tuning the alerts")."""
TUNED = dataclasses.replace(
    DEFAULT_SETTINGS,
    runbook_url_base=RUNBOOKS,
    evidence_url=EVIDENCE,
    failing_ratio=0.8,
    launch_changed_for="20m",
)
"""The settings `warpwatch dashboards build --set` would take for the same threshold, `for` and URLs."""
RELABELLED = {"severity": "critical", "team": "ml-infra"}


@cache
def _render_text(values_yaml: str) -> str:
    return _helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        *MONITORING,
        "--show-only",
        "templates/prometheusrule.yaml",
        "-f",
        "-",
        stdin=values_yaml,
    ).stdout


def spec_of(prometheus_rule: dict[str, Any], **values: Any) -> dict[str, Any]:
    """The `spec` of the PrometheusRule rendered with `prometheusRule` values."""
    text = _render_text(yaml.safe_dump({"prometheusRule": prometheus_rule, **values}, sort_keys=True))
    (obj,) = [doc for doc in yaml.safe_load_all(text) if doc]
    assert obj["kind"] == "PrometheusRule"
    spec: dict[str, Any] = obj["spec"]
    return spec


def by_alert(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def tuned_expected() -> list[dict[str, Any]]:
    """TUNED's groups without the disabled alert and with the relabelled one's labels."""
    groups = rules.prometheus_groups(TUNED)
    for group in groups:
        group["rules"] = [r for r in group["rules"] if r.get("alert") != "WarpwatchCaptureDutyHigh"]
        for r in group["rules"]:
            if r.get("alert") == "WarpwatchNoRecentWindow":
                r["labels"] = dict(RELABELLED)
    return groups


def promtool(*args: str, cwd: Path | None = None) -> subprocess.Popen[str]:
    assert PROMTOOL is not None
    return subprocess.Popen([PROMTOOL, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def check_rules(tmp_path: Path, spec: dict[str, Any]) -> str:
    """`promtool check rules` on the rendered spec; its output."""
    path = tmp_path / "rendered-rules.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    proc = promtool("check", "rules", str(path))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


# ---------------------------------------------------------------------------------------------
# the generator: warpwatch.dashboards.helmrules


def test_every_alert_but_the_artefact_one_has_a_threshold() -> None:
    names = {a.name for a in alerts()}
    assert set(helmrules.THRESHOLDS) == names - {"WarpwatchProfilerArtifacts"}
    doc = helmrules.tuning()
    for name, entry in doc["alerts"].items():
        if name in helmrules.THRESHOLDS:
            assert "[[threshold|" in entry["expr"], name
            assert entry["threshold"] == helmrules.THRESHOLDS[name].value(DEFAULT_SETTINGS)
        assert entry["annotations"]["runbook_url"].startswith("[[runbook_url_base]]"), name


def test_the_tokens_at_their_generated_texts_give_the_generated_alerts() -> None:
    generated = {
        n: {"expr": r["expr"], "annotations": r["annotations"]}
        for n, r in by_alert(rules.prometheus_groups(DEFAULT_SETTINGS)).items()
    }
    assert helmrules.filled_alerts(helmrules.tuning()) == generated
    chart_file = CHART / "files" / "alerts" / "warpwatch-rules.tuning.yaml"
    assert chart_file.read_text(encoding="utf-8") == helmrules.dump(helmrules.tuning())


def test_a_setting_in_a_form_no_token_covers_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # WarpwatchWindowsFailing's description quotes failing_ratio as a percentage
    monkeypatch.setattr(helmrules, "FORMATS", {k: v for k, v in helmrules.FORMATS.items() if k != "pct"})
    with pytest.raises(helmrules.HelmRulesError, match=r"annotations.description carries a tunable setting"):
        helmrules.tuning()


def test_the_tunable_form_is_refused_for_rules_built_with_other_settings(tmp_path: Path) -> None:
    (tmp_path / "dashboards" / "alerts").mkdir(parents=True)
    (tmp_path / "dashboards" / "a.json").write_text("{}\n")
    source = tmp_path / deploysync.RULES_SOURCE
    source.write_text(rules.dump_yaml(rules.rules_file(Settings(failing_ratio=0.6))))
    (tmp_path / deploysync.RULES_TEMPLATE).parent.mkdir(parents=True)
    (tmp_path / deploysync.RULES_TEMPLATE).write_text("# reads the tunable form\n")
    with pytest.raises(deploysync.DeploySyncError, match=r"built with --set\?"):
        deploysync.sync(tmp_path)
    assert any("built with --set?" in line for line in deploysync.check(tmp_path))
    source.write_text(rules.dump_yaml(rules.rules_file(DEFAULT_SETTINGS)))
    assert tmp_path / deploysync.RULES_TUNING in deploysync.sync(tmp_path)
    assert deploysync.check(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# helm template + promtool check rules


@needs_helm
@needs_promtool
def test_the_defaults_render_the_generated_rules(tmp_path: Path) -> None:
    spec = spec_of({})
    assert spec["groups"] == rules.prometheus_groups(DEFAULT_SETTINGS)
    committed = yaml.safe_load((ROOT / "dashboards" / "alerts" / "warpwatch-rules.yaml").read_text(encoding="utf-8"))
    assert spec["groups"] == committed["groups"]
    assert f"SUCCESS: {sum(len(g['rules']) for g in spec['groups'])} rules found" in check_rules(tmp_path, spec)


@needs_helm
@needs_promtool
def test_the_documented_overrides_change_exactly_what_they_name(tmp_path: Path) -> None:
    spec = spec_of(OVERRIDES)
    assert spec["groups"] == tuned_expected()
    got, default = by_alert(spec["groups"]), by_alert(rules.prometheus_groups(DEFAULT_SETTINGS))
    assert "WarpwatchCaptureDutyHigh" not in got and len(got) == len(default) - 1
    assert got["WarpwatchWindowsFailing"]["expr"].endswith("> 0.8")
    assert "(bound 80%)" in got["WarpwatchWindowsFailing"]["annotations"]["description"]
    launch, launch_default = got["WarpwatchKernelLaunchChanged"], default["WarpwatchKernelLaunchChanged"]
    assert (launch["for"], launch_default["for"]) == ("20m", "10m")
    assert "--since 35m" in got["WarpwatchKernelLaunchChanged"]["annotations"]["evidence"]  # for + 15m
    assert got["WarpwatchNoRecentWindow"]["labels"] == RELABELLED
    assert got["WarpwatchSlowsServing"]["annotations"]["evidence_url"] == (
        "https://warpwatch.example.com/{{ $labels.namespace }}/{{ $labels.pod }}/evidence"
    )
    for name, rule in got.items():
        assert rule["annotations"]["runbook_url"].startswith(RUNBOOKS), name
        untouched = ("WarpwatchWindowsFailing", "WarpwatchKernelLaunchChanged", "WarpwatchNoRecentWindow")
        if name not in untouched:
            assert rule["expr"] == default[name]["expr"] and rule["for"] == default[name]["for"], name
            assert rule["labels"] == default[name]["labels"], name
    check_rules(tmp_path, spec)


def _yaml_block(page: Path, heading: str) -> Any:
    """The first yaml block under `heading` of a page."""
    text = page.read_text(encoding="utf-8")
    section = text[text.index(f"\n## {heading}\n") :]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None, f"no yaml block under {heading!r}"
    return yaml.safe_load(block[1])


def test_the_chart_readme_documents_these_overrides_and_lists_the_alerts() -> None:
    assert _yaml_block(CHART / "README.md", "Tuning the alerts") == {"prometheusRule": OVERRIDES}
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    assert helmrules.alerts_table() in readme


@needs_helm
def test_the_example_of_docs_kubernetes_renders_what_it_says() -> None:
    example = _yaml_block(ROOT / "docs" / "kubernetes.md", "Tuning the alerts from Helm values")["prometheusRule"]
    got = by_alert(spec_of(example)["groups"])
    settings = dataclasses.replace(
        DEFAULT_SETTINGS,
        failing_ratio=0.8,
        failing_for="30m",
        runbook_url_base=example["runbookUrlBase"],
        evidence_url=example["evidenceUrl"],
    )
    expected = by_alert(rules.prometheus_groups(settings))
    expected["WarpwatchWindowsFailing"]["labels"] = {"severity": "critical", "team": "ml-infra"}
    del expected["WarpwatchCaptureDutyHigh"]
    assert got == expected


THRESHOLD_CASES = {
    "WarpwatchKernelOccupancyRegressed": 0.6,
    "WarpwatchOccupancyRegressed": 0.65,
    "WarpwatchKernelLaunchChanged": 0.1,
    "WarpwatchOccupancyDisagreesWithNvml": 0.3,
    "WarpwatchWindowTooShort": 0.75,
    "WarpwatchNoRecentWindow": 5,
    "WarpwatchWindowsFailing": 0.85,
    "WarpwatchCaptureDutyHigh": 0.15,
    "WarpwatchSlowsServing": 1.25,
}


@needs_helm
def test_each_threshold_renders_what_the_generator_renders_for_its_setting() -> None:
    got = by_alert(spec_of({"rules": {n: {"threshold": v} for n, v in THRESHOLD_CASES.items()}})["groups"])
    assert set(THRESHOLD_CASES) == set(helmrules.THRESHOLDS)
    for name, value in THRESHOLD_CASES.items():
        t = helmrules.THRESHOLDS[name]
        kind = type(getattr(DEFAULT_SETTINGS, t.setting))
        settings = dataclasses.replace(DEFAULT_SETTINGS, **{t.setting: kind(value - t.offset)})
        assert got[name] == by_alert(rules.prometheus_groups(settings))[name], name


FOR_CASES = {  # alert: (its `for` from Helm, the setting that gives it that `for`)
    "WarpwatchOccupancyRegressed": ("45m", {"degraded_for": "45m"}),
    "WarpwatchKernelOccupancyRegressed": ("1h", {"degraded_for": "55m"}),  # + inhibit_margin 5m
    "WarpwatchKernelLaunchChanged": ("1h30m", {"launch_changed_for": "1h30m"}),
    "WarpwatchWindowsFailing": ("2d", {"failing_for": "2d"}),
}


@needs_helm
def test_each_for_renders_what_the_generator_renders_with_its_evidence_span() -> None:
    got = by_alert(spec_of({"rules": {n: {"for": f} for n, (f, _) in FOR_CASES.items()}})["groups"])
    for name, (duration, setting) in FOR_CASES.items():
        expected = by_alert(rules.prometheus_groups(dataclasses.replace(DEFAULT_SETTINGS, **setting)))[name]
        assert got[name]["for"] == duration
        assert got[name] == expected, name


@needs_helm
def test_the_scrapes_deployment_label_reaches_the_evidence_loops() -> None:
    label = "app.kubernetes.io/name"
    got = spec_of({}, serviceMonitor={"deploymentLabel": label})["groups"]
    assert got == rules.prometheus_groups(dataclasses.replace(DEFAULT_SETTINGS, deployment_pod_label=label))
    assert f"get pods -l {label}=" in by_alert(got)["WarpwatchOccupancyRegressed"]["annotations"]["evidence"]


@needs_helm
@needs_promtool
def test_disabling_a_groups_only_alert_drops_the_group(tmp_path: Path) -> None:
    spec = spec_of({"disabled": {"WarpwatchProfilerArtifacts": True, "WarpwatchWindowsFailing": False}})
    assert "warpwatch-profiler" not in [g["name"] for g in spec["groups"]]
    assert "WarpwatchWindowsFailing" in by_alert(spec["groups"])
    check_rules(tmp_path, spec)


def _render_failure(values: dict[str, Any]) -> str:
    stdin = yaml.safe_dump({"prometheusRule": values})
    proc = _helm("template", RELEASE, str(CHART), *MONITORING, "-f", "-", check=False, stdin=stdin)
    assert proc.returncode != 0
    return proc.stdout + proc.stderr


@needs_helm
@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"disabled": {"WarpwatchWindowFailing": True}},
            "prometheusRule.disabled.WarpwatchWindowFailing: no such alert; the alerts are WarpwatchCaptureDutyHigh, ",
        ),
        ({"rules": {"Foo": {"for": "5m"}}}, "prometheusRule.rules.Foo: no such alert"),
        (
            {"rules": {"WarpwatchProfilerArtifacts": {"threshold": 1}}},
            "prometheusRule.rules.WarpwatchProfilerArtifacts.threshold: this alert compares against no threshold",
        ),
    ],
    ids=["misspelt-disabled", "unknown-alert", "no-threshold"],
)
def test_an_override_of_no_alert_fails_the_render_and_names_it(values: dict[str, Any], message: str) -> None:
    assert message in _render_failure(values)


@needs_helm
@pytest.mark.parametrize(
    ("values", "complaint"),
    [
        (
            {"rules": {"WarpwatchWindowsFailing": {"for": "15 minutes"}}},
            SchemaError("prometheusRule.rules.WarpwatchWindowsFailing.for", "pattern"),
        ),
        (
            {"rules": {"WarpwatchWindowsFailing": {"treshold": 0.8}}},
            SchemaError("prometheusRule.rules.WarpwatchWindowsFailing.treshold", "additional"),
        ),
        (
            {"rules": {"WarpwatchWindowsFailing": {"threshold": "high"}}},
            SchemaError("prometheusRule.rules.WarpwatchWindowsFailing.threshold", "type", "number"),
        ),
    ],
    ids=["bad-for", "misspelt-key", "threshold-not-a-number"],
)
def test_the_schema_rejects_malformed_overrides(values: dict[str, Any], complaint: SchemaError) -> None:
    assert complaint in schema_errors(_render_failure(values))


# ---------------------------------------------------------------------------------------------
# promtool test rules: the generated unit tests against the rendered rules


def _tuned_unit_tests() -> dict[str, Any]:
    """The unit tests generated for TUNED, with what the values change beyond the settings: the
    disabled alert expected silent everywhere, the relabelled one with its labels."""
    doc = ruletests.promtool_tests(TUNED, "warpwatch-rules.yaml")
    for test in doc["tests"]:
        for check in test.get("alert_rule_test", []):
            if check["alertname"] == "WarpwatchCaptureDutyHigh":
                check["exp_alerts"] = []
            if check["alertname"] == "WarpwatchNoRecentWindow":
                for exp in check["exp_alerts"]:
                    exp["exp_labels"].update(RELABELLED)
    return doc


@needs_helm
@needs_promtool
@pytest.mark.slow
def test_the_generated_unit_tests_pass_on_the_tuned_render(tmp_path: Path) -> None:
    """The unit tests generated for the tuned settings pass on the chart's tuned render. (The default
    render is the generated rule file byte for byte, `test_the_defaults_render_the_generated_rules`,
    whose unit tests tests/dashboards/test_rules.py runs.)"""
    (tmp_path / "warpwatch-rules.yaml").write_text(
        yaml.safe_dump(spec_of(OVERRIDES), sort_keys=False), encoding="utf-8"
    )
    (tmp_path / "warpwatch-rules.test.yaml").write_text(rules.dump_yaml(_tuned_unit_tests()), encoding="utf-8")
    proc = promtool("test", "rules", "warpwatch-rules.test.yaml", cwd=tmp_path)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:]
    assert "SUCCESS" in out, out
