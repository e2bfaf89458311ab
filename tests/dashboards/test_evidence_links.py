"""From an alert or a panel to the traces its pod's agent kept: the `evidence_url` annotation of the
alerts about one pod, and the Kernels board's data link."""

from __future__ import annotations

import json

from warpwatch.dashboards import rules
from warpwatch.dashboards.grafana import all_dashboards
from warpwatch.dashboards.settings import DEFAULT_SETTINGS, Settings

POD = {"namespace": "ml", "pod": "vllm-0", "gpu": "1"}


def annotations_of(s: Settings) -> dict[str, dict[str, str]]:
    return {r["alert"]: r["annotations"] for g in rules.prometheus_groups(s) for r in g["rules"] if "alert" in r}


def test_an_alert_about_a_pod_links_to_that_pods_kept_traces_through_kubectl_proxy() -> None:
    annotations = annotations_of(DEFAULT_SETTINGS)
    url = rules.render_template(annotations["WarpwatchGpuOccupancyDegraded"]["evidence_url"], POD, 0.5)
    assert url == "http://localhost:8001/api/v1/namespaces/ml/pods/vllm-0:9946/proxy/evidence"
    about_pods = {name for name, a in annotations.items() if "evidence_url" in a}
    assert {"WarpwatchGpuOccupancyDegraded", "WarpwatchProfilerArtifacts"} <= about_pods
    assert "WarpwatchKernelOccupancyDegraded" not in about_pods  # per deployment: no one pod to name


def test_the_evidence_url_is_a_setting() -> None:
    s = Settings(evidence_url="https://evidence.example/{namespace}/{pod}/evidence")
    url = rules.render_template(annotations_of(s)["WarpwatchGpuOccupancyDegraded"]["evidence_url"], POD, 0.5)
    assert url == "https://evidence.example/ml/vllm-0/evidence"


def test_the_kernels_boards_occupancy_panel_links_to_the_pods_traces_in_the_boards_range() -> None:
    (board,) = [b for b in all_dashboards(DEFAULT_SETTINGS).values() if b.get("uid") == "warpwatch-kernels"]
    panels = {p["title"]: p for p in json.loads(json.dumps(board))["panels"]}
    (link,) = panels["Estimated vs theoretical occupancy"]["fieldConfig"]["defaults"]["links"]
    assert link["url"] == (
        "http://localhost:8001/api/v1/namespaces/${__field.labels.namespace}/pods/"
        "${__field.labels.pod}:9946/proxy/evidence"
        "?since=${__from:date:seconds}&until=${__to:date:seconds}"
    )
