"""Grafana dashboards (JSON) and provisioning files from `boards.dashboards()`, via grafanalib.

grafanalib still emits a few pre-Grafana-8 shapes (bar gauge `fieldOptions`, schema version 12,
template `current` values); `_modernise` rewrites those so the JSON is what a current Grafana
saves itself. Every panel and query uses the `${datasource}` variable.
"""

from __future__ import annotations

import json
from typing import Any

from grafanalib import core as G

from .boards import dashboards
from .panels import ALL_VALUE, DashboardDef, PanelDef, agent_starts, board_variables, ref_id, variable_query
from .settings import Settings

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SCHEMA_VERSION = 39
GRID_WIDTH = 24
_LEGACY_DASHBOARD_KEYS = ("rows", "hideControls", "sharedCrosshair", "style", "gnetId")


def _steps(panel: PanelDef) -> list[dict[str, Any]]:
    return [{"color": color, "value": value} for color, value in panel.thresholds]


def _targets(panel: PanelDef) -> list[Any]:
    return [
        G.Target(
            expr=q.expr,
            legendFormat=q.legend,
            refId=ref_id(i),
            instant=q.instant,
            format=G.TABLE_TARGET_FORMAT if q.table else G.TIME_SERIES_TARGET_FORMAT,
            datasource=dict(DATASOURCE),
            intervalFactor=1,
        )
        for i, q in enumerate(panel.queries)
    ]


def _field_defaults(panel: PanelDef) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.mappings:
        defaults["mappings"] = [
            {"type": "value", "options": {value: {"text": text, "color": color, "index": i}}}
            for i, (value, text, color) in enumerate(panel.mappings)
        ]
    if panel.links:
        defaults["links"] = [{"title": title, "url": url, "targetBlank": True} for title, url in panel.links]
    return {"fieldConfig": {"defaults": defaults}}


def _table_transformations(panel: PanelDef) -> list[dict[str, Any]]:
    single = len(panel.queries) == 1
    value_name = {c.ref_id: "Value" if single else f"Value #{c.ref_id}" for c in panel.columns}
    keep = [*panel.keep_labels, *value_name.values()]
    order = {name: i for i, name in enumerate(keep)}
    steps: list[dict[str, Any]] = []
    if len(panel.queries) > 1:
        steps.append({"id": "merge", "options": {}})
    steps.append({"id": "filterFieldsByName", "options": {"include": {"names": keep}}})
    steps.append(
        {
            "id": "organize",
            "options": {
                "excludeByName": {},
                "indexByName": order,
                "renameByName": {value_name[c.ref_id]: c.title for c in panel.columns},
            },
        }
    )
    return steps


def _table_overrides(panel: PanelDef) -> list[dict[str, Any]]:
    return [
        {"matcher": {"id": "byName", "options": c.title}, "properties": [{"id": "unit", "value": c.unit}]}
        for c in panel.columns
    ]


def _panel(panel: PanelDef, pos: Any) -> Any:
    common: dict[str, Any] = {
        "title": panel.title,
        "description": panel.description,
        "dataSource": dict(DATASOURCE),
        "targets": _targets(panel),
        "gridPos": pos,
    }
    extra = _field_defaults(panel)
    if panel.kind == "timeseries":
        return G.TimeSeries(
            **common,
            unit=panel.unit,
            thresholds=_steps(panel),
            legendDisplayMode="list",
            tooltipMode="multi",
            tooltipSort="desc",
            lineWidth=1,
            fillOpacity=10,
            extraJson=extra,
            thresholdsStyleMode="line" if len(panel.thresholds) > 1 else "off",
        )
    if panel.kind == "stat":
        return G.Stat(
            **common,
            format=panel.unit,
            reduceCalc="lastNotNull",
            graphMode="none",
            thresholds=_steps(panel),
            colorMode="value",
            textMode="value_and_name",
            color={"mode": "thresholds"},
            noValue="no data",
            extraJson=extra,
        )
    if panel.kind == "table":
        sort = [G.TableSortByField(displayName=panel.sort_by, desc=True)] if panel.sort_by else []
        return G.Table(
            **common,
            unit=panel.unit,
            transformations=_table_transformations(panel),
            overrides=_table_overrides(panel),
            sortBy=sort,
            filterable=True,
            thresholds=_steps(panel),
            extraJson=extra,
        )
    if panel.kind == "bargauge":
        return G.BarGauge(**common, format=panel.unit, thresholds=[], extraJson=extra)
    if panel.kind == "text":
        return G.Text(
            title=panel.title,
            description=panel.description,
            dataSource=dict(DATASOURCE),
            gridPos=pos,
            content=panel.content,
            mode=G.TEXT_MODE_MARKDOWN,
        )
    raise ValueError(f"unknown panel kind {panel.kind!r}")


