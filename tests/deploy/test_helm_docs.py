"""The chart's own documentation, rendered by the real helm binary: NOTES.txt for every value set,
and the values table of README.md generated from the comments of values.yaml
(warpwatch.dashboards.chartdoc)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from support.helm import (
    CHART,
    FULLNAME,
    NAMESPACE,
    RELEASE,
    VALUE_SETS,
    _helm,
    _value_paths,
    chart_with_notes,
    needs_helm,
    values_of,
)
from warpwatch import __version__
from warpwatch.dashboards import chartdoc

pytestmark = needs_helm


@pytest.mark.parametrize("name", list(VALUE_SETS))
def test_notes_render_for_every_value_set(name: str, tmp_path: Path) -> None:
    chart = chart_with_notes(tmp_path)
    text = _helm(
        "template",
        RELEASE,
        str(chart),
        "--namespace",
        NAMESPACE,
        "--show-only",
        "templates/notes.yaml",
        "-f",
        "-",
        stdin=yaml.safe_dump(VALUE_SETS[name]),
    ).stdout
    rendered = yaml.safe_load(text)["data"]["notes"]
    values = values_of(name)
    assert f"warpwatch {__version__}" in rendered
    assert ("-example" in rendered) == values["example"]["enabled"]
    assert ('"warpwatch.containers"' in rendered) != values["example"]["enabled"]
    assert ("NetworkPolicy" in rendered) == values["networkPolicy"]["enabled"]
    if values["service"]["enabled"]:
        assert f"port-forward svc/{values['fullnameOverride'] or FULLNAME}" in rendered


def test_the_readme_values_table_is_generated_from_values_yaml_and_current() -> None:
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    values_text = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert chartdoc.replace_table(readme, values_text) == readme, "run `warpwatch dashboards build`"
    table = readme[readme.index(chartdoc.BEGIN) : readme.index(chartdoc.END)]
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
    from warpwatch.config.table import settings_table_markdown

    agent = {}
    for line in settings_table_markdown().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        agent[cells[2].strip("`")] = cells[3]
    rows = {
        r.key.removeprefix("warpwatch.config."): r.description
        for r in chartdoc.rows((CHART / "values.yaml").read_text(encoding="utf-8"))
        if r.key.startswith("warpwatch.config.")
    }
    assert set(rows) == set(agent)
    for name, description in rows.items():
        quoted = re.findall(r"\[([^\]\"]+)\]", description)  # (a JSON list in a quoted flag is no default)
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
