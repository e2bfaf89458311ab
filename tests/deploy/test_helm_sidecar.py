"""Where the chart runs the sidecar (warpwatch.sidecarMode) and which torch it lets KINETO_USE_DAEMON=1 reach.

Rendered by the real helm binary at several `--kube-version`s, each render validated by
`kubernetes-validate --strict` against the schema of the same Kubernetes minor version.

Facts the expectations rest on, not read from the chart:
- Native sidecars (an init container with `restartPolicy: Always`) are on by default from Kubernetes
  1.29 (SidecarContainers beta; alpha and off in 1.28; GA in 1.33).
- The kubelet counts a restartable init container in the pod's ContainersReady condition exactly like
  a regular container (pkg/kubelet/status/generate.go), and a native sidecar's startupProbe holds back
  the containers after it until it succeeds: so neither probe may be on by default.
- torch 2.7.x to 2.9.x crash at random with KINETO_USE_DAEMON=1: a race in libkineto's start-up
  (pytorch/pytorch#163545), fixed by pytorch/kineto 6fcbc53 of 2025-10-16, after torch 2.9.0;
  torch 2.10 is the first release with the fix.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.helm import CHART, helm_chart, needs_helm

RELEASE, NAMESPACE = "gpu", "inference"
HAZARD = "torch 2.7 to 2.9 crash at random with KINETO_USE_DAEMON=1"
FIRST_FIXED, FIRST_AFFECTED = (2, 10), (2, 7)
pytestmark = needs_helm


def affected(version: str) -> bool:
    """The oracle: does this torch version (or image tag beginning with one) crash under the daemon?"""
    m = re.match(r"v?(\d+)\.(\d+)", version)
    return bool(m) and FIRST_AFFECTED <= (int(m.group(1)), int(m.group(2))) < FIRST_FIXED


def render(values: dict[str, Any], kube_version: str = "1.32.0") -> list[dict[str, Any]]:
    proc = helm_chart(
        "template",
        RELEASE,
        "CHART",
        "--namespace",
        NAMESPACE,
        "--kube-version",
        kube_version,
        "-f",
        "-",
        stdin=yaml.safe_dump(values),
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def refusal(*flags: str) -> str:
    """stderr of a render that must fail cleanly."""
    proc = helm_chart("template", RELEASE, "CHART", "--namespace", NAMESPACE, *flags)
    assert proc.returncode != 0, "rendered"
    assert "goroutine" not in proc.stderr and "panic" not in proc.stderr
    return proc.stderr


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = [o for o in objs if o["kind"] == "Deployment"]
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def _schema_version(kube_version: str) -> str:
    m = re.match(r"v?(\d+)\.(\d+)", kube_version)
    assert m
    return f"{m.group(1)}.{m.group(2)}.0"


# ---------------------------------------------------------------------------------------------
# the sidecar's place


@pytest.mark.parametrize(
    ("kube_version", "mode", "native"),
    [
        ("1.28.0", "auto", False),
        ("1.28.15-gke.1159000", "auto", False),  # managed clusters report pre-release style versions
        ("1.29.0", "auto", True),
        ("v1.29.4-eks-036c24b", "auto", True),
        ("1.33.0", "auto", True),
        ("1.28.0", "regular", False),
        ("1.33.0", "regular", False),
        ("1.29.0", "native", True),
        ("1.33.0", "native", True),
    ],
)
def test_the_sidecar_is_native_exactly_where_the_cluster_runs_native_sidecars(
    kube_version: str, mode: str, native: bool
) -> None:
    import kubernetes_validate

    objs = render({"example": {"enabled": True}, "warpwatch": {"sidecarMode": mode}}, kube_version)
    for obj in objs:
        kubernetes_validate.validate(obj, _schema_version(kube_version), strict=True)
    spec = pod_spec(objs)
    if native:
        (sidecar,) = spec["initContainers"]
        assert sidecar["name"] == "warpwatch" and sidecar["restartPolicy"] == "Always"
        assert [c["name"] for c in spec["containers"]] == ["workload"]
    else:
        assert "initContainers" not in spec
        assert [c["name"] for c in spec["containers"]] == ["workload", "warpwatch"]
        sidecar = spec["containers"][1]
        assert "restartPolicy" not in sidecar  # the API server rejects it outside initContainers
    # Neither probe that could hurt the server: a readinessProbe gates the pod's Ready condition in
    # both modes, a startupProbe of a native sidecar holds back the workload's start.
    assert "readinessProbe" not in sidecar and "startupProbe" not in sidecar
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"


def test_a_native_sidecar_on_a_cluster_without_them_is_an_error_not_a_pod_that_never_starts() -> None:
    stderr = refusal("--kube-version", "1.28.0", "--set", "example.enabled=true,warpwatch.sidecarMode=native")
    assert (
        "warpwatch.sidecarMode=native needs Kubernetes 1.29 or newer (init containers with restartPolicy "
        "Always); the cluster is v1.28.0: use auto or regular"
    ) in stderr


# ---------------------------------------------------------------------------------------------
# torch under KINETO_USE_DAEMON=1


def test_the_example_runs_a_torch_that_survives_the_daemon() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    image = values["example"]["image"]
    assert image["repository"] == "pytorch/pytorch"  # whose tags begin with the torch version
    assert re.match(r"\d+\.\d+\.\d+-", image["tag"]) and not affected(image["tag"]), image["tag"]
    workload = next(
        c for c in pod_spec(render({"example": {"enabled": True}}))["containers"] if c["name"] == "workload"
    )
    assert env_of(workload)["KINETO_USE_DAEMON"] == "1"


@pytest.mark.parametrize(
    ("flags", "where", "version"),
    [
        (
            ("--set", "example.enabled=true,example.image.tag=2.7.0-cuda12.6-cudnn9-runtime"),
            "example.image.tag",
            "2.7.0",
        ),  # the chart's example until this test
        (
            ("--set", "example.enabled=true,example.image.tag=2.8.0-cuda12.8-cudnn9-runtime"),
            "example.image.tag",
            "2.8.0",
        ),
        (("--set", "example.enabled=true,example.image.tag=v2.9.1"), "example.image.tag", "2.9.1"),
        (("--set-string", "kineto.torchVersion=2.9.1+cu128"), "kineto.torchVersion", "2.9.1"),
        (("--set-string", "kineto.torchVersion=2.7"), "kineto.torchVersion", "2.7"),
        (
            ("--set-string", "kineto.torchVersion=2.8.0", "--set", "example.enabled=true"),
            "kineto.torchVersion",
            "2.8.0",
        ),
    ],
)
def test_a_torch_that_crashes_under_the_daemon_is_refused_with_what_to_do(
    flags: tuple[str, ...], where: str, version: str
) -> None:
    assert affected(version)
    stderr = refusal(*flags)
    assert (
        f"{where} is torch {version}: {HAZARD} (a race in Kineto's start-up, pytorch/pytorch#163545; "
        "fixed in torch 2.10)" in stderr
    )
    assert "Use torch 2.10 or newer" in stderr and "kineto.allowAffectedTorch=true" in stderr


@pytest.mark.parametrize(
    "tag",
    [
        "2.6.0-cuda12.4-cudnn9-runtime",
        "2.10.0-cuda12.8-cudnn9-runtime",
        "2.13.0-cuda13.0-cudnn9-runtime",
        "2.10.1",
        "latest",
    ],
)
def test_other_torch_versions_render_with_the_daemon(tag: str) -> None:
    assert not affected(tag)
    workload = pod_spec(render({"example": {"enabled": True, "image": {"tag": tag}}}))["containers"][0]
    assert env_of(workload)["KINETO_USE_DAEMON"] == "1"


def test_the_refusal_yields_to_an_explicit_choice_and_is_moot_without_the_daemon() -> None:
    tag = {"example": {"enabled": True, "image": {"tag": "2.8.0-cuda12.8-cudnn9-runtime"}}}
    accepted = pod_spec(render({**tag, "kineto": {"allowAffectedTorch": True, "torchVersion": "2.9.1"}}))
    assert env_of(accepted["containers"][0])["KINETO_USE_DAEMON"] == "1"
    no_daemon = pod_spec(
        render(
            {
                **tag,
                "kineto": {"useDaemon": False, "torchVersion": "2.9.1"},
                "warpwatch": {"config": {"source": ["dir:/tmp/warpwatch"]}},
            }
        )
    )
    assert not [k for k in env_of(no_daemon["containers"][0]) if k.startswith("KINETO_")]


@pytest.fixture(scope="module")
def probe_chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the chart with a template that answers warpwatch.torchAffected for .Values.probe."""
    root = tmp_path_factory.mktemp("probe") / "warpwatch"
    shutil.copytree(CHART, root)
    schema = json.loads((root / "values.schema.json").read_text(encoding="utf-8"))
    schema["properties"]["probe"] = {"type": "array"}
    schema["properties"]["legacy"] = {"type": "boolean"}
    (root / "values.schema.json").write_text(json.dumps(schema), encoding="utf-8")
    # A Deployment written before sidecarMode: the sidecar included under `containers:`.
    (root / "templates" / "legacy.yaml").write_text(
        "{{- if .Values.legacy }}\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: legacy\n"
        "spec:\n  selector:\n"
        "    matchLabels: {app: legacy}\n  template:\n    metadata:\n      labels: {app: legacy}\n"
        "    spec:\n      containers:\n        - name: server\n          image: server:1\n"
        '        {{- include "warpwatch.sidecar" . | nindent 8 }}\n{{- end }}\n',
        encoding="utf-8",
    )
    (root / "templates" / "probe.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe\ndata:\n  answers: {{ $out := list }}"
        '{{ range .Values.probe }}{{ $out = append $out (eq (include "warpwatch.torchAffected" .) "true") }}'
        "{{ end }}{{ $out | toJson | quote }}\n",
        encoding="utf-8",
    )
    return root


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    versions=st.lists(
        st.tuples(
            st.sampled_from(["", "v"]),
            st.integers(0, 3),
            st.integers(0, 20),
            st.integers(0, 12),
            st.sampled_from(["", "-cuda12.8-cudnn9-runtime", "+cu128", ".post1", "a0"]),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_the_charts_torch_range_is_the_fixed_range_for_any_version_text(
    probe_chart: Path, versions: list[tuple[str, int, int, int, str]]
) -> None:
    """warpwatch.torchAffected over generated versions, in one render each, against the oracle above."""
    texts = [f"{v}{a}.{b}.{c}{suffix}" for v, a, b, c, suffix in versions]
    proc = helm_chart(
        "template",
        RELEASE,
        "CHART",
        "--show-only",
        "templates/probe.yaml",
        "-f",
        "-",
        stdin=yaml.safe_dump({"probe": texts}),
        chart=probe_chart,
    )
    assert proc.returncode == 0, proc.stderr
    answers = json.loads(yaml.safe_load(proc.stdout)["data"]["answers"])
    assert answers == [affected(t) for t in texts]


def test_a_deployment_that_includes_the_old_sidecar_template_is_told_what_to_include(probe_chart: Path) -> None:
    def legacy(*flags: str) -> subprocess.CompletedProcess[str]:
        return helm_chart(
            "template",
            RELEASE,
            "CHART",
            "--show-only",
            "templates/legacy.yaml",
            "--set",
            "legacy=true",
            *flags,
            chart=probe_chart,
        )

    old = legacy("--kube-version", "1.28.0")
    assert old.returncode == 0, old.stderr
    (_server, sidecar) = yaml.safe_load(old.stdout)["spec"]["template"]["spec"]["containers"]
    assert sidecar["name"] == "warpwatch" and "restartPolicy" not in sidecar
    assert legacy("--kube-version", "1.33.0", "--set", "warpwatch.sidecarMode=regular").returncode == 0
    # Where the sidecar would run native, restartPolicy Always in `containers:` is refused by the
    # API server at apply time: the render fails first, naming the includes to use.
    new = legacy("--kube-version", "1.33.0")
    assert new.returncode != 0
    assert (
        "warpwatch.sidecar renders a regular container, but warpwatch.sidecarMode=auto makes the sidecar a "
        'native sidecar on Kubernetes v1.33.0: include "warpwatch.initContainers" under initContainers and '
        '"warpwatch.containers" under containers instead'
    ) in new.stderr