def _layout(panels: tuple[PanelDef, ...]) -> list[Any]:
    """Left to right, wrapping at the grid width; a row is as tall as its tallest panel."""
    out, x, y, row_height = [], 0, 0, 0
    for panel in panels:
        if x + panel.width > GRID_WIDTH:
            x, y, row_height = 0, y + row_height, 0
        out.append(_panel(panel, G.GridPos(h=panel.height, w=panel.width, x=x, y=y)))
        x += panel.width
        row_height = max(row_height, panel.height)
    return out


def _templating(dash: DashboardDef, s: Settings) -> Any:
    variables = [
        G.Template(
            name="datasource", label="Data source", query="prometheus", type="datasource", default=s.datasource_uid
        ),
    ]
    for var in board_variables(s, dash):
        variables.append(
            G.Template(
                name=var.name,
                label=var.label,
                type="query",
                dataSource=dict(DATASOURCE),
                query=variable_query(s, var),
                includeAll=True,
                allValue=ALL_VALUE,
                multi=True,
                refresh=G.REFRESH_ON_TIME_RANGE_CHANGE,
                sort=G.SORT_ALPHA_ASC,
            )
        )
    return G.Templating(list=variables)


def _annotations(dash: DashboardDef, s: Settings) -> Any:
    """Grafana's built-in annotations and alerts, then the agents' starts (`panels.agent_starts`)."""
    starts = agent_starts(s, dash)
    return G.Annotations(
        list=[
            {
                "builtIn": 1,
                "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                "enable": True,
                "hide": True,
                "iconColor": "rgba(0, 211, 255, 1)",
                "name": "Annotations & Alerts",
                "type": "dashboard",
            },
            {
                "datasource": dict(DATASOURCE),
                "enable": True,
                "hide": False,
                "iconColor": starts.color,
                "name": starts.name,
                "expr": starts.expr,
                "step": starts.step,
                "titleFormat": starts.title,
                "textFormat": starts.text,
                "tagKeys": ",".join(starts.tag_keys),
                "useValueForTime": False,
            },
        ]
    )


