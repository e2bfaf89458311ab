"""Summarise a py-spy raw profile (`py-spy record --format raw --subprocesses`): where the time goes.

    py-spy record --subprocesses --rate 250 --format raw -o prof.raw -- python -m warpwatch analyze ...
    python benchmarks/profile_summary.py prof.raw

Prints, per process, the samples by phase (the outermost warpwatch function that names a phase)
and the functions with the most samples of their own (leaf frames).
"""

from __future__ import annotations

import re
import sys
from collections import Counter, defaultdict

PHASES = (
    ("import", re.compile(r"_find_and_load|build_parser")),
    ("read + decode (trace/)", re.compile(r"\((?:warpwatch/)?trace/")),
    ("analyze (analysis.py)", re.compile(r"\((?:warpwatch/)?analysis\.py")),
    ("report (analyze_command.py, table.py)", re.compile(r"\((?:warpwatch/)?(?:analyze_command|table)\.py")),
)


def main(path: str) -> None:
    phases: dict[str, Counter[str]] = defaultdict(Counter)
    leaves: dict[str, Counter[str]] = defaultdict(Counter)
    totals: Counter[str] = Counter()
    with open(path) as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            n = int(count)
            frames = stack.split(";")
            proc = frames[0].split(":")[0]
            totals[proc] += n
            phase = next((name for name, rx in PHASES if rx.search(stack)), "other")
            phases[proc][phase] += n
            leaves[proc][re.sub(r":\d+\)$", ")", frames[-1])] += n
    for proc, total in totals.most_common():
        print(f"{proc}: {total} samples")
        for phase, n in phases[proc].most_common():
            print(f"  {n / total:6.1%}  {phase}")
        print("  top leaf frames:")
        for leaf, n in leaves[proc].most_common(12):
            print(f"  {n / total:6.1%}  {leaf}")


if __name__ == "__main__":
    main(sys.argv[1])
