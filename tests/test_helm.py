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

import copy
import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from warpwatch import __version__, chartdoc, deploysync
from warpwatch.capture.registry import PREFIXES
from warpwatch.config import SETTINGS, SETTINGS_BY_NAME, load_config

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "warpwatch"
RELEASE, NAMESPACE = "gpu", "inference"
FULLNAME = f"{RELEASE}-warpwatch"
KUBE_VERSIONS = ("1.30.0", "1.32.0")
CRD_GROUP = "monitoring.coreos.com/v1"
MONITORING = ("--api-versions", CRD_GROUP)
"""`helm template` on a cluster with the Prometheus Operator (helm install asks the cluster)."""
AGENT_UID = 65532


def _find_helm() -> str | None:
    local = ROOT / ".tools" / "bin" / "helm"
    return str(local) if local.is_file() else shutil.which("helm")


HELM = _find_helm()
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    HELM is None, reason="helm not found at .tools/bin/helm or on PATH (bash .ci/install-helm installs it)")

# Every setting of `warpwatch run` set, to exercise the value -> environment conversion: floats,
# whole numbers arriving as float64 (no exponent allowed), lists, booleans, paths.
ALL_CONFIG: dict[str, Any] = {
    "source": ["kineto-daemon", "dir:/tmp/warpwatch/extra"],
    "address": "0.0.0.0",
    "port": 9100,
    "period": "90s",
    "window": 0.5,
    "adaptive_window": True,
    "jitter": 2,
    "top_kernels": 20,
    "kernel_gauges": True,
    "max_gpus": 128,
    "log_level": "debug",
    "log_format": "text",
    "allow_high_duty": False,
    "trace_dir": "/tmp/traces",
    "delete_processed": True,
    "retention_files": 100,
    "retention_bytes": "1GiB",
    "max_trace_bytes": 3221225472,
    "collect_timeout": "45s",
    "gpu_properties": "/etc/warpwatch/gpus/gpus.json",
    "web_config": "/etc/warpwatch/web/web-config.yml",
}
"""What the agent must see for ALL_CONFIG (parsed the agent's way)."""
ALL_CONFIG_EXPECTED: dict[str, Any] = {
    "source": ("kineto-daemon", "dir:/tmp/warpwatch/extra"), "port": 9100, "period": 90.0, "window": 0.5,
    "adaptive_window": True, "jitter": 2.0, "top_kernels": 20, "kernel_gauges": True,
    "max_gpus": 128, "log_level": "debug",
    "log_format": "text",
    "allow_high_duty": False,
    "trace_dir": Path("/tmp/traces"), "delete_processed": True, "retention_files": 100,
    "retention_bytes": 1024**3, "max_trace_bytes": 3 * 1024**3, "collect_timeout": 45.0,
}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "example": {"example": {"enabled": True}},
    "native-sidecar": {"example": {"enabled": True}, "warpwatch": {"sidecarMode": "native"}},
    "regular-sidecar": {"example": {"enabled": True}, "warpwatch": {"sidecarMode": "regular"}},
    "declared-torch": {"kineto": {"torchVersion": "2.10.0+cu128"}},
    "no-monitoring": {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False},
                      "dashboards": {"enabled": False}},
    "all-features": {
        "image": {"digest": "sha256:" + "ab" * 32},
        "imagePullSecrets": [{"name": "registry"}],
        "warpwatch": {
            "config": ALL_CONFIG,
            "args": ["--log-level", "debug"],
            "extraEnv": [{"name": "TZ", "value": "UTC"}],
            "extraVolumes": [
                {"name": "web", "secret": {"secretName": "warpwatch-web"}},
                {"name": "gpus", "configMap": {"name": "gpu-properties"}},
            ],
            "extraVolumeMounts": [
                {"name": "web", "mountPath": "/etc/warpwatch/web", "readOnly": True},
                {"name": "gpus", "mountPath": "/etc/warpwatch/gpus", "readOnly": True},
            ],
            "probeScheme": "HTTPS",
            "traceVolume": {"medium": "Memory", "sizeLimit": "512Mi"},
        },
        "example": {"enabled": True, "gpu": {"count": 2}, "runtimeClassName": "nvidia",
                    "podAnnotations": {"team": "ml"},
                    "env": [{"name": "CUDA_MODULE_LOADING", "value": "LAZY"}],
                    "nodeSelector": {"nvidia.com/gpu.present": "true"}},
        "service": {"annotations": {"note": "metrics"}},
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}, "scheme": "https",
                           "tlsConfig": {"insecureSkipVerify": True},
                           "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"],
                                                  "regex": "python_gc_.*"}]},
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboards": {"enabled": True, "annotations": {"grafana_folder": "GPU"}},
        "networkPolicy": {"enabled": True,
                          "extraIngress": [{"ports": [{"port": 8000, "protocol": "TCP"}]}]},
    },
    "custom-labels": {
        "example": {"enabled": True},
        "fullnameOverride": "occupancy",
        "commonLabels": {"team": "inference", "cost-center": "gpu-42"},
        "service": {"labels": {"scrape": "yes"}, "portName": "http-metrics", "port": 8080},
        "warpwatch": {"portName": "ww-metrics"},
        "serviceMonitor": {"enabled": True, "labels": {"prometheus": "main"}},
        "prometheusRule": {"enabled": True, "labels": {"role": "alert-rules"}},
        "dashboards": {"enabled": True, "labelKey": "grafana.com/dashboard", "labelValue": "warpwatch",
                       "namespace": "monitoring"},
    },
    "network-policy": {
        "example": {"enabled": True},
        "networkPolicy": {"enabled": True, "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
             "podSelector": {"matchLabels": {"app": "vmagent"}}},
            {"ipBlock": {"cidr": "10.0.0.0/8"}},
        ]},
    },
    "no-daemon-no-gpu": {
        "kineto": {"useDaemon": False},
        "warpwatch": {"config": {"source": ["dir:/tmp/warpwatch"]}, "readinessProbe": {"enabled": True}},
        "example": {"enabled": True, "gpu": {"count": 0}},
    },
}


