"""(continued from test_helm.py) The Helm chart, rendered by the real helm binary and checked by real validators."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from support.helm import (
    AGENT_UID,
    ALL_CONFIG,
    ALL_CONFIG_EXPECTED,
    CHART,
    CRD_GROUP,
    NAMESPACE,
    PROMTOOL,
    RELEASE,
    ROOT,
    VALUE_SETS,
    _helm,
    by_kind,
    container,
    env_of,
    mounts_of,
    needs_helm,
    one,
    pod_templates,
    render,
    selects,
    values_of,
)
from warpwatch import __version__
from warpwatch.config.load import load_config
from warpwatch.config.table import SETTINGS, SETTINGS_BY_NAME
from warpwatch.dashboards import deploysync

pytestmark = needs_helm

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
    assert env_of(sidecar) == {
        "WARPWATCH_SOURCE": "kineto-daemon",
        "WARPWATCH_TRACE_DIR": "/tmp/warpwatch",
        "WARPWATCH_LOG_FORMAT": "json",
        "WARPWATCH_EVIDENCE_DIR": "/var/lib/warpwatch/evidence",
        "WARPWATCH_EVIDENCE_BYTES": "900MiB",
    }
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


def test_the_evidence_store_is_an_emptydir_larger_than_what_the_agent_keeps_by_default() -> None:
    template = pod_templates(render("example"))[0]
    sidecar = container(template, "warpwatch")
    config = load_config(environ=env_of(sidecar))
    assert mounts_of(sidecar)["warpwatch-evidence"] == str(config.evidence_dir) == "/var/lib/warpwatch/evidence"
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["warpwatch-evidence"] == {"name": "warpwatch-evidence", "emptyDir": {"sizeLimit": "1Gi"}}
    assert config.evidence_bytes == 900 * 1024**2 < 1024**3  # the kubelet evicts a pod over its emptyDir limit


def test_the_evidence_store_can_be_a_volume_the_user_names() -> None:
    template = pod_templates(render("evidence-claim"))[0]
    mounts = mounts_of(container(template, "warpwatch"))
    assert mounts["evidence"] == "/var/lib/warpwatch/evidence" and "warpwatch-evidence" not in mounts
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert "warpwatch-evidence" not in volumes
    assert volumes["evidence"]["persistentVolumeClaim"] == {"claimName": "warpwatch-evidence"}


def test_without_an_evidence_dir_nothing_is_mounted_or_kept() -> None:
    template = pod_templates(render("no-evidence"))[0]
    sidecar = container(template, "warpwatch")
    assert "WARPWATCH_EVIDENCE_DIR" not in env_of(sidecar)
    assert "warpwatch-evidence" not in mounts_of(sidecar)
    assert "warpwatch-evidence" not in {v["name"] for v in template["spec"]["volumes"]}


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


# The sidecar's place (sidecarMode) and the torch check: tests/deploy/test_helm_sidecar.py.


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
    assert first == {
        "action": "replace",
        "sourceLabels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
        "targetLabel": "deployment",
    }
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
    assert service["spec"]["ports"] == [
        {"name": "http-metrics", "port": 8080, "targetPort": "ww-metrics", "protocol": "TCP"}
    ]
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
    configmaps = [
        o
        for o in by_kind(render(name), "ConfigMap")
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboards"
    ]
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
