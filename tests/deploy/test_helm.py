"""The Helm chart, rendered by the real helm binary and checked by real validators.

For each value set: `helm lint --strict`, `helm template` on a cluster that serves the Prometheus
Operator's API (`--api-versions monitoring.coreos.com/v1`) and on one that does not,
`kubernetes-validate --strict` for two Kubernetes versions, `namespace:` on every object, the
hardened securityContext on every container, no readiness gate by default, the native-sidecar
mode, the ServiceMonitor and NetworkPolicy against the Service and the pods, the PrometheusRule
through `promtool check rules`, the sidecar's WARPWATCH_* environment through the agent's own
config loader, and the README's values table against values.yaml.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.helm import (
    CHART,
    CRD_GROUP,
    FULLNAME,
    KUBE_VERSIONS,
    MONITORING,
    NAMESPACE,
    RELEASE,
    ROOT,
    VALUE_SETS,
    SchemaError,
    _helm,
    _render_text,
    _value_paths,
    needs_helm,
    render,
    schema_errors,
    values_of,
)
from warpwatch import __version__
from warpwatch.capture.registry import PREFIXES
from warpwatch.config.table import SETTINGS, SETTINGS_BY_NAME
from warpwatch.config.units import parse_duration

"""`helm template` on a cluster with the Prometheus Operator (helm install asks the cluster)."""


pytestmark = needs_helm

# Every setting of `warpwatch run` set, to exercise the value -> environment conversion: floats,
# whole numbers arriving as float64 (no exponent allowed), lists, booleans, paths.
"""What the agent must see for ALL_CONFIG (parsed the agent's way)."""


# ---------------------------------------------------------------------------------------------
# helpers


# ---------------------------------------------------------------------------------------------
# chart metadata and values


def test_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["appVersion"] == __version__
    assert chart["name"] == "warpwatch"


def test_values_config_keys_are_the_agent_settings_one_to_one() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    names = [s.name for s in SETTINGS]
    assert list(values["warpwatch"]["config"]) == names
    assert list(schema["properties"]["warpwatch"]["properties"]["config"]["properties"]) == names
    # The chart mounts the trace volume at trace_dir: the same folder the agent defaults to.
    assert Path(values["warpwatch"]["config"]["trace_dir"]) == SETTINGS_BY_NAME["trace_dir"].default


def _accepted_types(prop: dict[str, Any]) -> set[str]:
    if "enum" in prop:
        return {"null" if v is None else type(v).__name__ for v in prop["enum"]}
    if "oneOf" in prop:
        return set().union(*(_accepted_types(p) for p in prop["oneOf"]))
    t = prop["type"]
    return set(t) if isinstance(t, list) else {t}


KIND_TYPES = {
    "list": {"null", "array"},
    "duration": {"null", "string", "number"},
    "size": {"null", "string", "integer"},
    "bool": {"null", "boolean"},
    "int": {"null", "integer"},
    "str": {"null", "string"},
    "path": {"null", "string"},
    "ratio": {"null", "string", "number"},
}


def test_values_schema_types_follow_the_settings_kinds() -> None:
    props = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))["properties"]["warpwatch"][
        "properties"
    ]["config"]["properties"]
    for s in SETTINGS:
        prop = props[s.name]
        if s.kind == "choice":
            assert prop["enum"] == [None, *s.choices], s.name
        elif s.name == "trace_dir":
            assert prop["type"] == "string"  # required: the chart mounts the volume there
        else:
            assert _accepted_types(prop) == KIND_TYPES[s.kind], s.name
        assert s.env in prop["description"], s.name
    source_pattern = props["source"]["oneOf"][1]["items"]["pattern"]
    assert all(re.match(source_pattern, prefix) for prefix in PREFIXES)