def _modernise(data: dict[str, Any], s: Settings) -> dict[str, Any]:
    """Rewrite what grafanalib still emits in pre-Grafana-8 shapes."""
    data["schemaVersion"] = SCHEMA_VERSION
    for key in _LEGACY_DASHBOARD_KEYS:
        data.pop(key, None)
    for var in data["templating"]["list"]:
        if var["type"] == "datasource":
            var["current"] = {"selected": True, "text": s.datasource_name, "value": s.datasource_uid}
        else:
            # All (issue 47): a board opens on every pod (GPU, kernel, cluster), not on whichever
            # Grafana lists first; one is a choice in the picker.
            var["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
            var["definition"] = var["query"]
        var["options"] = []
        var["regex"] = ""
        for legacy in ("auto", "auto_count", "auto_min", "tagValuesQuery", "tagsQuery", "useTags"):
            var.pop(legacy, None)
    for panel in data["panels"]:
        # Let Grafana size queries to the panel's width (grafanalib pins 100 points).
        panel.pop("maxDataPoints", None)
        if panel.get("targets"):
            # At least two capture periods per step, so $__rate_interval spans two increments.
            panel["interval"] = s.min_interval
        for key in [k for k, v in panel.items() if v is None]:
            del panel[key]
        for target in panel.get("targets", []):
            target["range"] = not target["instant"]
            target["editorMode"] = "code"
            for legacy in ("metric", "step", "target", "query"):
                target.pop(legacy, None)
        if panel["type"] == G.BARGAUGE_TYPE:
            panel["options"] = {
                "displayMode": "gradient",
                "orientation": "horizontal",
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "showUnfilled": True,
                "valueMode": "color",
            }
            defaults = panel["fieldConfig"]["defaults"]
            defaults["color"] = {"mode": "continuous-BlYlRd"}
            defaults["thresholds"] = {"mode": "absolute", "steps": [{"color": "green", "value": None}]}
        if panel["type"] == G.TABLE_TYPE:
            # grafanalib repeats legacy table keys at the top level; Grafana 8+ reads fieldConfig.
            for legacy in ("columns", "fontSize", "mappings", "color"):
                panel.pop(legacy, None)
    return data


def _encode(obj: Any) -> Any:
    """grafanalib objects serialise through their `to_json_data()`."""
    to_json_data = getattr(obj, "to_json_data", None)
    if to_json_data is None:
        raise TypeError(f"cannot serialise {type(obj).__name__} to JSON")
    return to_json_data()


def dashboard_json(dash: DashboardDef, s: Settings) -> dict[str, Any]:
    """One dashboard as the JSON document Grafana stores."""
    board = G.Dashboard(
        title=dash.title,
        uid=dash.uid,
        description=dash.description,
        tags=list(dash.tags),
        panels=_layout(dash.panels),
        templating=_templating(dash, s),
        annotations=_annotations(dash, s),
        time=G.Time("now-6h", "now"),
        refresh="1m",
        timezone="browser",
        graphTooltip=G.GRAPH_TOOLTIP_MODE_SHARED_CROSSHAIR,
        links=[
            G.DashboardLink(
                title="warpwatch",
                type="dashboards",
                tags=["warpwatch"],
                asDropdown=True,
                includeVars=True,
                keepTime=True,
            )
        ],
    ).auto_panel_ids()
    data: dict[str, Any] = json.loads(json.dumps(board.to_json_data(), default=_encode))
    return _modernise(data, s)


def all_dashboards(s: Settings) -> dict[str, dict[str, Any]]:
    """File name -> dashboard JSON for every dashboard."""
    return {d.filename: dashboard_json(d, s) for d in dashboards(s)}


def to_json(data: Any) -> str:
    """Deterministic JSON text (sorted keys, two-space indent, trailing newline)."""
    return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def datasource_provisioning(s: Settings) -> dict[str, Any]:
    """provisioning/datasources/warpwatch.yaml: the Prometheus the dashboards and alerts read."""
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": s.datasource_name,
                "uid": s.datasource_uid,
                "type": "prometheus",
                "access": "proxy",
                "url": s.prometheus_url,
                "isDefault": False,
                "editable": False,
                # prometheusVersion: Grafana asks the label-values API (match[]) for variables instead of
                # downloading every matching series.
                "jsonData": {
                    "httpMethod": "POST",
                    "timeInterval": "30s",
                    "prometheusType": "Prometheus",
                    "prometheusVersion": s.prometheus_version,
                },
            }
        ],
    }


def dashboard_provisioning(s: Settings) -> dict[str, Any]:
    """provisioning/dashboards/warpwatch.yaml: a file provider for the dashboard JSON files."""
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "warpwatch",
                "orgId": 1,
                "folder": s.folder_title,
                "folderUid": s.folder_uid,
                "type": "file",
                "disableDeletion": False,
                "allowUiUpdates": False,
                "updateIntervalSeconds": 60,
                "options": {"path": s.dashboards_path, "foldersFromFilesStructure": False},
            }
        ],
    }
