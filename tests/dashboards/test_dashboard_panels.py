"""The five dashboards: stable uids and titles, modern described panels on the grid, their template
variables, and what the overview, kernels, artefacts and agent-health boards show."""

from __future__ import annotations

import re

from support.boardkit import boards, metric_names, panels
from warpwatch.dashboards.queries import rate_record
from warpwatch.dashboards.settings import DEFAULT_SETTINGS
from warpwatch.export import metricdefs as md
from warpwatch.model import ARTIFACT_KINDS

MODERN_TYPES = {"timeseries", "stat", "table", "bargauge", "heatmap", "text"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def test_five_dashboards_with_stable_uids_and_titles() -> None:
    assert {uid: b["title"] for uid, b in boards().items()} == {
        "warpwatch-fleet": "warpwatch / Fleet",
        "warpwatch-overview": "warpwatch / Overview",
        "warpwatch-kernels": "warpwatch / Kernels",
        "warpwatch-artifacts": "warpwatch / Profiler artefacts",
        "warpwatch-agent-health": "warpwatch / Agent health",
    }
    for board in boards().values():
        assert board["schemaVersion"] >= 36 and board["id"] is None and "warpwatch" in board["tags"]
        ids = [p["id"] for p in board["panels"]]
        assert len(ids) == len(set(ids))


def test_every_panel_is_modern_uses_the_datasource_variable_and_is_described() -> None:
    for uid, panel in panels():
        where = f"{uid}/{panel['title']}"
        assert panel["type"] in MODERN_TYPES, where
        assert panel["datasource"] == DATASOURCE, where
        assert panel["description"].strip(), where
        if panel["type"] == "text":
            assert panel["options"]["content"].strip(), where
            continue
        assert panel["targets"], where
        assert panel["fieldConfig"]["defaults"]["unit"], f"{where}: no unit"
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, where
            assert target["expr"] and target["refId"], where
            assert target["range"] is not target["instant"], where


def test_panels_fit_the_grid_without_overlap() -> None:
    for board in boards().values():
        cells: set[tuple[int, int]] = set()
        for p in board["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24
            area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & area, p["title"]
            cells |= area


def test_template_variables() -> None:
    expected = {
        "warpwatch-fleet": ["datasource", "namespace", "deployment"],
        "warpwatch-overview": ["datasource", "namespace", "pod", "gpu"],
        "warpwatch-kernels": ["datasource", "namespace", "pod", "gpu", "kernel"],
        "warpwatch-artifacts": ["datasource", "namespace", "pod", "gpu", "kernel"],
        "warpwatch-agent-health": ["datasource", "namespace", "pod", "gpu"],
    }
    for uid, board in boards().items():
        variables = board["templating"]["list"]
        assert [v["name"] for v in variables] == expected[uid]
        ds, *queries = variables
        assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
        for v in queries:
            assert v["type"] == "query" and v["datasource"] == DATASOURCE
            # Issue 47 (replacing issue 24's first item): every board opens on All.
            assert v["includeAll"] and v["multi"] and v["current"]["value"] == ["$__all"]
            assert re.fullmatch(rf"label_values\(([a-z_]+:)?warpwatch_[\w:]+(\{{.*\}})?, {v['name']}\)", v["query"])


def test_overview_panels() -> None:
    overview = {p["title"]: p for p in boards()["warpwatch-overview"]["panels"]}
    assert set(overview) == {
        "Estimated occupancy per GPU",
        "Estimated vs NVML GPM SM occupancy",
        "Resident warps per SM per GPU",
        "Busy ratio vs NVML utilisation",
        "Top kernels by time share",
        "Coverage: is the window long enough?",
        "GPUs: Now (last window)",
    }
    side_by_side = [metric_names(t["expr"]) for t in overview["Estimated vs NVML GPM SM occupancy"]["targets"]]
    assert side_by_side == [
        {
            rate_record(DEFAULT_SETTINGS, md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, "pod_gpu"),
            rate_record(DEFAULT_SETTINGS, md.GPU_OBSERVED_SECONDS, "pod_gpu"),
        },
        {md.exposed_name(md.NVML_SM_OCCUPANCY)},
    ]
    top = overview["Top kernels by time share"]
    assert top["type"] == "bargauge" and top["targets"][0]["instant"]
    assert top["targets"][0]["expr"].startswith("topk(10,\n")
    assert metric_names(top["targets"][0]["expr"]) == {
        rate_record(DEFAULT_SETTINGS, md.KERNEL_SECONDS, "pod_kernel"),
        rate_record(DEFAULT_SETTINGS, md.GPU_OBSERVED_SECONDS, "pod_gpu"),
    }


def test_kernels_table_has_every_column() -> None:
    table = next(p for p in boards()["warpwatch-kernels"]["panels"] if p["type"] == "table")
    organize = next(t for t in table["transformations"] if t["id"] == "organize")
    assert list(organize["options"]["renameByName"].values()) == [
        "Corrected warps/SM",
        "Reported warps/SM (min)",
        "Resident warps/SM",
        "Theoretical occupancy",
        "Estimated occupancy",
        "Waves per SM",
        "Time share",
        "Launches/s",
    ]
    units = {o["matcher"]["options"]: o["properties"][0]["value"] for o in table["fieldConfig"]["overrides"]}
    assert units["Time share"] == "percentunit" and units["Launches/s"] == "cps"
    seconds, observed = md.exposed_name(md.KERNEL_SECONDS), md.exposed_name(md.GPU_OBSERVED_SECONDS)
    used = [metric_names(t["expr"]) for t in table["targets"]]
    assert used == [
        {md.exposed_name(md.KERNEL_WARPS_PER_SM_SECONDS), seconds},
        {md.exposed_name(md.KERNEL_REPORTED_WARPS_MIN)},
        {md.exposed_name(md.KERNEL_RESIDENT_WARPS_PER_SM_SECONDS), seconds},
        {md.exposed_name(md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS), seconds},
        {md.exposed_name(md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS), seconds},
        {md.exposed_name(md.KERNEL_WAVES_PER_SM_SECONDS), seconds},
        {seconds, observed},
        {md.exposed_name(md.KERNEL_LAUNCHES_ESTIMATED), observed},
    ]


def test_artifacts_dashboard_explains_every_kind_and_shows_reported_beside_corrected() -> None:
    by_title = {p["title"]: p for p in boards()["warpwatch-artifacts"]["panels"]}
    text = by_title["What the artefact kinds mean"]["options"]["content"]
    for kind in ARTIFACT_KINDS:
        assert f"`{kind}`" in text
    side_by_side = [metric_names(t["expr"]) for t in by_title["Reported vs corrected warps per SM"]["targets"]]
    assert side_by_side == [
        {md.exposed_name(md.KERNEL_REPORTED_WARPS_MIN)},
        {md.exposed_name(md.KERNEL_WARPS_PER_SM_SECONDS), md.exposed_name(md.KERNEL_SECONDS)},
    ]
    by_kind = by_title["Artefacts by kind"]["targets"][0]["expr"]
    assert by_kind.startswith(f"sum by (artifact) (rate({md.exposed_name(md.PROFILER_ARTIFACTS)}{{")


def test_agent_health_panels() -> None:
    titles = [p["title"] for p in boards()["warpwatch-agent-health"]["panels"]]
    assert titles == [
        "Last window age",
        "Failing windows",
        "NVML up",
        "Windows by outcome",
        "Faults by stage and reason",
        "Window processing time",
        "Capture duty cycle",
        "Capture window and period",
        "Kernels folded into other",
        "Overhead budget used",
        "Cost to the server",
        "Capture stop stall",
        "Served slowdown",
    ]
    quantiles = next(p for p in boards()["warpwatch-agent-health"]["panels"] if p["title"] == "Window processing time")
    assert [t["expr"].split(",")[0] for t in quantiles["targets"]] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.9",
        "histogram_quantile(0.99",
    ]
    by_title = {p["title"]: p for p in boards()["warpwatch-agent-health"]["panels"]}
    stops = [t["expr"] for t in by_title["Capture stop stall"]["targets"]]
    assert stops and all(
        e.startswith("histogram_quantile(0.")
        and "by (namespace, pod, source, le)" in e
        and "warpwatch_capture_stop_seconds_bucket{" in e
        for e in stops
    )
    assert [metric_names(t["expr"]) for t in by_title["Cost to the server"]["targets"]] == [
        {md.exposed_name(md.OVERHEAD)},
        {md.exposed_name(md.OVERHEAD_BUDGET)},
    ]
    assert metric_names(by_title["Served slowdown"]["targets"][0]["expr"]) == {md.exposed_name(md.SERVED_SLOWDOWN)}
    used = by_title["Overhead budget used"]
    assert metric_names(used["targets"][0]["expr"]) == {"pod:warpwatch_overhead_budget_used:ratio"}
    red = used["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]
    assert red["value"] == 1 + DEFAULT_SETTINGS.overhead_tolerance
