"""Where warpwatch's time goes on one trace, phase by phase, in one process (CPU seconds).

    python benchmarks/phases.py [TRACE]      # default: the reference file

It replays what the one-process piece reader (`warpwatch.trace.pieces`) does for each piece --
read, msgspec decode, scan (launches kept) -- then `analyze`, timing each step with the process
CPU clock (less sensitive than wall time to other jobs on the machine).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "agent"))

from warpwatch.analysis import window as analysis  # noqa: E402
from warpwatch.runtime.gcpause import gc_paused  # noqa: E402
from warpwatch.runtime.membudget import PIECE_BYTES  # noqa: E402
from warpwatch.trace import read_trace  # noqa: E402
from warpwatch.trace.schema import PART_FAST, Interned, scan  # noqa: E402
from warpwatch.trace.streams import FileStream  # noqa: E402


def main(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    stream = FileStream(fd, path, 1 << 40)
    clock = time.process_time
    spent = {"read": 0.0, "decode": 0.0, "scan": 0.0}
    interned = Interned()
    rest = b""
    pieces = kernels = 0
    with gc_paused():
        while True:
            t0 = clock()
            data = stream.read(PIECE_BYTES)
            spent["read"] += clock() - t0
            if not data:
                break
            text = rest + data
            cut = text.rfind(b"},\n{")
            if cut < 0:
                rest = text
                continue
            start = text.find(b"[\n{") + 2 if pieces == 0 else 0
            t0 = clock()
            events = PART_FAST.decode(b"[" + text[start : cut + 1] + b"]")
            t1 = clock()
            kernels += len(scan(events, True, interned).launches)
            spent["scan"] += clock() - t1
            spent["decode"] += t1 - t0
            rest = text[cut + 3 :]
            pieces += 1
    os.close(fd)
    t0 = clock()
    trace = read_trace(path, workers=1)
    t1 = clock()
    analysis.analyze(trace)
    spent["analyze"] = clock() - t1
    total = sum(spent.values())
    print(
        f"{Path(path).name}: {os.path.getsize(path) / 1e6:,.0f} MB, {pieces} pieces, {kernels:,} kernel launches"
        f" (read_trace alone, one process: {t1 - t0:.2f} s CPU)"
    )
    for name, seconds in spent.items():
        print(f"  {name:10s} {seconds:6.2f} s CPU  {100 * seconds / total:5.1f}%")
    print(f"  {'total':10s} {total:6.2f} s CPU")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(HERE / "data" / "reference_df_index_resolver_x10.json"))
