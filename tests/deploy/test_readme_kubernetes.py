"""The walk-through "Kubernetes: from nothing to a traced vLLM" (docs/kubernetes.md), exercised as far as it can be.

No cluster, registry or Grafana is reachable from these machines. So: the files the section shows
are written out as it shows them, `cp` and `helm dependency build` run as written, `helm install`
becomes `helm lint --strict` + `helm template` with the same arguments (on a cluster that serves
monitoring.coreos.com/v1, as kube-prometheus-stack's does, and on one that does not), every object
passes `kubernetes-validate --strict`, and every name the later commands use (Service, port,
metrics, dashboards, labels, image) is checked against what the chart renders and the agent
exports. The image build itself runs in tests/deploy/test_image.py (podman, same Dockerfile and context).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.helm import HELM, needs_helm
from support.paths import ROOT
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch import __version__
from warpwatch.export import metricdefs

PAGE = ROOT / "docs" / "kubernetes.md"
CHART = ROOT / "helm" / "warpwatch"
CRD_GROUP = "monitoring.coreos.com/v1"
KUBE_VERSION = "1.32.0"
OLD_KUBE_VERSION = "1.28.0"
"""The newest Kubernetes without native sidecars on by default (they are from 1.29)."""
VLLM_TORCH = {"v0.10.1": "2.7.1", "v0.14.0": "2.9.1", "v0.15.0": "2.9.1", "v0.16.0": "2.9.1", "v0.17.0": "2.10.0"}
"""The torch each vLLM release pins (`torch==` in the requirements of its PyPI wheel)."""


pytestmark = needs_helm


def _section() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("\n## Kubernetes: from nothing to a traced vLLM\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", _section(), re.S)


def _commands() -> list[str]:
    return [line for block in _blocks("bash") for line in block.strip().splitlines()]


def _command(prefix: str) -> list[str]:
    (line,) = [c for c in _commands() if c.startswith(prefix)]
    return shlex.split(line.rstrip("&").strip())


def _files() -> dict[str, str]:
    files = {}
    for block in _blocks("yaml"):
        m = re.match(r"# (my-vllm/\S+)\n", block)
        assert m, f"a yaml block of the section names no file: {block[:80]!r}"
        files[m.group(1)] = block
    return files


def _helm(*args: str, cwd: Path, env: dict[str, str]) -> str:
    assert HELM is not None
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
    assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def _isolated(tmp: Path) -> dict[str, str]:
    assert HELM is not None
    return {
        "HELM_CONFIG_HOME": str(tmp / ".helm/config"),
        "HELM_CACHE_HOME": str(tmp / ".helm/cache"),
        "HELM_DATA_HOME": str(tmp / ".helm/data"),
        "HOME": str(tmp),
        "PATH": f"{Path(HELM).parent}:/usr/bin:/bin",
    }


def _install_as_template(command: list[str], *, monitoring: bool, kube_version: str = KUBE_VERSION) -> list[str]:
    """`helm install NAME CHART [flags]` as `helm template` with the same name, chart and flags."""
    assert command[:2] == ["helm", "install"]
    flags = [f for f in command[4:] if f != "--create-namespace"]
    return [
        "template",
        command[2],
        command[3],
        *flags,
        "--kube-version",
        kube_version,
        *(("--api-versions", CRD_GROUP) if monitoring else ()),
    ]


def _validate(objs: list[dict[str, Any]], kube_version: str = KUBE_VERSION) -> None:
    import kubernetes_validate

    for obj in objs:
        if obj["apiVersion"] != CRD_GROUP:
            kubernetes_validate.validate(obj, kube_version, strict=True)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files of step 3 as written, beside a copy of this repository's chart, dependencies built."""
    tmp = tmp_path_factory.mktemp("kubernetes")
    shutil.copytree(CHART, tmp / "helm" / "warpwatch")
    for rel, text in _files().items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(text, encoding="utf-8")
    for line in _commands():
        if line.startswith(("cp ", "helm dependency ")):
            argv = shlex.split(line)
            if argv[0] == "helm":
                argv[0] = str(HELM)
            proc = subprocess.run(argv, cwd=tmp, env=_isolated(tmp), capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, f"{line}:\n{proc.stdout}\n{proc.stderr}"
    return tmp


def _render(
    workdir: Path, command: list[str], *, monitoring: bool, kube_version: str = KUBE_VERSION
) -> list[dict[str, Any]]:
    env = _isolated(workdir)
    _helm("lint", "--strict", command[3], *[f for f in command[4:] if f != "--create-namespace"], cwd=workdir, env=env)
    text = _helm(*_install_as_template(command, monitoring=monitoring, kube_version=kube_version), cwd=workdir, env=env)
    return [d for d in yaml.safe_load_all(text) if d]


def _by(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def _containers(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = template["spec"]
    return {c["name"]: c for c in spec["containers"] + spec.get("initContainers", [])}


def _env(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def test_the_section_shows_every_file_and_step() -> None:
    assert set(_files()) == {"my-vllm/Chart.yaml", "my-vllm/values.yaml", "my-vllm/templates/deployment.yaml"}
    starts = [c.split()[0:2] for c in _commands()]
    for step in (
        ["helm", "repo"],
        ["docker", "build"],
        ["docker", "push"],
        ["helm", "dependency"],
        ["helm", "install"],
        ["kubectl", "-n"],
        ["curl", "-s"],
    ):
        assert step in starts, step


@pytest.mark.slow
def test_the_vllm_release_renders_a_traced_vllm_pod_scraped_by_kube_prometheus_stack(workdir: Path) -> None:
    install = _command("helm install serve ")
    namespace = install[install.index("-n") + 1]
    objs = _render(workdir, install, monitoring=True)
    _validate(objs)
    for obj in objs:
        assert obj["metadata"]["namespace"] == namespace, f"{obj['kind']}/{obj['metadata']['name']}"
    (deployment,) = _by(objs, "Deployment")
    template = deployment["spec"]["template"]
    containers = _containers(template)
    vllm, sidecar = containers["vllm"], containers["warpwatch"]
    # Kubernetes 1.32: a native sidecar, started before vLLM and stopped after it.
    assert template["spec"]["initContainers"] == [sidecar] and sidecar["restartPolicy"] == "Always"
    assert [c["name"] for c in template["spec"]["containers"]] == ["vllm"]
    assert "startupProbe" not in sidecar  # it would hold back vLLM's start
    # The server registers with the agent (Kineto's daemon protocol) and writes where it reads.
    assert _env(vllm)["KINETO_USE_DAEMON"] == "1"
    mounts = {c: {m["name"]: m["mountPath"] for m in containers[c]["volumeMounts"]} for c in containers}
    assert mounts["vllm"]["warpwatch-traces"] == mounts["warpwatch"]["warpwatch-traces"] == "/tmp/warpwatch"
    assert _env(vllm)["KINETO_ONDEMAND_TRACE_DIR"] == "/tmp/warpwatch"
    # Safe in a serving pod: no readiness gate from the sidecar, no GPU for it, vLLM's own readiness.
    assert "readinessProbe" not in sidecar and sidecar["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "nvidia.com/gpu" not in sidecar["resources"].get("limits", {})
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert vllm["readinessProbe"]["httpGet"]["path"] == "/health"
    # The image the section built and pushed.
    (build,) = [shlex.split(c) for c in _commands() if c.startswith("docker build ")]
    assert sidecar["image"] == build[build.index("-t") + 1]
    assert build[build.index("-f") + 1] == "deploy/Dockerfile" and build[-1] == "."
    assert sidecar["image"].endswith(f":{__version__}")
    assert _command("docker push ")[-1] == sidecar["image"]
    # kube-prometheus-stack selects by `release: <its release name>`; its Grafana by grafana_dashboard=1.
    kps_release = _command("helm install kube-prometheus-stack ")[2]
    (service,) = _by(objs, "Service")
    (monitor,) = _by(objs, "ServiceMonitor")
    (rule,) = _by(objs, "PrometheusRule")
    assert monitor["metadata"]["labels"]["release"] == kps_release == rule["metadata"]["labels"]["release"]
    assert all(template["metadata"]["labels"].get(k) == v for k, v in service["spec"]["selector"].items())
    assert all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    dashboards = [c for c in _by(objs, "ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    titles = {json.loads(next(iter(c["data"].values())))["title"] for c in dashboards}
    assert len(dashboards) == len(list((ROOT / "dashboards").glob("*.json")))
    for title in titles:
        assert title.replace("warpwatch / ", "") in _section() or title in _section(), title
    # Step 4: the port-forward names this Service and port; the grep names exported metrics.
    forward = _command("kubectl -n inference port-forward svc/serve-warpwatch")
    assert forward[1:3] == ["-n", namespace] and forward[4] == f"svc/{service['metadata']['name']}"
    assert int(forward[5]) == service["spec"]["ports"][0]["port"]
    curl = next(c for c in _commands() if c.startswith("curl "))
    names = set(re.search(r"\^warpwatch_\((.*?)\)", curl).group(1).split("|"))  # type: ignore[union-attr]
    exported = {d.name for d in vars(metricdefs).values() if isinstance(d, metricdefs.MetricDef)}
    exported |= {f"{name}_total" for name in exported}  # counters are exposed with _total
    for name in names:
        assert f"warpwatch_{name}" in exported, name
    assert f"serviceMonitor/{namespace}/{monitor['metadata']['name']}/0" in _section()


@pytest.mark.slow
def test_on_a_cluster_without_native_sidecars_the_same_files_render_a_regular_sidecar(workdir: Path) -> None:
    objs = _render(workdir, _command("helm install serve "), monitoring=True, kube_version=OLD_KUBE_VERSION)
    _validate(objs, OLD_KUBE_VERSION)
    (deployment,) = _by(objs, "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    assert "initContainers" not in spec
    assert [c["name"] for c in spec["containers"]] == ["vllm", "warpwatch"]
    assert "restartPolicy" not in spec["containers"][1]  # the API server refuses it outside initContainers


@pytest.mark.slow
def test_the_vllm_image_has_a_torch_that_survives_the_daemon_and_the_values_declare_it(workdir: Path) -> None:
    """torch 2.7 to 2.9 crash at random with KINETO_USE_DAEMON=1 (pytorch/pytorch#163545, fixed in 2.10)."""
    (deployment,) = _by(_render(workdir, _command("helm install serve "), monitoring=True), "Deployment")
    vllm = _containers(deployment["spec"]["template"])["vllm"]
    repository, tag = vllm["image"].rsplit(":", 1)
    assert repository == "vllm/vllm-openai" and tag in VLLM_TORCH, vllm["image"]
    torch = VLLM_TORCH[tag]
    assert tuple(int(x) for x in torch.split(".")[:2]) >= (2, 10), f"{vllm['image']} has torch {torch}"
    values = yaml.safe_load((workdir / "my-vllm" / "values.yaml").read_text(encoding="utf-8"))
    assert values["warpwatch"]["kineto"]["torchVersion"] == torch
    # The declaration is what makes the chart refuse an older vLLM: the same files with v0.10.1.
    older = workdir.parent / "older"
    shutil.copytree(workdir, older)
    values["warpwatch"]["kineto"]["torchVersion"] = VLLM_TORCH["v0.10.1"]
    (older / "my-vllm" / "values.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
    assert HELM is not None
    proc = subprocess.run(
        [HELM, *_install_as_template(_command("helm install serve "), monitoring=True)],
        cwd=older,
        env=_isolated(older),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert (
        "kineto.torchVersion is torch 2.7.1: torch 2.7 to 2.9 crash at random with KINETO_USE_DAEMON=1" in proc.stderr
    )
    assert "pytorch/pytorch#163545" in _section()


def test_without_the_operators_api_the_release_renders_no_monitoring_objects(workdir: Path) -> None:
    objs = _render(workdir, _command("helm install serve "), monitoring=False)
    _validate(objs)
    assert not _by(objs, "ServiceMonitor") and not _by(objs, "PrometheusRule")
    assert not [c for c in _by(objs, "ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]]


def test_the_commented_nvml_setting_gives_the_sidecar_the_nodes_gpus_without_a_second_gpu(
    workdir: Path, tmp_path: Path
) -> None:
    values = (workdir / "my-vllm" / "values.yaml").read_text(encoding="utf-8")
    commented = re.search(r"\n  # warpwatch:\n((?:  #.*\n)+)", values)
    assert commented, "the NVIDIA_VISIBLE_DEVICES lines are gone from my-vllm/values.yaml"
    enabled = values.replace(
        commented.group(0),
        "\n  warpwatch:\n" + "".join(line.replace("  # ", "  ", 1) + "\n" for line in commented.group(1).splitlines()),
    )
    shutil.copytree(workdir / "my-vllm", tmp_path / "my-vllm")
    shutil.copytree(workdir / "helm", tmp_path / "helm")
    shutil.copytree(workdir / "warpwatch", tmp_path / "warpwatch")
    (tmp_path / "my-vllm" / "values.yaml").write_text(enabled, encoding="utf-8")
    objs = _render(tmp_path, _command("helm install serve "), monitoring=True)
    _validate(objs)
    (deployment,) = _by(objs, "Deployment")
    sidecar = _containers(deployment["spec"]["template"])["warpwatch"]
    assert _env(sidecar)["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "nvidia.com/gpu" not in sidecar["resources"].get("limits", {})


def test_the_plain_torch_example_is_the_charts_own_traced_pytorch_loop(workdir: Path) -> None:
    install = _command("helm install gpu helm/warpwatch ")
    objs = _render(workdir, install, monitoring=True)
    _validate(objs)
    (deployment,) = _by(objs, "Deployment")
    containers = _containers(deployment["spec"]["template"])
    assert _env(containers["workload"])["KINETO_USE_DAEMON"] == "1"
    assert containers["warpwatch"]["image"] == f"registry.example.com/ml/warpwatch:{__version__}"
    assert _by(objs, "ServiceMonitor")[0]["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_graph_replayed_kernels_are_unknown_not_zero_and_still_timed(tmp_path: Path) -> None:
    """What the section says of CUDA graphs: no grid/block -> warps and occupancy unknown, time kept."""
    import sys

    doc = trace_doc(
        [
            span(0, 1000),
            kernel("graph_kernel", ts=100, dur=50, grid=None, block=None),
            kernel("eager_kernel", ts=300, dur=50, grid=(264, 1, 1), block=(128, 1, 1)),
        ]
    )
    path = write(tmp_path / "graph.json", doc)
    proc = subprocess.run(
        [sys.executable, "-m", "warpwatch", "analyze", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (trace,) = json.loads(proc.stdout)["traces"]
    kernels = {k["name"]: k for k in trace["kernels"]}
    graph, eager = kernels["graph_kernel"], kernels["eager_kernel"]
    assert graph["warps_per_sm"] is None and graph["estimated_occupancy"] is None
    assert graph["artifacts"] == {"missing_launch_config": 1}
    # Each captured kernel of d = 50 us in a W = 1000 us window stands for W / (W - d) launches.
    assert graph["time_share"] == pytest.approx(50 / 950)
    assert eager["warps_per_sm"] == pytest.approx(264 * 4 / 132)
    assert "missing_launch_config" in _section()
