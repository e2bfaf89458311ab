"""Helpers of the chart's tests (tests/deploy/test_helm*.py, test_readme_kubernetes.py): which helm
they run, the skip without one, the value sets and renders, and helm's schema errors read alike
from helm 3 and helm 4."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

RELEASE, NAMESPACE = "gpu", "inference"
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "warpwatch"
FULLNAME = f"{RELEASE}-warpwatch"
KUBE_VERSIONS = ("1.30.0", "1.32.0")
CRD_GROUP = "monitoring.coreos.com/v1"
MONITORING = ("--api-versions", CRD_GROUP)
AGENT_UID = 65532


def _find_helm() -> str | None:
    """WARPWATCH_HELM when set (None when nothing is there), else .tools/bin/helm, else helm on PATH."""
    chosen = os.environ.get("WARPWATCH_HELM")
    if chosen is not None:
        return chosen if os.access(chosen, os.X_OK) and Path(chosen).is_file() else None
    local = ROOT / ".tools" / "bin" / "helm"
    return str(local) if local.is_file() else shutil.which("helm")


HELM = _find_helm()
HELM_MISSING = (
    f"helm not found: WARPWATCH_HELM={os.environ['WARPWATCH_HELM']!r} is no executable file"
    if "WARPWATCH_HELM" in os.environ
    else "helm not found at .tools/bin/helm or on PATH (bash .ci/install-helm installs it)"
)
needs_helm = pytest.mark.skipif(HELM is None, reason=HELM_MISSING)
"""The mark of every test that runs helm: without helm, a skip that says how to get it."""
PROMTOOL = shutil.which("promtool")


ALL_CONFIG: dict[str, Any] = {
    "source": ["kineto-daemon", "dir:/tmp/warpwatch/extra"],
    "address": "0.0.0.0",
    "port": 9100,
    "period": "90s",
    "window": 0.5,
    "overhead_budget": "2%",
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
    "evidence_dir": "/var/lib/warpwatch/evidence",
    "evidence_bytes": "256MiB",
    "evidence_files": 50,
}


ALL_CONFIG_EXPECTED: dict[str, Any] = {
    "source": ("kineto-daemon", "dir:/tmp/warpwatch/extra"),
    "port": 9100,
    "period": 90.0,
    "window": 0.5,
    "overhead_budget": 0.02,
    "adaptive_window": True,
    "jitter": 2.0,
    "top_kernels": 20,
    "kernel_gauges": True,
    "max_gpus": 128,
    "log_level": "debug",
    "log_format": "text",
    "allow_high_duty": False,
    "trace_dir": Path("/tmp/traces"),
    "delete_processed": True,
    "retention_files": 100,
    "retention_bytes": 1024**3,
    "max_trace_bytes": 3 * 1024**3,
    "collect_timeout": 45.0,
    "evidence_dir": Path("/var/lib/warpwatch/evidence"),
    "evidence_bytes": 256 * 1024**2,
    "evidence_files": 50,
}


VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "example": {"example": {"enabled": True}},
    "native-sidecar": {"example": {"enabled": True}, "warpwatch": {"sidecarMode": "native"}},
    "regular-sidecar": {"example": {"enabled": True}, "warpwatch": {"sidecarMode": "regular"}},
    "declared-torch": {"kineto": {"torchVersion": "2.10.0+cu128"}},
    "evidence-claim": {
        "example": {"enabled": True},
        "warpwatch": {
            "evidenceVolume": {"name": "evidence"},
            "extraVolumes": [{"name": "evidence", "persistentVolumeClaim": {"claimName": "warpwatch-evidence"}}],
        },
    },
    "no-evidence": {"example": {"enabled": True}, "warpwatch": {"config": {"evidence_dir": None}}},
    "no-monitoring": {
        "serviceMonitor": {"enabled": False},
        "prometheusRule": {"enabled": False},
        "dashboards": {"enabled": False},
    },
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
        "example": {
            "enabled": True,
            "gpu": {"count": 2},
            "runtimeClassName": "nvidia",
            "podAnnotations": {"team": "ml"},
            "env": [{"name": "CUDA_MODULE_LOADING", "value": "LAZY"}],
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
        },
        "service": {"annotations": {"note": "metrics"}},
        "serviceMonitor": {
            "enabled": True,
            "labels": {"release": "kube-prometheus-stack"},
            "scheme": "https",
            "tlsConfig": {"insecureSkipVerify": True},
            "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "python_gc_.*"}],
        },
        "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "dashboards": {"enabled": True, "annotations": {"grafana_folder": "GPU"}},
        "networkPolicy": {"enabled": True, "extraIngress": [{"ports": [{"port": 8000, "protocol": "TCP"}]}]},
    },
    "custom-labels": {
        "example": {"enabled": True},
        "fullnameOverride": "occupancy",
        "commonLabels": {"team": "inference", "cost-center": "gpu-42"},
        "service": {"labels": {"scrape": "yes"}, "portName": "http-metrics", "port": 8080},
        "warpwatch": {"portName": "ww-metrics"},
        "serviceMonitor": {"enabled": True, "labels": {"prometheus": "main"}},
        "prometheusRule": {"enabled": True, "labels": {"role": "alert-rules"}},
        "dashboards": {
            "enabled": True,
            "labelKey": "grafana.com/dashboard",
            "labelValue": "warpwatch",
            "namespace": "monitoring",
        },
    },
    "network-policy": {
        "example": {"enabled": True},
        "networkPolicy": {
            "enabled": True,
            "from": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "observability"}},
                    "podSelector": {"matchLabels": {"app": "vmagent"}},
                },
                {"ipBlock": {"cidr": "10.0.0.0/8"}},
            ],
        },
    },
    "no-daemon-no-gpu": {
        "kineto": {"useDaemon": False},
        "warpwatch": {"config": {"source": ["dir:/tmp/warpwatch"]}, "readinessProbe": {"enabled": True}},
        "example": {"enabled": True, "gpu": {"count": 0}},
    },
}


def _helm(
    *args: str, check: bool = True, cwd: Path | None = None, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    if HELM is None:
        pytest.skip(HELM_MISSING)
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env, input=stdin)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def helm_chart(*args: str, stdin: str | None = None, chart: Path = CHART) -> subprocess.CompletedProcess[str]:
    """`helm ARGS` with the argument "CHART" standing for `chart`, unchecked (the caller reads its
    exit status and stderr)."""
    if HELM is None:
        pytest.skip(HELM_MISSING)
    argv = [a if a != "CHART" else str(chart) for a in args]
    return subprocess.run([HELM, *argv], capture_output=True, text=True, timeout=120, input=stdin)


def chart_with_notes(tmp_path: Path) -> Path:
    """A copy of the chart whose NOTES.txt also renders as `templates/notes.yaml`, a ConfigMap whose
    `notes` is that text: `helm template --show-only templates/notes.yaml` shows the notes."""
    chart = tmp_path / "warpwatch"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text(encoding="utf-8")
    (chart / "templates" / "_notes.tpl").write_text('{{- define "test.notes" -}}' + notes + "{{- end }}\n")
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
        '  notes: {{ include "test.notes" . | quote }}\n'
    )
    return chart


@cache
def _render_text(name: str, kube_version: str = KUBE_VERSIONS[-1], monitoring: bool = True) -> str:
    return _helm(
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        kube_version,
        *(MONITORING if monitoring else ()),
        "-f",
        "-",
        stdin=yaml.safe_dump(VALUE_SETS[name]),
    ).stdout


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


def _value_paths(values: dict[str, Any], schema: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        out.add(path)
        sub = schema.get("properties", {}).get(key, {})
        if isinstance(value, dict) and sub.get("additionalProperties") is False:
            out |= _value_paths(value, sub, path + ".")
    return out


class SchemaError(NamedTuple):
    """One complaint of helm about values.schema.json, in words that do not depend on helm's major.

    `path`: the value's dotted path ("kineto.torchVersion"; an unknown key's own path, for
    `additional`); `kind`: type, pattern, enum, minimum, oneOf or additional; `want`: the
    expected type, for `type`."""

    path: str
    kind: str
    want: str = ""


# helm 3 (gojsonschema): "- kineto.torchVersion: Invalid type. Expected: string, given: number"
_HELM3 = re.compile(r"^\s*- (\(root\)|[^\s:]+): (.*)$", re.MULTILINE)
_HELM3_KINDS = (
    (re.compile(r"Invalid type\. Expected: (\w+)"), "type"),
    (re.compile(r"Does not match pattern"), "pattern"),
    (re.compile(r"must be one of the following"), "enum"),
    (re.compile(r"Must be greater than or equal to"), "minimum"),
    (re.compile(r"Must validate one and only one schema"), "oneOf"),
    (re.compile(r"Additional property (\S+) is not allowed"), "additional"),
)
# helm 4 (jsonschema/v6): "- at '/kineto/torchVersion': got number, want string"
_HELM4 = re.compile(r"^\s*- at '([^']*)': (.*)$", re.MULTILINE)
_HELM4_KINDS = (
    (re.compile(r"^got \w+, want (\w+)"), "type"),
    (re.compile(r"does not match pattern"), "pattern"),
    (re.compile(r"^value must be one of"), "enum"),
    (re.compile(r"^minimum: "), "minimum"),
    (re.compile(r"^'oneOf' failed"), "oneOf"),
    (re.compile(r"^additional properties ((?:'[^']*'(?:, )?)+) not allowed"), "additional"),
)


def schema_errors(output: str) -> set[SchemaError]:
    """The schema complaints in helm's output (`helm lint` or `helm template`), helm 3 or helm 4."""
    found: set[SchemaError] = set()
    for match in _HELM3.finditer(output):
        path = "" if match[1] == "(root)" else match[1]
        found |= _complaints(path, match[2], _HELM3_KINDS, lambda names: [names])
    for match in _HELM4.finditer(output):
        path = ".".join(p.replace("~1", "/").replace("~0", "~") for p in match[1].split("/")[1:])
        found |= _complaints(path, match[2], _HELM4_KINDS, lambda names: re.findall(r"'([^']*)'", names))
    return found


def _complaints(
    path: str, message: str, kinds: tuple[tuple[re.Pattern[str], str], ...], names: Callable[[str], list[str]]
) -> set[SchemaError]:
    for pattern, kind in kinds:
        match = pattern.search(message)
        if match is None:
            continue
        if kind == "type":
            return {SchemaError(path, kind, match[1])}
        if kind == "additional":
            return {SchemaError(f"{path}.{name}".lstrip("."), kind) for name in names(match[1])}
        return {SchemaError(path, kind)}
    return set()
