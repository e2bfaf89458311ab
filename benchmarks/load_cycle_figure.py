"""The figure of docs/alerts-meaning.md, from the data of tests/dashboards/test_load_cycle.py.

Runs that test (a real Prometheus over the simulated load cycle) with WARPWATCH_LOAD_CYCLE_JSON set,
then draws, as plain SVG: the load (running sequences, busy share), the attention kernel's estimated
and theoretical occupancy in the `cycle-attn` deployment, and when each occupancy alert fired, the
rules before issue 45 (9098b5d) beside today's, per deployment.

    python benchmarks/load_cycle_figure.py [--json FILE] [-o docs/img/load-cycle.svg]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
W, LEFT, RIGHT = 900, 190, 20
HOURS = 60
COLORS = {"old": "#d62728", "now": "#1f77b4", "est": "#ff7f0e", "theo": "#2ca02c", "load": "#7f7f7f"}


def run_test(target: Path) -> None:
    env = {**os.environ, "WARPWATCH_LOAD_CYCLE_JSON": str(target)}
    test = ROOT / "tests/dashboards/test_load_cycle.py"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)]
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)


def x(minute: float) -> float:
    return LEFT + (W - LEFT - RIGHT) * minute / (HOURS * 60)


def polyline(points: list[tuple[float, float]], top: float, height: float, top_value: float, color: str) -> str:
    pts = " ".join(f"{x(m):.1f},{top + height * (1 - v / top_value):.1f}" for m, v in points)
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>'


def text(px: float, py: float, s: str, size: int = 11, anchor: str = "start", color: str = "#333") -> str:
    return f'<text x="{px:.1f}" y="{py:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{color}">{s}</text>'


def _axis(top: float) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{top}" x2="{W - RIGHT}" y2="{top}" stroke="#999"/>']
    for h in range(0, HOURS + 1, 6):
        out.append(text(x(h * 60), top + 14, f"{h % 24:02d}:00" + (" d2" if h == 24 else ""), 10, "middle"))
    return out


def _nights(top: float, height: float) -> list[str]:
    out = []
    for start, end in ((0, 8), (22, 32), (46, 56)):
        out.append(
            f'<rect x="{x(start * 60):.1f}" y="{top}" width="{x(end * 60) - x(start * 60):.1f}" '
            f'height="{height}" fill="#eef" />'
        )
    return out


def _load(doc: dict[str, Any], top: float) -> list[str]:
    seq = [(m, s) for m, s, _ in doc["load"]]
    busy = [(m, b * 64) for m, _, b in doc["load"]]
    return [
        text(10, top + 15, "Load", 12),
        text(10, top + 30, "running sequences", 10, color=COLORS["load"]),
        text(10, top + 44, "busy share x 64", 10, color="#000"),
        polyline(seq, top, 60, 64, COLORS["load"]),
        polyline(busy, top, 60, 64, "#000"),
    ]


def _occupancy(doc: dict[str, Any], top: float) -> list[str]:
    out = [text(10, top + 15, "Attention kernel", 12), text(10, top + 30, "(cycle-attn)", 10)]
    for name, color, label in (
        ("attention_estimated_occupancy", COLORS["est"], "estimated occupancy"),
        ("attention_theoretical_occupancy", COLORS["theo"], "theoretical occupancy"),
    ):
        for series in doc["panels"][name]:
            if series["labels"].get("deployment") == "cycle-attn":
                out.append(polyline([(m, v) for m, v in series["values"]], top, 60, 1.05, color))
        out.append(text(10, top + (44 if "estimated" in name else 58), label, 10, color=color))
    return out


def _alerts(doc: dict[str, Any], top: float) -> tuple[list[str], float]:
    out = [text(10, top + 12, "Occupancy alerts firing", 12)]
    row = top + 22
    for deployment in doc["deployments"]:
        for version, color in (("9098b5d", COLORS["old"]), ("now", COLORS["now"])):
            label = f"{deployment}, {'before' if version == '9098b5d' else 'now'}"
            out.append(text(10, row + 9, label, 10, color=color))
            for alert, by_series in doc["fired"][version].items():
                for key, spans in by_series.items():
                    if f"deployment={deployment}," not in key + ",":
                        continue
                    for a, b in spans:
                        out.append(
                            f'<rect x="{x(a):.1f}" y="{row}" width="{max(1.5, x(b) - x(a)):.1f}" height="10" '
                            f'fill="{color}"><title>{alert} {key}</title></rect>'
                        )
            row += 14
        row += 4
    return out, row


def svg(doc: dict[str, Any]) -> str:
    alerts, bottom = _alerts(doc, 190)
    height = bottom + 30
    body = [
        *_nights(10, bottom - 10),
        *_load(doc, 10),
        *_occupancy(doc, 95),
        *_axis(170),
        *alerts,
        *_axis(bottom + 4),
    ]
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height:.0f}" '
        f'font-family="sans-serif">\n<rect width="100%" height="100%" fill="white"/>\n' + "\n".join(body) + "\n</svg>\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="use this file of the test's data instead of running the test")
    parser.add_argument("-o", "--output", type=Path, default=ROOT / "docs/img/load-cycle.svg")
    args = parser.parse_args()
    if args.json is None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "load-cycle.json"
            run_test(path)
            doc = json.loads(path.read_text())
    else:
        doc = json.loads(args.json.read_text())
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(svg(doc))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
