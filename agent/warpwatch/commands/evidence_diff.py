"""`warpwatch evidence diff SOURCE`: which two kept windows to compare, and the words around their diff.

The newest window kept as `degraded` (within `--since`) is compared with the newest window kept as
`baseline` before it (ids sort in the order the agent handed the windows over), baseline as A and
degraded as B. SOURCE is an agent (`warpwatch evidence` fetches its list and the two traces) or a
folder `warpwatch evidence pull` wrote (`ID.trace.json.gz` beside `ID.meta.json`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..config.units import parse_duration
from ..errors import ConfigError, WarpwatchError
from ..evidence.store import META_SUFFIX, TRACE_SUFFIX, is_id


def parse_since(text: str) -> float:
    """`--since` of both evidence commands (30m, 2h, 1d), in seconds; a bad value is the command
    line's error (exit status 2)."""
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ConfigError(f"--since {text!r}: {exc}") from None


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def kept_in_folder(folder: Path) -> list[dict[str, Any]]:
    """The kept windows of a folder `evidence pull` wrote: each `ID.meta.json` that has its trace
    beside it and reads as a JSON object, with `id` set from its name; oldest first."""
    if not folder.is_dir():
        raise WarpwatchError(f"{folder}: neither a folder of kept windows nor an http(s):// URL of an agent")
    out = []
    for meta_path in sorted(folder.glob("*" + META_SUFFIX)):
        kid = meta_path.name.removesuffix(META_SUFFIX)
        if not is_id(kid) or not (folder / (kid + TRACE_SUFFIX)).is_file():
            continue
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict):
            out.append({**meta, "id": kid})
    return out


def pick_pair(windows: Sequence[Mapping[str, Any]], after: float, where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(baseline, degraded): the newest window kept as `degraded` at or after Unix time `after`, and
    the newest kept as `baseline` before it. `windows` are kept windows' JSON, oldest first;
    `where` names the source in the errors."""
    ordered = sorted(windows, key=lambda m: str(m.get("id")))
    degraded = [m for m in ordered if m.get("reason") == "degraded" and _time(m) >= after]
    if not degraded:
        raise WarpwatchError(
            f"{where}: no window kept as degraded within --since ({_reasons(ordered)}); "
            "widen --since, or compare two traces with `warpwatch diff A B`"
        )
    chosen = degraded[-1]
    baselines = [m for m in ordered if m.get("reason") == "baseline" and str(m["id"]) < str(chosen["id"])]
    if not baselines:
        raise WarpwatchError(
            f"{where}: no baseline window kept before the degraded window {chosen['id']} "
            "(the agent keeps one ordinary window an hour as a baseline); compare it with another trace: "
            f"`warpwatch diff OTHER {chosen['id']}{TRACE_SUFFIX}`"
        )
    return dict(baselines[-1]), dict(chosen)


def _time(meta: Mapping[str, Any]) -> float:
    t = meta.get("time")
    return float(t) if isinstance(t, int | float) else float("-inf")


def _reasons(windows: Iterable[Mapping[str, Any]]) -> str:
    counts: dict[str, int] = {}
    for m in windows:
        counts[str(m.get("reason"))] = counts.get(str(m.get("reason")), 0) + 1
    kept = ", ".join(f"{n} {r}" for r, n in sorted(counts.items()))
    return f"kept windows: {kept}" if kept else "no kept windows"


def heading(baseline: Mapping[str, Any], degraded: Mapping[str, Any]) -> list[str]:
    """What the table compares, and the kernels the agent found degraded."""
    lines = [
        f"Degraded window {degraded['id']} (kept {_when(degraded)}) against the baseline window "
        f"{baseline['id']} (kept {_when(baseline)}): A = baseline, B = degraded."
    ]
    for d in degraded.get("degraded") or []:
        if isinstance(d, dict):
            lines.append(
                f"  degraded: {d.get('kernel')} on GPU {d.get('gpu')}: estimated occupancy "
                f"{_pct(d.get('estimated_occupancy'))} against its recent level {_pct(d.get('level'))}"
            )
    return lines


def summary(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A kept window's JSON as `--format json` names it under `evidence`."""
    return {k: meta.get(k) for k in ("id", "time", "reason", "gpus", "degraded")}


def _when(meta: Mapping[str, Any]) -> str:
    t = _time(meta)
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t != float("-inf") else "at an unknown time"


def _pct(v: object) -> str:
    return f"{v * 100:.0f}%" if isinstance(v, int | float) else "?"