# ---------------------------------------------------------------------------------------------
# helpers


def _helm(*args: str, check: bool = True, cwd: Path | None = None, env: dict[str, str] | None = None,
          stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env,
                          input=stdin)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@cache
def _render_text(name: str, kube_version: str = KUBE_VERSIONS[-1], monitoring: bool = True) -> str:
    return _helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version,
                 *(MONITORING if monitoring else ()), "-f", "-", stdin=yaml.safe_dump(VALUE_SETS[name])).stdout


def render(name: str, kube_version: str = KUBE_VERSIONS[-1], *, monitoring: bool = True) -> list[dict[str, Any]]:
    """The objects `helm template` renders for a value set (fresh copies), by default on a cluster
    that serves monitoring.coreos.com/v1."""
    return [doc for doc in yaml.safe_load_all(_render_text(name, kube_version, monitoring)) if doc]


def values_of(name: str) -> dict[str, Any]:
    """values.yaml merged with the set's overrides (as Helm merges them)."""
    def merge(base: Any, over: Any) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            out = dict(base)
            for k, v in over.items():
                out[k] = merge(base.get(k), v)
            return out
        return copy.deepcopy(over)
    return merge(yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8")), VALUE_SETS[name])


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(objs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def pod_templates(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o["spec"]["template"] for o in objs if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]


def container(template: dict[str, Any], name: str) -> dict[str, Any]:
    """A container or init container of the pod template, by name."""
    spec = template["spec"]
    return next(c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name)


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def mounts_of(c: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


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
    "list": {"null", "array"}, "duration": {"null", "string", "number"}, "size": {"null", "string", "integer"},
    "bool": {"null", "boolean"}, "int": {"null", "integer"}, "str": {"null", "string"},
    "path": {"null", "string"},
}


def test_values_schema_types_follow_the_settings_kinds() -> None:
    props = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))[
        "properties"]["warpwatch"]["properties"]["config"]["properties"]
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


