"""How many engine steps a window needs to see a workload's kernels (issue 46, `max_steps`): on real
traces that mark their steps (`ProfilerStep#N`), the share of the trace's kernel time spent in
kernels (by name) that already ran within the first k steps, k = 1, 2, 4, ... A kernel first seen
later is one a window of k steps would miss; its time is what the window's per-kernel figures
would leave out.

    .venv/bin/python benchmarks/window_steps.py [TRACE ...]     # default: the shared traces with steps

A kernel belongs to the step whose span holds its launch (the runtime call with its correlation
id); kernels whose launch is outside every step are left out.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
DEFAULT = [
    "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.pt.trace.json.gz",
    "facebookresearch__HolisticTraceAnalysis/tests/data/trace_diff/control/control.json.gz",
    "facebookresearch__HolisticTraceAnalysis/tests/data/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "facebookresearch__HolisticTraceAnalysis/tests/data/negative_queue_length_values_check/rank0.json.gz",
    "facebookresearch__HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz",
]
KS = (1, 2, 4, 8, 16)


def load(path: Path) -> list[dict]:
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc  # old traces: a bare list
    return [e for e in events if isinstance(e, dict)]


def kernel_steps(events: list[dict]) -> tuple[int, list[tuple[str, float, int]]]:
    """(steps, [(kernel name, duration us, step index)])."""
    steps = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"
    )
    launch = {
        e["args"]["correlation"]: float(e["ts"])
        for e in events
        if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "hip_runtime", "runtime")
        and isinstance(e.get("args"), dict)
        and "correlation" in e["args"]
    }
    out = []
    for e in events:
        if str(e.get("cat", "")).lower() != "kernel" or not isinstance(e.get("args"), dict):
            continue
        t = launch.get(e["args"].get("correlation"))
        step = next((i for i, (a, b) in enumerate(steps) if t is not None and a <= t < b), None)
        if step is not None:
            out.append((str(e.get("name")), float(e.get("dur", 0)), step))
    return len(steps), out


def seen_shares(steps: int, kernels: list[tuple[str, float, int]]) -> dict[int, float]:
    total = sum(d for _, d, _ in kernels)
    out = {}
    for k in KS:
        if k > steps:
            break
        seen = {name for name, _, s in kernels if s < k}
        out[k] = sum(d for name, d, _ in kernels if name in seen) / total if total else float("nan")
    return out


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or [SHARED / p for p in DEFAULT]
    print("| trace | steps | kernels (names) | share of kernel time in kernels seen within the first k steps |")
    print("|---|--:|--:|---|")
    for path in paths:
        steps, kernels = kernel_steps(load(path))
        shares = seen_shares(steps, kernels)
        cells = ", ".join(f"k={k}: {100 * v:.1f} %" for k, v in shares.items())
        print(f"| {path.name} | {steps} | {len({n for n, _, _ in kernels})} | {cells or '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
