"""What the Helm chart carries that is generated elsewhere: the monitoring files and the values table.

`warpwatch dashboards build` writes the dashboards and alert rules into `dashboards/`. A Helm
chart can read only files inside itself (`.Files.Get`), so the chart carries byte-identical copies
under `helm/warpwatch/files/`; `sync` refreshes them (the dashboards build calls it) and `check`
says which are stale (a test runs it). The compose stack (`deploy/docker-compose.yml`) mounts
`dashboards/` directly and needs no copies. The same two functions keep the values table of
`helm/warpwatch/README.md` generated from the comments of `values.yaml` (`warpwatch.dashboards.chartdoc`).

| source (under the repository root) | copy |
|---|---|
| `dashboards/*.json` | `helm/warpwatch/files/dashboards/*.json` |
| `dashboards/alerts/warpwatch-rules.yaml` | `helm/warpwatch/files/alerts/warpwatch-rules.yaml` |

A copy folder holds nothing but copies: a file there without a source (a dashboard that was
removed) is deleted by `sync` and reported by `check`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import WarpwatchError
from . import chartdoc


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


def _extra_files(repo_root: Path, pairs: list[tuple[Path, Path]]) -> list[Path]:
    """Files in the copy folders that no source maps to."""
    wanted = {dest for _, dest in pairs}
    extra: list[Path] = []
    for dest_dir in sorted({repo_root / rule.dest_dir for rule in RULES}):
        if dest_dir.is_dir():
            extra.extend(p for p in sorted(dest_dir.iterdir()) if p.is_file() and p not in wanted)
    return extra


def sync(repo_root: Path) -> list[Path]:
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
    for path in _extra_files(repo_root, pairs):
        path.unlink()
        changed.append(path)
    table = _values_table(repo_root)
    if table is not None and table[1] != table[0].read_text(encoding="utf-8"):
        table[0].write_text(table[1], encoding="utf-8")
        changed.append(table[0])
    return changed


def _values_table(repo_root: Path) -> tuple[Path, str] | None:
    """(chart README, its text with a fresh values table); None without a chart.

    Raises chartdoc.ChartDocError when values.yaml has an undocumented value."""
    values, readme = repo_root / CHART_VALUES, repo_root / CHART_README
    if not (values.is_file() and readme.is_file()):
        return None
    text = readme.read_text(encoding="utf-8")
    return readme, chartdoc.replace_table(text, values.read_text(encoding="utf-8"))


def check(repo_root: Path) -> list[str]:
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
    for path in _extra_files(repo_root, pairs):
        problems.append(f"{path.relative_to(repo_root)}: no such file in the generated sources")
    try:
        table = _values_table(repo_root)
    except chartdoc.ChartDocError as exc:
        problems.append(f"{CHART_VALUES}: {exc}")
    else:
        if table is not None and table[1] != table[0].read_text(encoding="utf-8"):
            problems.append(
                f"{CHART_README}: the values table differs from {CHART_VALUES} (run `warpwatch dashboards build`)"
            )
    return problems
