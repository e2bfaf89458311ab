"""Where warpwatch's time goes on one trace, phase by phase, in one process (CPU seconds).

    python benchmarks/phases.py [TRACE]      # default: the reference file

It replays what `read_trace` does for each piece (read, msgspec decode, scan, kernel launches,
freeing, KernelLaunch objects), then `analyze`, timing each step with the process CPU clock
(less sensitive than wall time to other jobs on the machine). With N worker processes the
decode phases divide by about N; the KernelLaunch objects of the other processes are rebuilt
by the parent, and `analyze` runs in the parent alone.
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

import msgspec

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "agent"))

from warpwatch import analysis, trace  # noqa: E402
from warpwatch.model import KernelLaunch  # noqa: E402


def main(path: str) -> None:
    source = trace._FileSource.open_plain(path, trace.DEFAULT_MAX_BYTES)
    if source is None:
        sys.exit(f"{path}: not a plain file of {trace.PARTS_MIN_BYTES:,} bytes or more")
    ranges = trace._cuts(source)
    assert ranges is not None
    clock = time.process_time
    spent = dict.fromkeys(("read", "decode", "scan", "launches", "free", "KernelLaunch objects"), 0.0)
    buf = bytearray()
    launches: list[KernelLaunch] = []
    gc.disable()
    for lo, hi in ranges[1:-1]:
        t0 = clock()
        n = hi - lo
        if len(buf) < n + 2:
            buf.extend(bytes(n + 2 - len(buf)))
        buf[0] = ord("[")
        source.fill(buf, 1, lo, hi)
        buf[n + 1] = ord("]")
        t1 = clock()
        events = trace._PART_FAST.decode(memoryview(buf)[: n + 2])
        t2 = clock()
        kernels = [(ev, ev.ts, ev.dur) for ev in events if ev.cat in trace.KERNEL_CATEGORIES]
        scanned = trace._scan(events, True)
        t3 = clock()
        trace._launches(kernels)
        t4 = clock()
        del events, kernels
        t5 = clock()
        launches += msgspec.convert(scanned.launches, list[KernelLaunch], from_attributes=True)
        t6 = clock()
        spent["read"] += t1 - t0
        spent["decode"] += t2 - t1
        spent["launches"] += t4 - t3
        spent["scan"] += (t3 - t2) - (t4 - t3)  # _scan builds the launches too: counted apart
        spent["free"] += t5 - t4
        spent["KernelLaunch objects"] += t6 - t5
    gc.enable()
    full = trace.read_trace(path, workers=1)
    t0 = clock()
    analysis.analyze(full)
    spent["analyze"] = clock() - t0
    total = sum(spent.values())
    size = f"{source.size / 1e6:,.0f} MB"
    print(f"{Path(path).name}: {size}, {len(ranges)} pieces, {len(launches):,} kernel launches between head and tail")
    for phase, seconds in spent.items():
        print(f"  {phase:22} {seconds:6.2f} s CPU  {seconds / total:6.1%}")
    print(f"  {'total':22} {total:6.2f} s CPU")


if __name__ == "__main__":
    default = HERE / "data" / "reference_df_index_resolver_x10.json"
    main(sys.argv[1] if len(sys.argv) > 1 else str(default))