def _schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of every value the schema describes down to its pass-through objects."""
    out: set[str] = set()
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        out.add(path)
        if sub.get("additionalProperties") is False:
            out |= _schema_paths(sub, path + ".")
    return out


def _value_paths(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        out.add(path)
        sub = schema.get("properties", {}).get(key, {})
        if isinstance(value, dict) and sub.get("additionalProperties") is False:
            out |= _value_paths(value, sub, path + ".")
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


@pytest.mark.parametrize(("override", "complaint"), [
    ("warpwatch.config.perod=1m", "perod"),
    ("warpwatch.config.period=1x", "warpwatch.config.period"),
    ("warpwatch.config.log_format=xml", "warpwatch.config.log_format"),
    ("warpwatch.config.top_kernels=0", "warpwatch.config.top_kernels"),
    ("warpwatch.config.source[0]=nfs:/traces", "warpwatch.config.source"),
    ("example.gpus=1", "gpus"),
    ("warpwatch.sidecarMode=sidecar", "warpwatch.sidecarMode"),
    ("warpwatch.sidecarMode=true", "warpwatch.sidecarMode"),
    ("warpwatch.nativeSidecar=true", "nativeSidecar"),  # replaced by sidecarMode
    ("kineto.torchVersion=two.ten", "kineto.torchVersion"),
    ("kineto.torchVersion=2", "kineto.torchVersion"),
    ("kineto.allowAffectedTorch=yes", "kineto.allowAffectedTorch"),
])
def test_the_schema_rejects_misspelt_and_malformed_values(override: str, complaint: str) -> None:
    proc = _helm("lint", "--strict", str(CHART), "--set", override, check=False)
    assert proc.returncode != 0
    assert complaint in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# lint, render, validate


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_helm_lint_strict(name: str) -> None:
    proc = _helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", "-",
                 stdin=yaml.safe_dump(VALUE_SETS[name]))
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
    for key, kind in (("service", "Service"), ("serviceMonitor", "ServiceMonitor"),
                      ("prometheusRule", "PrometheusRule"), ("networkPolicy", "NetworkPolicy")):
        if on(key) if key in ("serviceMonitor", "prometheusRule") else v[key]["enabled"]:
            counts[kind] += 1
    return counts


@pytest.mark.parametrize("monitoring", [True, False], ids=["with-monitoring-api", "without"])
def test_rendered_object_counts(monitoring: bool) -> None:
    lines = []
    for name in VALUE_SETS:
        counts = Counter(o["kind"] for o in render(name, monitoring=monitoring))
        assert counts == _expected_counts(name, monitoring), name
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
        lines.append(f"{name}: {sum(counts.values())} objects ({kinds})")
    print(f"\nrendered objects per value set ({'with' if monitoring else 'without'} {CRD_GROUP}):\n  "
          + "\n  ".join(lines))


def test_default_values_render_the_monitoring_objects_exactly_when_the_cluster_serves_their_api(
        capsys: pytest.CaptureFixture[str]) -> None:
    def names(objs: list[dict[str, Any]]) -> list[str]:
        return sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs)

    without = names(render("default", monitoring=False))
    with_api = names(render("default", monitoring=True))
    assert without == [f"ConfigMap/{FULLNAME}-kineto", f"Service/{FULLNAME}"]
    dashboards = sorted(f"ConfigMap/{FULLNAME}-dashboard-{p.stem.removeprefix('warpwatch-')}"
                        for p in (ROOT / "dashboards").glob("*.json"))
    assert with_api == sorted([*without, *dashboards, f"PrometheusRule/{FULLNAME}", f"ServiceMonitor/{FULLNAME}"])
    # Explicit values still decide, whatever the cluster serves.
    assert names(render("no-monitoring", monitoring=True)) == without
    forced = _helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--set",
                   "serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboards.enabled=true").stdout
    assert names([d for d in yaml.safe_load_all(forced) if d]) == with_api
    # Without the Service, an automatic ServiceMonitor is left out, an explicit one is an error.
    no_service = _helm("template", RELEASE, str(CHART), *MONITORING, "--set", "service.enabled=false").stdout
    assert "kind: ServiceMonitor" not in no_service and "kind: PrometheusRule" in no_service
    proc = _helm("template", RELEASE, str(CHART), "--set", "service.enabled=false,serviceMonitor.enabled=true",
                 check=False)
    assert proc.returncode != 0 and "a ServiceMonitor needs service.enabled" in proc.stderr
    with capsys.disabled():
        print(f"\ndefault values, cluster without {CRD_GROUP}: " + ", ".join(without))
        print(f"default values, cluster with {CRD_GROUP}: " + ", ".join(with_api))


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_object_names_its_namespace(name: str) -> None:
    dashboards_namespace = values_of(name)["dashboards"]["namespace"] or NAMESPACE
    for obj in render(name):
        expected = (dashboards_namespace if obj["metadata"]["labels"].get("app.kubernetes.io/component")
                    == "dashboards" else NAMESPACE)
        assert obj["metadata"].get("namespace") == expected, f"{obj['kind']}/{obj['metadata']['name']}"


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
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} ({kube_version}): {exc.message} "
                        f"at {'.'.join(map(str, exc.path))}")
        checked += 1
    assert checked == len([o for o in objs if o["apiVersion"] != CRD_GROUP]) > 0


def test_kubernetes_validate_cli_strict_on_the_default_render(tmp_path: Path) -> None:
    """The command line, as CI or a user would run it, on the whole default render."""
    exe = shutil.which("kubernetes-validate") or str(Path(sys.executable).parent / "kubernetes-validate")
    manifest = tmp_path / "default.yaml"
    manifest.write_text(_render_text("example", KUBE_VERSIONS[0]), encoding="utf-8")
    for kube_version in KUBE_VERSIONS:
        proc = subprocess.run([exe, "--strict", "-k", kube_version, str(manifest)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------
# security


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_every_container_is_hardened(name: str) -> None:
    templates = pod_templates(render(name))
    assert bool(templates) == values_of(name)["example"]["enabled"]
    for template in templates:
        spec = template["spec"]
        pod_sc = spec.get("securityContext", {})
        assert spec.get("automountServiceAccountToken") is False
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            where = f"{name}: container {c['name']}"
            assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, where
            assert sc.get("runAsUser", pod_sc.get("runAsUser")) == AGENT_UID, where
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc.get("privileged", False) is False, where
            assert sc["capabilities"] == {"drop": ["ALL"]}, where
            assert sc.get("seccompProfile", pod_sc.get("seccompProfile")) == {"type": "RuntimeDefault"}, where
            assert c["resources"].get("limits", {}).get("memory"), where


# ---------------------------------------------------------------------------------------------
# the sidecar, the traced container, the Service, the ServiceMonitor, the NetworkPolicy


def test_sidecar_defaults_follow_the_agent() -> None:
    template = pod_templates(render("example"))[0]
    sidecar = container(template, "warpwatch")
    assert sidecar["image"] == f"ghcr.io/warpwatch/warpwatch:{__version__}"
    assert "command" not in sidecar  # the image's ENTRYPOINT: warpwatch run
    port = sidecar["ports"][0]
    assert port["containerPort"] == SETTINGS_BY_NAME["port"].default
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"], "scheme": "HTTP"}
    # No readiness gate: the sidecar's readiness would be the serving pod's.
    assert "readinessProbe" not in sidecar and "startupProbe" not in sidecar
    # Kubernetes 1.32 has native sidecars: an init container with restartPolicy Always.
    assert sidecar["restartPolicy"] == "Always" and sidecar in template["spec"]["initContainers"]
    assert env_of(sidecar) == {"WARPWATCH_SOURCE": "kineto-daemon", "WARPWATCH_TRACE_DIR": "/tmp/warpwatch",
                               "WARPWATCH_LOG_FORMAT": "json"}
    config = load_config(environ=env_of(sidecar))
    assert config.source == ("kineto-daemon",) and config.port == SETTINGS_BY_NAME["port"].default


def test_every_setting_reaches_the_agent_through_its_environment_variable(tmp_path: Path) -> None:
    template = pod_templates(render("all-features"))[0]
    sidecar = container(template, "warpwatch")
    env = {k: v for k, v in env_of(sidecar).items() if k.startswith("WARPWATCH_")}
    assert set(env) == {s.env for s in SETTINGS}
    assert env["WARPWATCH_SOURCE"] == "kineto-daemon dir:/tmp/warpwatch/extra"
    assert env["WARPWATCH_MAX_TRACE_BYTES"] == "3221225472"  # not 3.221225472e+09
    assert env["WARPWATCH_WINDOW"] == "0.5"
    assert sidecar["args"] == ["--log-level", "debug"]
    assert env_of(sidecar)["TZ"] == "UTC"
    # The files exist only in the pod; stand-ins here, so that the loader's checks run.
    for name in ("gpu_properties", "web_config"):
        assert env[SETTINGS_BY_NAME[name].env] == ALL_CONFIG[name]
        stand_in = tmp_path / name
        stand_in.write_text("{}\n", encoding="utf-8")
        env[SETTINGS_BY_NAME[name].env] = str(stand_in)
    config = load_config(environ=env)
    for key, expected in ALL_CONFIG_EXPECTED.items():
        assert getattr(config, key) == expected, key
    assert sidecar["ports"][0]["containerPort"] == 9100
    assert sidecar["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert sidecar["image"].endswith("@sha256:" + "ab" * 32)
    mounts = mounts_of(sidecar)
    assert mounts["warpwatch-traces"] == "/tmp/traces"
    assert mounts["web"] == "/etc/warpwatch/web"
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["warpwatch-traces"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "512Mi"}
    assert {"web", "gpus"} <= set(volumes)


@pytest.mark.parametrize("name", ["example", "all-features", "native-sidecar"])
def test_traced_container_reaches_the_agent_through_the_daemon_protocol(name: str) -> None:
    objs = render(name)
    template = pod_templates(objs)[0]
    workload, sidecar = container(template, "workload"), container(template, "warpwatch")
    trace_dir = env_of(sidecar)["WARPWATCH_TRACE_DIR"]
    env = env_of(workload)
    assert env["KINETO_USE_DAEMON"] == "1"
    assert env["KINETO_ONDEMAND_TRACE_DIR"] == trace_dir
    assert trace_dir.startswith("/tmp/")  # where newer Kineto writes on-demand traces
    # The same volume at the same path in both containers: Kineto writes the path it is given.
    assert mounts_of(workload)["warpwatch-traces"] == mounts_of(sidecar)["warpwatch-traces"] == trace_dir
    # KINETO_CONFIG names a file of the Kineto ConfigMap, mounted in the traced container.
    config_path = Path(env["KINETO_CONFIG"])
    assert mounts_of(workload)["warpwatch-kineto"] == str(config_path.parent)
    volume = next(v for v in template["spec"]["volumes"] if v["name"] == "warpwatch-kineto")
    configmap = next(o for o in by_kind(objs, "ConfigMap") if o["metadata"]["name"] == volume["configMap"]["name"])
    assert "ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1" in configmap["data"][config_path.name].splitlines()
    gpus = values_of(name)["example"]["gpu"]["count"]
    assert workload["resources"]["limits"]["nvidia.com/gpu"] == gpus


def test_without_the_daemon_no_kineto_settings_and_no_gpu() -> None:
    objs = render("no-daemon-no-gpu")
    template = pod_templates(objs)[0]
    workload = container(template, "workload")
    assert not any(k.startswith("KINETO_") for k in env_of(workload))
    assert "nvidia.com/gpu" not in workload["resources"].get("limits", {})
    assert "warpwatch-kineto" not in {v["name"] for v in template["spec"]["volumes"]}
    # Asked for explicitly (a pod that serves nothing else): /readyz.
    readiness = container(template, "warpwatch")["readinessProbe"]
    assert readiness["httpGet"]["path"] == "/readyz"


# The sidecar's place (sidecarMode) and the torch check: tests/test_helm_sidecar.py.


@pytest.mark.parametrize("name", [n for n in VALUE_SETS if VALUE_SETS[n].get("serviceMonitor", {}).get("enabled")])
def test_servicemonitor_selects_the_service_and_names_its_port(name: str) -> None:
    objs = render(name)
    service, monitor = one(objs, "Service"), one(objs, "ServiceMonitor")
    values = values_of(name)
    assert monitor["apiVersion"] == CRD_GROUP
    assert monitor["metadata"]["name"] and monitor["metadata"]["namespace"] == NAMESPACE
    assert set(values["serviceMonitor"]["labels"].items()) <= set(monitor["metadata"]["labels"].items())
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    port_names = {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"], "a ServiceMonitor without endpoints scrapes nothing"
    for endpoint in monitor["spec"]["endpoints"]:
        assert endpoint["port"] in port_names
        assert endpoint["path"] == "/metrics"
        assert endpoint["scheme"] == values["serviceMonitor"]["scheme"]
        assert re.fullmatch(r"([0-9]+(ms|s|m|h))+", endpoint["interval"])


@pytest.mark.parametrize("name", [n for n in VALUE_SETS if VALUE_SETS[n].get("serviceMonitor", {}).get("enabled")])
def test_servicemonitor_attaches_every_label_the_rules_group_by(name: str) -> None:
    """Issue 24: the rules and panels group by namespace, deployment, pod (and the agent's own gpu,
    kernel): a ServiceMonitor target carries namespace and pod; deployment comes from the serving
    pod's app.kubernetes.io/instance label, which the chart's pods carry (the release name)."""
    from warpwatch.dashboards.settings import DEFAULT_SETTINGS, POD_LABELS
    objs = render(name)
    monitor = one(objs, "ServiceMonitor")
    (endpoint,) = monitor["spec"]["endpoints"]
    first = endpoint["relabelings"][0]
    assert first == {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
                     "targetLabel": "deployment"}
    attached = {"namespace", "pod", *(r["targetLabel"] for r in endpoint["relabelings"] if "targetLabel" in r)}
    assert set(POD_LABELS) <= attached and set(DEFAULT_SETTINGS.fleet) <= attached
    for template in pod_templates(objs):
        assert template["metadata"]["labels"].get("app.kubernetes.io/instance") == RELEASE


@pytest.mark.parametrize("name", [n for n in VALUE_SETS if values_of(n)["example"]["enabled"]])
def test_service_selects_the_pods_with_the_sidecar_and_targets_its_port(name: str) -> None:
    objs = render(name)
    service = one(objs, "Service")
    template = pod_templates(objs)[0]
    sidecar = container(template, values_of(name)["warpwatch"]["containerName"])
    assert selects(service["spec"]["selector"], template["metadata"]["labels"])
    assert service["spec"]["ports"][0]["targetPort"] == sidecar["ports"][0]["name"]
    deployment = one(objs, "Deployment")
    assert selects(deployment["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])


@pytest.mark.parametrize("name", [n for n in VALUE_SETS if values_of(n)["networkPolicy"]["enabled"]])
def test_network_policy_opens_the_metrics_port_to_the_configured_peers(name: str) -> None:
    objs = render(name)
    policy = one(objs, "NetworkPolicy")
    values = values_of(name)
    template = pod_templates(objs)[0]
    sidecar = container(template, "warpwatch")
    assert selects(policy["spec"]["podSelector"]["matchLabels"], template["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    first, *extra = policy["spec"]["ingress"]
    assert first["ports"] == [{"port": sidecar["ports"][0]["containerPort"], "protocol": "TCP"}]
    assert first["from"] == values["networkPolicy"]["from"]
    assert extra == values["networkPolicy"]["extraIngress"]


def test_custom_labels_reach_every_object() -> None:
    objs = render("custom-labels")
    values = values_of("custom-labels")
    for obj in objs:
        assert set(values["commonLabels"].items()) <= set(obj["metadata"]["labels"].items()), obj["kind"]
        assert obj["metadata"]["name"].startswith("occupancy")
    service = one(objs, "Service")
    assert service["metadata"]["labels"]["scrape"] == "yes"
    assert service["spec"]["ports"] == [{"name": "http-metrics", "port": 8080, "targetPort": "ww-metrics",
                                         "protocol": "TCP"}]
    assert one(objs, "PrometheusRule")["metadata"]["labels"]["role"] == "alert-rules"


# ---------------------------------------------------------------------------------------------
# the generated monitoring files


def test_chart_copies_of_the_generated_files_are_byte_identical() -> None:
    assert deploysync.check(ROOT) == []


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not found (Debian package prometheus)")
def test_prometheusrule_holds_the_generated_rules_and_passes_promtool(tmp_path: Path) -> None:
    rule = one(render("all-features"), "PrometheusRule")
    assert rule["apiVersion"] == CRD_GROUP
    groups = rule["spec"]["groups"]
    generated = yaml.safe_load((ROOT / "dashboards" / "alerts" / "warpwatch-rules.yaml").read_text(encoding="utf-8"))
    assert groups == generated["groups"]
    for group in groups:
        assert group["name"] and group["rules"]
        for r in group["rules"]:
            assert ("alert" in r) != ("record" in r) and r["expr"], r
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
    proc = subprocess.run([PROMTOOL, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rules = sum(len(g["rules"]) for g in groups)  # alerting and recording rules
    assert f"SUCCESS: {rules} rules found" in proc.stdout


@pytest.mark.parametrize("name", ["all-features", "custom-labels"])
def test_dashboard_configmaps_carry_the_generated_dashboards(name: str) -> None:
    values = values_of(name)["dashboards"]
    configmaps = [o for o in by_kind(render(name), "ConfigMap")
                  if o["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboards"]
    sources = sorted((ROOT / "dashboards").glob("*.json"))
    assert len(configmaps) == len(sources)
    seen = {}
    for cm in configmaps:
        assert cm["metadata"]["labels"][values["labelKey"]] == values["labelValue"]
        assert cm["metadata"]["namespace"] == (values["namespace"] or NAMESPACE)
        assert cm["metadata"].get("annotations", {}) == values["annotations"]
        ((filename, text),) = cm["data"].items()
        seen[filename] = text
    for source in sources:
        assert seen[source.name] == source.read_text(encoding="utf-8"), source.name
        assert json.loads(seen[source.name])["uid"]


def test_rendering_without_the_generated_files_says_what_to_run(tmp_path: Path) -> None:
    chart = tmp_path / "warpwatch"
    shutil.copytree(CHART, chart)
    shutil.rmtree(chart / "files")
    for flag in ("prometheusRule.enabled=true", "dashboards.enabled=true"):
        proc = _helm("template", RELEASE, str(chart), "--set", flag, check=False)
        assert proc.returncode != 0
        assert "run `warpwatch dashboards build`" in proc.stderr
    _helm("template", RELEASE, str(chart))  # the defaults need neither


# ---------------------------------------------------------------------------------------------
# NOTES.txt (helm template does not render it: a copy of the chart renders it into a ConfigMap)


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_notes_render_for_every_value_set(name: str, tmp_path: Path) -> None:
    chart = tmp_path / "warpwatch"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text(encoding="utf-8")
    (chart / "templates" / "_notes.tpl").write_text('{{- define "test.notes" -}}' + notes + "{{- end }}\n")
    (chart / "templates" / "notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n'
        '  notes: {{ include "test.notes" . | quote }}\n')
    text = _helm("template", RELEASE, str(chart), "--namespace", NAMESPACE, "--show-only", "templates/notes.yaml",
                 "-f", "-", stdin=yaml.safe_dump(VALUE_SETS[name])).stdout
    rendered = yaml.safe_load(text)["data"]["notes"]
    values = values_of(name)
    assert f"warpwatch {__version__}" in rendered
    assert ("-example" in rendered) == values["example"]["enabled"]
    assert ('"warpwatch.containers"' in rendered) != values["example"]["enabled"]
    assert ("NetworkPolicy" in rendered) == values["networkPolicy"]["enabled"]
    if values["service"]["enabled"]:
        assert f"port-forward svc/{values['fullnameOverride'] or FULLNAME}" in rendered


# ---------------------------------------------------------------------------------------------
# the values table of README.md, generated from the comments of values.yaml (warpwatch.chartdoc)


def test_the_readme_values_table_is_generated_from_values_yaml_and_current() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    values_text = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert chartdoc.replace_table(readme, values_text) == readme, "run `warpwatch dashboards build`"
    table = readme[readme.index(chartdoc.BEGIN):readme.index(chartdoc.END)]
    keys = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    # Complete: every value Helm accepts (down to the schema's pass-through objects) has a row or
    # lies under a row.
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load(values_text)
    paths = _value_paths(values, schema)
    for path in paths:
        if any(other.startswith(path + ".") for other in paths):
            continue  # a map: its values are checked
        assert any(path == k or path.startswith(k + ".") for k in keys), f"{path} has no row"
    assert "warpwatch.readinessProbe" in keys and "serviceMonitor.enabled" in keys


def test_the_agent_defaults_quoted_in_values_yaml_are_the_agents() -> None:
    """`[60s]` after a warpwatch.config description is the agent's default, as `warpwatch run --help` says."""
    from warpwatch.config import settings_table_markdown

    agent = {}
    for line in settings_table_markdown().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        agent[cells[2].strip("`")] = cells[3]
    rows = {r.key.removeprefix("warpwatch.config."): r.description for r in chartdoc.rows(
        (CHART / "values.yaml").read_text(encoding="utf-8")) if r.key.startswith("warpwatch.config.")}
    assert set(rows) == set(agent)
    for name, description in rows.items():
        quoted = re.findall(r"\[([^\]]+)\]", description)
        if quoted:
            assert quoted[0] == agent[name], f"{name}: values.yaml says [{quoted[0]}], the agent {agent[name]}"


