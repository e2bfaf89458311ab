"""The sidecar and torch values in the chart's NOTES.txt and values.schema.json (where the chart runs
the sidecar and which torch it lets reach the daemon: test_helm_sidecar.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.helm import SchemaError, chart_with_notes, helm_chart, needs_helm, schema_errors

RELEASE, NAMESPACE = "gpu", "inference"
HAZARD = "torch 2.7 to 2.9 crash at random with KINETO_USE_DAEMON=1"
FIRST_FIXED, FIRST_AFFECTED = (2, 10), (2, 7)
pytestmark = needs_helm


def notes(tmp_path: Path, values: dict[str, Any]) -> str:
    chart = chart_with_notes(tmp_path)
    proc = helm_chart(
        "template",
        RELEASE,
        "CHART",
        "--show-only",
        "templates/notes.yaml",
        "-f",
        "-",
        stdin=yaml.safe_dump(values),
        chart=chart,
    )
    assert proc.returncode == 0, proc.stderr
    rendered: str = yaml.safe_load(proc.stdout)["data"]["notes"]
    return rendered


@pytest.mark.parametrize(
    ("values", "warning", "reminder"),
    [
        ({}, False, True),  # the sidecar for your own server, whose torch the chart cannot see
        ({"kineto": {"torchVersion": "2.10.0"}}, False, False),
        ({"example": {"enabled": True}}, False, False),  # its tag says its torch
        ({"example": {"enabled": True, "image": {"tag": "latest"}}}, False, True),
        ({"kineto": {"torchVersion": "2.8.0", "allowAffectedTorch": True}}, True, False),
        (
            {
                "kineto": {"useDaemon": False, "torchVersion": "2.8.0"},
                "warpwatch": {"config": {"source": ["dir:/tmp/warpwatch"]}},
            },
            False,
            False,
        ),
    ],
)
def test_notes_warn_of_the_torch_hazard_where_it_may_apply(
    tmp_path: Path, values: dict[str, Any], warning: bool, reminder: bool
) -> None:
    text = notes(tmp_path, values)
    assert ("WARNING (kineto.allowAffectedTorch): " + HAZARD in text) == warning
    assert ("Check the torch of the traced containers: " + HAZARD in text) == reminder


def test_notes_say_where_the_sidecar_goes(tmp_path: Path) -> None:
    text = notes(tmp_path, {})
    assert 'initContainers += "warpwatch.initContainers" and containers += "warpwatch.containers"' in text
    assert "a native sidecar in initContainers here, warpwatch.sidecarMode=auto" in text


@pytest.mark.parametrize(
    "values",
    [
        {"warpwatch": {"sidecarMode": "auto"}},
        {"warpwatch": {"sidecarMode": "native"}},
        {"warpwatch": {"sidecarMode": "regular"}},
        {"kineto": {"torchVersion": ""}},
        {"kineto": {"torchVersion": "2.10.0"}},
        {"kineto": {"torchVersion": "2.10.0+cu128"}},
        {"kineto": {"torchVersion": "v2.11.1"}},
        {"kineto": {"torchVersion": "2.13"}},
        {"kineto": {"torchVersion": "2.9.1", "allowAffectedTorch": True}},
    ],
    ids=lambda v: json.dumps(v, sort_keys=True),
)
def test_the_schema_accepts_the_sidecar_and_torch_values(values: dict[str, Any]) -> None:
    proc = helm_chart("lint", "--strict", "CHART", "-f", "-", stdin=yaml.safe_dump(values))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("kineto:\n  torchVersion: 2.10\n", SchemaError("kineto.torchVersion", "type", "string")),
        ("kineto:\n  torchVersion: latest\n", SchemaError("kineto.torchVersion", "pattern")),
        ("kineto:\n  allowAffectedTorch: 1\n", SchemaError("kineto.allowAffectedTorch", "type", "boolean")),
        ("warpwatch:\n  sidecarMode: Native\n", SchemaError("warpwatch.sidecarMode", "enum")),
        ("warpwatch:\n  nativeSidecar: true\n", SchemaError("warpwatch.nativeSidecar", "additional")),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_the_schema_rejects_malformed_sidecar_and_torch_values(text: str, complaint: SchemaError) -> None:
    proc = helm_chart("lint", "--strict", "CHART", "-f", "-", stdin=text)
    assert proc.returncode != 0
    assert complaint in schema_errors(proc.stdout + proc.stderr), proc.stdout + proc.stderr
