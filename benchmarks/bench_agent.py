"""Benchmark of `warpwatch run`'s hot paths. Prints three figures:

1. scrape latency: `/metrics` of a synthetic snapshot of 8 GPUs x 50 kernels (+ `other`), over
   real HTTP from the agent's server and as bare exposition (`generate_latest`);
2. processing time of the largest shared trace (df_index_resolver.json.gz) as one window
   (read + analyse, the path every window takes);
3. resident memory after 500 replayed windows of real traces (with the counters and the kernel
   namer filled by them), sampled every 100 windows to show whether it grows.

    .venv/bin/python benchmarks/bench_agent.py [--windows 500] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "agent"))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402

from warpwatch.capture import CapturedWindow, Source  # noqa: E402
from warpwatch.capture.replay import ReplaySource  # noqa: E402
from warpwatch.config.table import Config  # noqa: E402
from warpwatch.export import metricdefs as md  # noqa: E402
from warpwatch.export.builder import OTHER, HistogramState, Snapshot, SnapshotCollector  # noqa: E402
from warpwatch.export.snapshot import Sample  # noqa: E402
from warpwatch.model import ARTIFACT_KINDS  # noqa: E402
from warpwatch.service.agent import Service  # noqa: E402

SHARED = Path(os.environ.get("WARPWATCH_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
HTA = SHARED / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"
LARGEST = HTA / "df_index_resolver" / "df_index_resolver.json.gz"
REPLAYED = [
    HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    HTA / "trace_diff/control/control.json.gz",
    HTA / "timeline_analysis/sampled_rank-0.json.gz",
]


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def synthetic_snapshot(gpus: int = 8, kernels: int = 50) -> Snapshot:
    samples: dict[md.MetricDef, list[Sample]] = {m: [] for m in md.ALL}
    for g in range(gpus):
        for k in range(kernels + 1):
            name = OTHER if k == kernels else f"at::native::vectorized_elementwise_kernel~{g:02d}{k:06d}"
            values = (1234.5 + k, 48.25, 0.75, 0.6875, 3.5, 0.0125, 1500.0, -2.0)
            for m, v in zip(md.KERNEL_GAUGES, values, strict=True):
                samples[m].append(((str(g), name), v))
            samples[md.KERNEL_LAUNCHES_OBSERVED].append(((str(g), name), 123456.0))
            samples[md.PROFILER_ARTIFACTS].extend(((str(g), name, a), 17.0) for a in ARTIFACT_KINDS[:2])
        for m, v in ((md.GPU_RESIDENT_WARPS_PER_SM, 40.0), (md.GPU_ESTIMATED_OCCUPANCY, 0.625), (md.GPU_BUSY, 0.9)):
            samples[m].append(((str(g),), v))
        samples[md.GPU_INFO].append(((str(g), "NVIDIA H100 80GB HBM3", "9.0", "132", "", ""), 1.0))
        samples[md.KERNELS_FOLDED].append(((str(g),), 1000.0))
    hist = HistogramState()
    for s in (0.01, 0.02, 0.5):
        hist = hist.observe(s)
    samples[md.LAST_WINDOW_TIMESTAMP] = [((), time.time())]
    samples[md.CAPTURE_DUTY] = [((), 1 / 60)]
    fixed = {m: tuple(v) for m, v in samples.items() if v}
    return Snapshot({**Snapshot().samples, **fixed}, hist)


class _Idle(Source):
    name = "idle:"

    def start(self) -> None:
        pass

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        return []

    def close(self) -> None:
        pass


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_scrape(iterations: int) -> dict[str, Any]:
    snap = synthetic_snapshot()
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(snap))
    body = generate_latest(registry)
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        generate_latest(registry)
        times.append(time.perf_counter() - t0)

    config = Config(source=("idle:",), address="127.0.0.1", port=0, period=3600.0, window=1.0, jitter=0.0)
    svc = Service(config, sources=[_Idle()])
    svc.startup()
    try:
        deadline = time.monotonic() + 10
        while svc.readiness()[1] == "no window expected yet" and time.monotonic() < deadline:
            time.sleep(0.01)  # the first (empty) round runs at start and publishes its snapshot
        svc.exposition.publish(snap)
        url = f"http://127.0.0.1:{svc.port}/metrics"
        http_times = []
        size = 0
        for _ in range(iterations):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url, timeout=10) as resp:
                size = len(resp.read())
            http_times.append(time.perf_counter() - t0)
    finally:
        svc.shutdown()
    assert size >= len(body), (size, len(body))  # plus the process and GC collectors
    return {
        "series": sum(1 for line in body.decode().splitlines() if line and not line.startswith("#")),
        "exposition_bytes": len(body),
        "http_bytes": size,
        "generate_ms_median": statistics.median(times) * 1e3,
        "generate_ms_p99": percentile(times, 0.99) * 1e3,
        "http_ms_median": statistics.median(http_times) * 1e3,
        "http_ms_p99": percentile(http_times, 0.99) * 1e3,
    }


def bench_largest(repeats: int, path: Path = LARGEST) -> dict[str, Any]:
    """One trace processed as the agent processes a window (in its worker thread: no fork)."""
    config = Config(source=("idle:",), address="127.0.0.1", port=0)
    svc = Service(config, sources=[_Idle()])
    times = []
    launches = 0
    for _ in range(repeats):
        # In a thread of its own, as the agent runs windows: a read in a process that runs threads
        # never forks decoding workers (membudget.may_fork), so this is the agent's one-process path.
        done: list[Any] = []
        worker = threading.Thread(
            target=lambda out=done: out.append(svc.rounds.process_window(CapturedWindow(source="bench", path=path)))
        )
        t0 = time.perf_counter()
        worker.start()
        worker.join()
        times.append(time.perf_counter() - t0)
        (result,) = done
        assert result.analysis is not None, result
        launches = result.analysis.launch_count
    return {
        "file": path.name,
        "file_mib": path.stat().st_size / 2**20,
        "launches": launches,
        "seconds_best": min(times),
        "seconds_median": statistics.median(times),
    }


def bench_rss(windows: int) -> dict[str, Any]:
    import logging

    logging.getLogger("warpwatch").setLevel(logging.WARNING)
    config = Config(source=("replay",), address="127.0.0.1", port=0)
    folder = Path(tempfile.mkdtemp(prefix="bench_agent_"))
    for i, trace in enumerate(REPLAYED):  # one replay source cycling through real traces
        shutil.copyfile(trace, folder / f"{i}_{trace.name}")  # links out of a folder are refused
    src = ReplaySource(folder)
    src.start()
    svc = Service(config, sources=[src])
    start = rss_mib()
    samples = {0: start}
    t0 = time.perf_counter()
    for i in range(1, windows + 1):
        svc.run_round()
        if i % 100 == 0:
            samples[i] = rss_mib()
    elapsed = time.perf_counter() - t0
    shutil.rmtree(folder)
    snap = svc.exposition.collector.snapshot
    return {
        "windows": windows,
        "ok": dict((labels[0], v) for labels, v in snap.get(md.WINDOWS))["ok"],
        "rss_mib_by_window": {k: round(v, 1) for k, v in samples.items()},
        "rss_mib_after": samples[windows] if windows in samples else rss_mib(),
        "seconds_per_window": elapsed / windows,
        "kernel_series": len({labels for m in md.KERNEL_GAUGES for labels, _ in snap.get(m)}),
        "counter_series": len(snap.get(md.KERNEL_LAUNCHES_OBSERVED)) + len(snap.get(md.PROFILER_ARTIFACTS)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=500)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument(
        "--window-files",
        nargs="*",
        type=Path,
        default=[],
        metavar="TRACE",
        help="also time these traces as windows (e.g. benchmarks/data/*MB.json from gen_traces.py)",
    )
    args = parser.parse_args()
    if not LARGEST.exists():
        print(f"shared traces missing under {SHARED} (set WARPWATCH_SHARED_TRACES)", file=sys.stderr)
        return 2

    scrape = bench_scrape(args.scrapes)
    print(
        f"scrape, 8 GPUs x 50 kernels (+other): {scrape['series']} series, {scrape['exposition_bytes'] / 1024:.0f} KiB"
    )
    print(f"  exposition  median {scrape['generate_ms_median']:.2f} ms  p99 {scrape['generate_ms_p99']:.2f} ms")
    print(f"  HTTP GET    median {scrape['http_ms_median']:.2f} ms  p99 {scrape['http_ms_p99']:.2f} ms")

    largest = bench_largest(3)
    print(
        f"largest shared trace as one window: {largest['file']} ({largest['file_mib']:.1f} MiB gz, "
        f"{largest['launches']:,} kernel launches)"
    )
    print(f"  read + analyse  best {largest['seconds_best']:.2f} s  median {largest['seconds_median']:.2f} s")

    for path in args.window_files:
        fig = bench_largest(3, path)
        print(
            f"window {fig['file']} ({fig['file_mib']:.0f} MiB, {fig['launches']:,} launches): "
            f"best {fig['seconds_best']:.2f} s  median {fig['seconds_median']:.2f} s"
        )

    rss = bench_rss(args.windows)
    trail = ", ".join(f"{k}: {v}" for k, v in rss["rss_mib_by_window"].items())
    print(
        f"RSS over {rss['windows']} replayed windows ({rss['ok']:.0f} ok, "
        f"{rss['seconds_per_window'] * 1e3:.1f} ms each): {trail} MiB"
    )
    print(
        f"  after: {rss['rss_mib_after']:.1f} MiB; {rss['kernel_series']} kernel rows, "
        f"{rss['counter_series']} counter series"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"scrape": scrape, "largest": largest, "rss": rss}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