def test_chartdoc_documents_every_value_or_says_which_is_not() -> None:
    text = """# Section comments without `--` are not descriptions.
image:
  # -- Where the image comes from.
  repository: x
  # -- A map documented as a whole.
  resources:
    limits:
      memory: 1Gi
# -- A map whose keys are documented too.
config:
  # -- A block scalar.
  script: |
    import sys
    print("a: b")
  # -- A list.
  tolerations:
    - key: a
      operator: Exists
"""
    assert [(r.key, r.description) for r in chartdoc.rows(text)] == [
        ("image.repository", "Where the image comes from."),
        ("image.resources", "A map documented as a whole."),
        ("config", "A map whose keys are documented too."),
        ("config.script", "A block scalar."),
        ("config.tolerations", "A list."),
    ]
    table = chartdoc.render(text)
    assert '| `image.resources` | `{"limits": {"memory": "1Gi"}}` | A map documented as a whole. |' in table
    assert "| `config.script` | multi-line string (see values.yaml) | A block scalar. |" in table
    with pytest.raises(chartdoc.ChartDocError, match=r"no `# --` description for image.tag, port$"):
        chartdoc.rows("image:\n  # -- ok\n  repository: x\n  tag: y\nport: 1\n")
    with pytest.raises(chartdoc.ChartDocError, match="no values table markers"):
        chartdoc.replace_table("# README without markers\n", text)
