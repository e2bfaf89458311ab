"""Two runs of `python benchmarks/attacks --json` side by side, one Markdown row per attack (matched by name).

    python benchmarks/attacks_compare.py BEFORE.json AFTER.json [--labels "4ac2651" "this tree"]

Each cell is "before → after"; the outcome (the rows' note) gets a column per run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def _scrape(r: dict[str, Any]) -> str:
    if not r.get("scrapes"):
        return "-"
    return f"{r['scrape_p50_ms']} / {r['scrape_max_ms']} ({r['scrape_failed']}/{r['scrapes']})"


def _pair(a: str, b: str) -> str:
    return a if a == b else f"{a} → {b}"


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]], labels: tuple[str, str]) -> str:
    by_name = {r["attack"]: r for r in after}
    out = [
        f"| attack | scrape p50 / max ms (failed/total) | RSS / tree PSS MiB | threads | fds | exit (stop s) | "
        f"outcome, {labels[0]} | outcome, {labels[1]} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in before:
        a = by_name.get(b["attack"], {})
        if not a:
            continue
        out.append(
            f"| {b['attack']} | {_scrape(b)} → {_scrape(a)} | "
            f"{b['rss_mib']:.0f} / {b['pss_mib']:.0f} → {a['rss_mib']:.0f} / {a['pss_mib']:.0f} | "
            f"{_pair(str(b['threads']), str(a['threads']))} | {_pair(str(b['fds']), str(a['fds']))} | "
            f"{b['exit_code']} ({b['stop_s']}) → {a['exit_code']} ({a['stop_s']}) | {b['note']} | {a['note']} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--labels", nargs=2, default=("before", "after"))
    args = parser.parse_args()
    print(compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()), tuple(args.labels)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
