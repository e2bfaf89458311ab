"""`python benchmarks/attacks [--only NAMES] [--agent-path DIR] [--json OUT]`: the rows as one table
(the package doc says what each row is)."""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a folder: `attacks` is then importable

from attacks import __doc__ as DOC
from attacks.floods import FLOODS
from attacks.hostile_inputs import HOSTILE
from attacks.kit import ROOT, Row


def table(rows: list[Row]) -> str:
    out = [
        "| attack | scrape p50 / max ms (failed/total) | RSS MiB | PSS MiB | threads | fds | exit (stop s) | "
        "tracebacks | note |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        scrape = f"{r.scrape_p50_ms} / {r.scrape_max_ms} ({r.scrape_failed}/{r.scrapes})" if r.scrapes else "-"
        out.append(
            f"| {r.attack} | {scrape} | {r.rss_mib:.0f} | {r.pss_mib:.0f} | {r.threads} | {r.fds} | "
            f"{r.exit_code} ({r.stop_s}) | {r.tracebacks} | {r.note} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--agent-path",
        type=Path,
        default=ROOT / "agent",
        help="the agent/ folder of the checkout to attack (default: this one)",
    )
    parser.add_argument(
        "--only",
        default=",".join([*FLOODS, "hostile"]),
        help="comma-separated: " + ",".join(FLOODS) + ", hostile (all of " + ",".join(HOSTILE) + ") "
        "or any of them by name (default: all)",
    )
    parser.add_argument(
        "--rss-cap",
        type=float,
        default=8192.0,
        help="MiB above which the agent is killed (the hostile rows: also the memory cgroup "
        "each agent runs in, at most 2048)",
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    attacks = {**FLOODS, **HOSTILE}
    names = [n for name in args.only.split(",") for n in (list(HOSTILE) if name == "hostile" else [name])]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the attacker holds thousands of sockets
    rows: list[Row] = []
    for name in names:
        t0 = time.monotonic()
        try:
            rows += attacks[name](args.agent_path, args.rss_cap)
        except Exception as exc:  # one attack's failure must not lose the others' rows
            rows.append(Row(name, note=f"attack failed: {type(exc).__name__}: {exc}"))
        print(f"# {name}: {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
