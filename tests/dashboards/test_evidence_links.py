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
    url = rules.render_template(annotations["WarpwatchOccupancyDisagreesWithNvml"]["evidence_url"], POD, 0.5)
    assert url == "http://localhost:8001/api/v1/namespaces/ml/pods/vllm-0:9946/proxy/evidence"
    about_pods = {name for name, a in annotations.items() if "evidence_url" in a}
    assert {"WarpwatchOccupancyDisagreesWithNvml", "WarpwatchProfilerArtifacts"} <= about_pods
    assert "WarpwatchKernelOccupancyRegressed" not in about_pods  # per deployment: no one pod to name


def test_an_alert_about_a_deployment_says_how_to_diff_every_pods_kept_windows_since_the_drop_began() -> None:
    """WarpwatchKernelOccupancyRegressed fires per deployment and kernel after `for` = degraded_for (30m)
    + inhibit_margin (5m) over a mean of the last degraded_window (15m): the drop began at most 50m ago.
    Each pod's agent kept its own traces, so the annotation loops over the deployment's pods, and diffs
    the window each kept for the drop with its last baseline window (issue 45)."""
    evidence = annotations_of(DEFAULT_SETTINGS)["WarpwatchKernelOccupancyRegressed"]["evidence"]
    text = rules.render_template(evidence, {"namespace": "ml", "deployment": "vllm", "kernel": "gemm"}, 0.5)
    assert text.startswith(
        "for p in $(kubectl -n ml get pods -l app.kubernetes.io/instance=vllm -o name | cut -d/ -f2); do "
        'echo "== $p"; warpwatch evidence diff http://localhost:8001/api/v1/namespaces/ml/pods/$p:9946/proxy '
        "--since 50m; done"
    )
    about_deployments = {name for name, a in annotations_of(DEFAULT_SETTINGS).items() if "evidence" in a}
    assert about_deployments == {
        "WarpwatchKernelOccupancyRegressed",
        "WarpwatchOccupancyRegressed",
        "WarpwatchKernelLaunchChanged",
    }


def test_the_pod_label_that_names_a_deployment_is_a_setting() -> None:
    s = Settings(deployment_pod_label="app", evidence_url="https://ev.example/{namespace}/{pod}/evidence")
    evidence = annotations_of(s)["WarpwatchKernelOccupancyRegressed"]["evidence"]
    text = rules.render_template(evidence, {"namespace": "ml", "deployment": "vllm"}, 0.5)
    assert "get pods -l app=vllm " in text and " diff https://ev.example/ml/$p --since " in text


def test_the_evidence_url_is_a_setting() -> None:
    s = Settings(evidence_url="https://evidence.example/{namespace}/{pod}/evidence")
    url = rules.render_template(annotations_of(s)["WarpwatchOccupancyDisagreesWithNvml"]["evidence_url"], POD, 0.5)
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