@pytest.mark.parametrize("text", ["500ms", "10s", "2m", "1h", "1d", "1.5", "30", "1e3s", "1x", "2w", "h", "1 h", "-1s"])
def test_the_schemas_duration_pattern_takes_what_the_agent_takes(text: str) -> None:
    props = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))["properties"]["warpwatch"][
        "properties"
    ]["config"]["properties"]
    patterns = {
        s.name: next(alt["pattern"] for alt in props[s.name]["oneOf"] if alt.get("type") == "string")
        for s in SETTINGS
        if s.kind == "duration"
    }
    assert patterns, "no duration setting in the table"
    try:
        parse_duration(text)
        agent_takes = " " not in text  # the chart passes the value on as written; no spaces in a schema value
    except ValueError:
        agent_takes = False
    for name, pattern in patterns.items():
        assert bool(re.match(pattern, text)) == agent_takes, (name, pattern, text)


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of every value the schema describes down to its pass-through objects."""
    out: set[str] = set()
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        out.add(path)
        if sub.get("additionalProperties") is False:
            out |= _schema_paths(sub, path + ".")
    return out


def test_values_schema_describes_every_value_and_nothing_else() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    described = _schema_paths(schema)
    given = _value_paths(values, schema)
    assert given - described == set(), "values without a schema"
    assert described - given == {"global"}, "schema entries without a value (global: Helm's, for sub-charts)"

    def closed(s: dict[str, Any], path: str) -> None:
        for key, sub in s.get("properties", {}).items():
            if sub.get("type") == "object" and "properties" in sub:
                assert sub.get("additionalProperties") is False, f"{path}{key} accepts unknown keys"
                closed(sub, f"{path}{key}.")

    assert schema["additionalProperties"] is False
    closed(schema, "")


@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        ("warpwatch.config.perod=1m", SchemaError("warpwatch.config.perod", "additional")),
        ("warpwatch.config.period=1x", SchemaError("warpwatch.config.period", "pattern")),
        ("warpwatch.config.log_format=xml", SchemaError("warpwatch.config.log_format", "enum")),
        ("warpwatch.config.top_kernels=0", SchemaError("warpwatch.config.top_kernels", "minimum")),
        ("warpwatch.config.source[0]=nfs:/traces", SchemaError("warpwatch.config.source.0", "pattern")),
        ("example.gpus=1", SchemaError("example.gpus", "additional")),
        ("warpwatch.sidecarMode=sidecar", SchemaError("warpwatch.sidecarMode", "enum")),
        ("warpwatch.sidecarMode=true", SchemaError("warpwatch.sidecarMode", "enum")),
        ("warpwatch.nativeSidecar=true", SchemaError("warpwatch.nativeSidecar", "additional")),  # now sidecarMode
        ("kineto.torchVersion=two.ten", SchemaError("kineto.torchVersion", "pattern")),
        ("kineto.torchVersion=2", SchemaError("kineto.torchVersion", "type", "string")),
        ("kineto.allowAffectedTorch=yes", SchemaError("kineto.allowAffectedTorch", "type", "boolean")),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
@pytest.mark.slow
def test_the_schema_rejects_misspelt_and_malformed_values(override: str, complaint: SchemaError) -> None:
    proc = _helm("lint", "--strict", str(CHART), "--set", override, check=False)
    assert proc.returncode != 0
    assert complaint in schema_errors(proc.stdout + proc.stderr), proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# lint, render, validate


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_strict(name: str) -> None:
    proc = _helm(
        "lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", "-", stdin=yaml.safe_dump(VALUE_SETS[name])
    )
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


def _expected_counts(name: str, monitoring: bool) -> Counter[str]:
    v = values_of(name)

    def on(key: str) -> bool:  # null: when the cluster serves monitoring.coreos.com/v1
        return monitoring if v[key]["enabled"] is None else bool(v[key]["enabled"])

    counts: Counter[str] = Counter()
    if v["example"]["enabled"]:
        counts["Deployment"] += 1
    if v["kineto"]["useDaemon"] and v["kineto"]["config"]:
        counts["ConfigMap"] += 1
    if on("dashboards"):
        counts["ConfigMap"] += len(list((CHART / "files" / "dashboards").glob("*.json")))
    for key, kind in (
        ("service", "Service"),
        ("serviceMonitor", "ServiceMonitor"),
        ("prometheusRule", "PrometheusRule"),
        ("networkPolicy", "NetworkPolicy"),
    ):
        if on(key) if key in ("serviceMonitor", "prometheusRule") else v[key]["enabled"]:
            counts[kind] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("monitoring", [True, False], ids=["with-monitoring-api", "without"])
def test_rendered_object_counts(monitoring: bool) -> None:
    lines = []
    for name in VALUE_SETS:
        counts = Counter(o["kind"] for o in render(name, monitoring=monitoring))
        assert counts == _expected_counts(name, monitoring), name
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
        lines.append(f"{name}: {sum(counts.values())} objects ({kinds})")
    print(
        f"\nrendered objects per value set ({'with' if monitoring else 'without'} {CRD_GROUP}):\n  "
        + "\n  ".join(lines)
    )


def test_default_values_render_the_monitoring_objects_exactly_when_the_cluster_serves_their_api(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def names(objs: list[dict[str, Any]]) -> list[str]:
        return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs)

    without = names(render("default", monitoring=False))
    with_api = names(render("default", monitoring=True))
    assert without == [f"ConfigMap/{FULLNAME}-kineto", f"Service/{FULLNAME}"]
    dashboards = sorted(
        f"ConfigMap/{FULLNAME}-dashboard-{p.stem.removeprefix('warpwatch-')}"
        for p in (ROOT / "dashboards").glob("*.json")
    )
    assert with_api == sorted([*without, *dashboards, f"PrometheusRule/{FULLNAME}", f"ServiceMonitor/{FULLNAME}"])
    # Explicit values still decide, whatever the cluster serves.
    assert names(render("no-monitoring", monitoring=True)) == without
    forced = _helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--set",
        "serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboards.enabled=true",
    ).stdout
    assert names([d for d in yaml.safe_load_all(forced) if d]) == with_api
    # Without the Service, an automatic ServiceMonitor is left out, an explicit one is an error.
    no_service = _helm("template", RELEASE, str(CHART), *MONITORING, "--set", "service.enabled=false").stdout
    assert "kind: ServiceMonitor" not in no_service and "kind: PrometheusRule" in no_service
    proc = _helm(
        "template", RELEASE, str(CHART), "--set", "service.enabled=false,serviceMonitor.enabled=true", check=False
    )
    assert proc.returncode != 0 and "a ServiceMonitor needs service.enabled" in proc.stderr
    with capsys.disabled():
        print(f"\ndefault values, cluster without {CRD_GROUP}: " + ", ".join(without))
        print(f"default values, cluster with {CRD_GROUP}: " + ", ".join(with_api))


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_object_names_its_namespace(name: str) -> None:
    dashboards_namespace = values_of(name)["dashboards"]["namespace"] or NAMESPACE
    for obj in render(name):
        expected = (
            dashboards_namespace
            if obj["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboards"
            else NAMESPACE
        )
        assert obj["metadata"].get("namespace") == expected, f"{obj['kind']}/{obj['metadata']['name']}"


@pytest.mark.slow
@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_manifests_pass_kubernetes_validate_strict(name: str, kube_version: str) -> None:
    import kubernetes_validate

    objs = render(name, kube_version) + render(name, kube_version, monitoring=False)
    checked = 0
    for obj in objs:
        if obj["apiVersion"] == CRD_GROUP:
            continue  # Prometheus Operator CRDs: checked field by field below
        try:
            kubernetes_validate.validate(obj, kube_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} ({kube_version}): {exc.message} "
                f"at {'.'.join(map(str, exc.path))}"
            )
        checked += 1
    assert checked == len([o for o in objs if o["apiVersion"] != CRD_GROUP]) > 0


@pytest.mark.slow
def test_kubernetes_validate_cli_strict_on_the_default_render(tmp_path: Path) -> None:
    """The command line, as CI or a user would run it, on the whole default render."""
    exe = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    manifest = tmp_path / "default.yaml"
    manifest.write_text(_render_text("example", KUBE_VERSIONS[0]), encoding="utf-8")
    for kube_version in KUBE_VERSIONS:
        proc = subprocess.run(
            [exe, "--strict", "-k", kube_version, str(manifest)], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
