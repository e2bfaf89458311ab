"""A real Prometheus over backfilled data: OpenMetrics text -> `promtool tsdb create-blocks-from
openmetrics` -> blocks; recording rules backfilled tier by tier with `promtool tsdb create-blocks-from
rules` (a rule cannot read another's output in one pass); then a Prometheus on the folder.

Used by test_alertmanager and benchmarks/fleet.py (which imports it by path).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .prometheus import prometheus

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

Series = tuple[str, Mapping[str, str], Sequence[tuple[float, float]]]
"""(sample name, labels, [(unix seconds, value)])."""


def openmetrics(families: Mapping[str, tuple[str, Iterable[Series]]]) -> str:
    """OpenMetrics text: family name -> (type, series); counters' samples end in `_total`."""
    out: list[str] = []
    for family, (kind, series) in families.items():
        out.append(f"# TYPE {family} {kind}")
        for name, labels, points in series:
            inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            out.extend(f"{name}{{{inner}}} {v!r} {t:.3f}" for t, v in points)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def create_blocks(text: str | Path, data: Path, work: Path) -> None:
    """Blocks under `data` from OpenMetrics text, or from the file it names (then removed)."""
    src = text if isinstance(text, Path) else work / "input.om"
    if not isinstance(text, Path):
        src.write_text(text)
    data.mkdir(parents=True, exist_ok=True)
    run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=24h", str(src), str(data)])
    src.unlink()


def run(cmd: Sequence[str], cwd: Path | None = None) -> str:
    result = subprocess.run(list(cmd), capture_output=True, text=True, timeout=1800, cwd=cwd)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result.stdout


def backfill_rules(data: Path, tiers: Sequence[Path], start: float, end: float, interval: str = "60s") -> None:
    """Backfill each rule file's recording rules over [start, end], one tier after the other (each
    tier reads what the previous one wrote). Rule files are named relative to their folder: the
    evaluation times of a group are offset by a hash of its name and file name, so the same files
    give the same timestamps wherever they lie."""
    for tier in tiers:
        out = data.parent / f"backfill-{tier.stem}"
        with prometheus(data) as (url, _):
            run(
                [
                    PROMTOOL,
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    f"--url={url}",
                    f"--start={int(start)}",
                    f"--end={int(end)}",
                    f"--output-dir={out}",
                    f"--eval-interval={interval}",
                    "--quiet",
                    tier.name,
                ],
                cwd=tier.parent,
            )
        for block in out.iterdir():
            shutil.move(str(block), data / block.name)
        shutil.rmtree(out)


def backfill_recording_tiers(data: Path, groups: Sequence[Mapping[str, Any]], start: float, end: float) -> None:
    """Backfill the generated recording tiers (`queries.GROUPS_RECORDING`, in order) of the rule
    `groups` (`rules.prometheus_groups`) over [start, end], each tier's file beside `data`."""
    from warpwatch.dashboards.queries import GROUPS_RECORDING

    tiers = []
    for name in GROUPS_RECORDING:
        path = data.parent / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"groups": [g for g in groups if g["name"] == name]}))
        tiers.append(path)
    backfill_rules(data, tiers, start, end)


def query(url: str, promql: str, at: float | None = None, **extra: str) -> dict[str, Any]:
    params = {"query": promql, **extra}
    if at is not None:
        params["time"] = f"{at:.3f}"
    data = urllib.parse.urlencode(params).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", data=data, timeout=600) as resp:
        body: dict[str, Any] = json.loads(resp.read())
    return body
