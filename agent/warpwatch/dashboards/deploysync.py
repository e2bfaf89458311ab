"""What the Helm chart carries that is generated elsewhere: the monitoring files and the values table.

`warpwatch dashboards build` writes the dashboards and alert rules into `dashboards/`. A Helm
chart can read only files inside itself (`.Files.Get`), so the chart carries byte-identical copies
under `helm/warpwatch/files/`; `sync` refreshes them (the dashboards build calls it) and `check`
says which are stale (a test runs it). The compose stack (`deploy/docker-compose.yml`) mounts
`dashboards/` directly and needs no copies. The same two functions keep the values table of
`helm/warpwatch/README.md` generated from the comments of `values.yaml` (`warpwatch.dashboards.chartdoc`),
and generate the alert rules' tunable form, which the chart's PrometheusRule reads beside the copy
(`warpwatch.dashboards.helmrules`; only into a chart whose `templates/prometheusrule.yaml` exists).

| source (under the repository root) | copy |
|---|---|
| `dashboards/*.json` | `helm/warpwatch/files/dashboards/*.json` |
| `dashboards/alerts/warpwatch-rules.yaml` | `helm/warpwatch/files/alerts/warpwatch-rules.yaml` |
| `helmrules.tuning()` (generated, not copied) | `helm/warpwatch/files/alerts/warpwatch-rules.tuning.yaml` |

A copy folder holds nothing but copies: a file there without a source (a dashboard that was
removed) is deleted by `sync` and reported by `check`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from ..errors import WarpwatchError
from . import chartdoc, helmrules
from .settings import DEFAULT_SETTINGS, Settings


@dataclass(frozen=True, slots=True)
class CopyRule:
    """Files `pattern` in `source_dir` are copied to `dest_dir` under the same names."""

    source_dir: str
    pattern: str
    dest_dir: str


RULES: tuple[CopyRule, ...] = (
    CopyRule("dashboards", "*.json", "helm/warpwatch/files/dashboards"),
    CopyRule("dashboards/alerts", "warpwatch-rules.yaml", "helm/warpwatch/files/alerts"),
)


RULES_SOURCE = "dashboards/alerts/warpwatch-rules.yaml"
RULES_TEMPLATE = "helm/warpwatch/templates/prometheusrule.yaml"
RULES_TUNING = "helm/warpwatch/files/alerts/warpwatch-rules.tuning.yaml"
"""The tunable form of the rules, generated (not copied) for a chart whose RULES_TEMPLATE reads it."""

CHART_VALUES = "helm/warpwatch/values.yaml"
CHART_README = "helm/warpwatch/README.md"
"""The chart README's values table is generated from the comments of values.yaml."""


class DeploySyncError(WarpwatchError):
    """The generated files to copy are missing: `dashboards/` has not been built."""


def plan(repo_root: Path) -> list[tuple[Path, Path]]:
    """(source, copy) pairs for every generated file, in a stable order.

    Raises DeploySyncError when a rule matches no source file: copying nothing would empty the
    chart's folder, and the chart renders nothing useful without these files.
    """
    pairs: list[tuple[Path, Path]] = []
    for rule in RULES:
        sources = sorted(p for p in (repo_root / rule.source_dir).glob(rule.pattern) if p.is_file())
        if not sources:
            raise DeploySyncError(
                f"no {rule.source_dir}/{rule.pattern} under {repo_root}: run `warpwatch dashboards build` first"
            )
        pairs.extend((src, repo_root / rule.dest_dir / src.name) for src in sources)
    return pairs


def generated(repo_root: Path, settings: Settings = DEFAULT_SETTINGS) -> list[tuple[Path, str]]:
    """(path, text) of the chart files generated rather than copied: the rules' tunable form.

    Raises DeploySyncError when it would not reproduce the rules in RULES_SOURCE (built with other
    settings than `settings`, e.g. `warpwatch dashboards build --set`): the chart would then
    render rules other than its copy's.
    """
    if not (repo_root / RULES_TEMPLATE).is_file():
        return []
    doc = helmrules.tuning(settings)
    source = yaml.safe_load((repo_root / RULES_SOURCE).read_text(encoding="utf-8")) or {}
    built = {
        r["alert"]: {"expr": r["expr"], "annotations": r["annotations"]}
        for g in source.get("groups") or []
        for r in g["rules"]
        if "alert" in r
    }
    if helmrules.filled_alerts(doc) != built:
        raise DeploySyncError(
            f"{RULES_SOURCE} holds other alerts than these settings generate (built with --set?); "
            f"{RULES_TUNING} must reproduce them: rebuild without --set and tune the chart with prometheusRule values"
        )
    return [(repo_root / RULES_TUNING, helmrules.dump(doc))]


def _extra_files(repo_root: Path, pairs: list[tuple[Path, Path]]) -> list[Path]:
    """Files in the copy folders that no source maps to and that are not generated."""
    wanted = {dest for _, dest in pairs}
    if (repo_root / RULES_TEMPLATE).is_file():
        wanted.add(repo_root / RULES_TUNING)
    extra: list[Path] = []
    for dest_dir in sorted({repo_root / rule.dest_dir for rule in RULES}):
        if dest_dir.is_dir():
            extra.extend(p for p in sorted(dest_dir.iterdir()) if p.is_file() and p not in wanted)
    return extra


def sync(repo_root: Path, settings: Settings = DEFAULT_SETTINGS) -> list[Path]:
    """Bring every copy up to date; return the paths written or deleted (empty: all were current)."""
    pairs = plan(repo_root)
    changed: list[Path] = []
    for src, dest in pairs:
        data = src.read_bytes()
        if dest.is_file() and dest.read_bytes() == data:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        changed.append(dest)
    made = generated(repo_root, settings)
    for path, text in made:
        if not (path.is_file() and path.read_text(encoding="utf-8") == text):
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for path in _extra_files(repo_root, pairs):
        path.unlink()
        changed.append(path)
    table = _values_table(repo_root, settings)
    if table is not None and table[1] != table[0].read_text(encoding="utf-8"):
        table[0].write_text(table[1], encoding="utf-8")
        changed.append(table[0])
    return changed


def _values_table(repo_root: Path, settings: Settings) -> tuple[Path, str] | None:
    """(chart README, its text with a fresh values table and alerts table); None without a chart.

    Raises chartdoc.ChartDocError when values.yaml has an undocumented value."""
    values, readme = repo_root / CHART_VALUES, repo_root / CHART_README
    if not (values.is_file() and readme.is_file()):
        return None
    text = readme.read_text(encoding="utf-8")
    text = helmrules.replace_alerts_table(text, settings)
    return readme, chartdoc.replace_table(text, values.read_text(encoding="utf-8"))


def check(repo_root: Path, settings: Settings = DEFAULT_SETTINGS) -> list[str]:
    """One line per stale copy (missing, different, or without a source); empty when all match.

    `warpwatch dashboards build` (which calls `sync`) refreshes them. When the sources themselves
    are missing, the one line says so.
    """
    try:
        pairs = plan(repo_root)
    except DeploySyncError as exc:
        return [str(exc)]
    problems: list[str] = []
    for src, dest in pairs:
        rel_src, rel_dest = src.relative_to(repo_root), dest.relative_to(repo_root)
        if not dest.is_file():
            problems.append(f"{rel_dest}: missing (copy of {rel_src})")
        elif dest.read_bytes() != src.read_bytes():
            problems.append(f"{rel_dest}: differs from {rel_src}")
    try:
        made = generated(repo_root, settings)
    except DeploySyncError as exc:
        made, problems = [], [*problems, str(exc)]
    for path, text in made:
        if not (path.is_file() and path.read_text(encoding="utf-8") == text):
            problems.append(f"{path.relative_to(repo_root)}: stale (run `warpwatch dashboards build`)")
    for path in _extra_files(repo_root, pairs):
        problems.append(f"{path.relative_to(repo_root)}: no such file in the generated sources")
    try:
        table = _values_table(repo_root, settings)
    except chartdoc.ChartDocError as exc:
        problems.append(f"{CHART_VALUES}: {exc}")
    else:
        if table is not None and table[1] != table[0].read_text(encoding="utf-8"):
            problems.append(
                f"{CHART_README}: the values table differs from {CHART_VALUES}, or the alerts table from the "
                "alert definitions (run `warpwatch dashboards build`)"
            )
    return problems
