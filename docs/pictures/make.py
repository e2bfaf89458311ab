"""Draw the docs' pictures from real data: `python docs/pictures/make.py` rewrites the SVGs beside
this file, `--check` only says whether the committed ones are current (tests/docs/test_pictures.py
runs it; .ci/run runs that test).

- window-edges.svg: a known GPU activity stream (tests/support/activity.py, the simulated truth the
  tests use) cut into capture windows by Kineto's rule; what the windows keep, what warpwatch's
  correction (`counted_gpu_time`, the Horvitz-Thompson sums the counters add) makes of it, and the
  truth computed from the whole stream.
- reported-vs-computed.svg: every kernel launch of the bundled samples and of real traces of the
  shared corpus (../shared/traces, SOURCES.md): the profiler's `warps per SM` against warpwatch's
  launched and resident warps per SM.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import sys
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(ROOT / "tests"), str(ROOT / "agent")]

from svg import Svg  # noqa: E402

from support.activity import KernelType, Launch, Scenario, StreamSpec, generate, trace_doc, truth  # noqa: E402
from support.paths import SHARED_TRACES  # noqa: E402
from warpwatch.analysis.window import analyze, launch_metrics  # noqa: E402
from warpwatch.trace import parse_trace, read_trace  # noqa: E402

WINDOW_US = 20_000.0
WINDOWS = 1500
KERNELS = (  # (name in the trace, label, duration µs): a share of about 1/5 each
    ("k20us", "20 µs", 20.0),
    ("k500us", "0.5 ms", 500.0),
    ("k3ms", "3 ms", 3_000.0),
    ("k8ms", "8 ms", 8_000.0),
    ("k15ms", "15 ms", 15_000.0),
)
SCENARIO = Scenario(
    "one stream, kernels of 20 µs to 15 ms, 20 ms windows",
    WINDOW_US,
    60e6,
    (StreamSpec(7, tuple(KernelType(n, 132, (d, d), 1 / d) for n, _, d in KERNELS), (0, 20)),),
    burst_us=2e6,
    idle_us=20_000,
)
COLOURS = ("#4e79a7", "#59a14f", "#b07aa1", "#f28e2b", "#e15759")
TRUTH, KEPT, CORRECTED = "#555555", "#f1a340", "#2b6cb0"

REAL_TRACES = (  # the bundled samples, then real traces of the shared corpus (SOURCES.md)
    ROOT / "agent/warpwatch/samples/2021_pt19_sm_count_-1_repro.json",
    ROOT / "agent/warpwatch/samples/a100_alexnet.json.gz",
    ROOT / "agent/warpwatch/samples/gp100_step.json.gz",
    SHARED_TRACES / "pytorch__kineto/docs/traces/after_fix_trace.json",
    SHARED_TRACES / "pytorch__kineto/tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
    SHARED_TRACES / "facebookresearch__HolisticTraceAnalysis/tests/data/critical_path/alexnet/"
    "benchmark_result_2869224_1695835535_trace.json.gz",
    SHARED_TRACES / "facebookresearch__HolisticTraceAnalysis/tests/data/timeline_analysis/sampled_rank-0.json.gz",
    SHARED_TRACES / "facebookresearch__HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz",
    SHARED_TRACES / "facebookresearch__param/et_replay/tests/inputs/resnet_kineto.json.gz",
    SHARED_TRACES / "facebookresearch__param/et_replay/tests/inputs/linear_kineto.json.gz",
)


def window_edges() -> str:
    """The window-edge picture: one window's edges above, the shares over 400 windows below."""
    rng = random.Random(36)
    stream = generate(SCENARIO, rng)
    real = truth(SCENARIO, stream)
    cut = _windows(stream, rng)
    kept = dict.fromkeys(real.share, 0.0)
    corrected = dict.fromkeys(real.share, 0.0)
    for t0, inside in cut:
        for x in inside:
            kept[x.name] += x.dur
        result = analyze(parse_trace(json.dumps(trace_doc(t0, WINDOW_US, inside)).encode(), "sim.json"))
        for k in result.kernels:
            corrected[k.name] += k.counted_gpu_time
    span = len(cut) * WINDOW_US
    svg = Svg(760, 470)
    _one_window(svg, stream, cut)
    bars = {n: (real.share[n], kept[n] / span, corrected[n] / span) for n, _, _ in KERNELS}
    _share_bars(svg, bars)
    return svg.render("What Kineto drops at the window's edges, and what warpwatch's correction restores")


def _windows(stream: list[Launch], rng: random.Random) -> list[tuple[float, list[Launch]]]:
    """Kineto's rule, as `support.activity.windows` applies it (a launch is kept only when wholly
    inside), found by bisection: window i starts uniformly at random in the i-th part of the stream."""
    starts = [x.ts for x in stream]
    longest = max(x.dur for x in stream)
    stride = (SCENARIO.horizon_us - WINDOW_US) / WINDOWS
    out = []
    for i in range(WINDOWS):
        t0 = (i + rng.random()) * stride
        t1 = t0 + WINDOW_US
        near = stream[bisect.bisect_left(starts, t0) : bisect.bisect_right(starts, t1 + longest)]
        out.append((t0, [x for x in near if x.ts >= t0 and x.end <= t1]))
    return out


def _one_window(svg: Svg, stream: list[Launch], cut: list[tuple[float, list[Launch]]]) -> None:
    """A window whose both edges cut a long kernel: drawn kept (colour) and dropped (outline)."""
    t0 = next(t for t, _ in cut if _straddled(stream, t) and _straddled(stream, t + WINDOW_US))
    t1 = t0 + WINDOW_US
    lo, hi = t0 - 0.35 * WINDOW_US, t1 + 0.35 * WINDOW_US
    x0, x1, y = 40.0, 720.0, 70.0

    def sx(t: float) -> float:
        return x0 + (min(max(t, lo), hi) - lo) / (hi - lo) * (x1 - x0)

    svg.text(20, 24, "One 20 ms capture window: Kineto keeps a launch only when it lies wholly inside", 14)
    svg.rect(sx(t0), y - 18, sx(t1) - sx(t0), 66, "#eef3fb")
    colour = {n: c for (n, _, _), c in zip(KERNELS, COLOURS, strict=True)}
    for x in stream:
        if x.end < lo or x.ts > hi:
            continue
        if x.ts >= t0 and x.end <= t1:
            svg.rect(sx(x.ts), y, sx(x.end) - sx(x.ts), 30, colour[x.name])
        else:
            svg.rect(sx(x.ts), y, sx(x.end) - sx(x.ts), 30, "none", f"stroke='{colour[x.name]}' stroke-dasharray='4 3'")
    for t, label in ((t0, "window opens"), (t1, "window closes")):
        svg.line(sx(t), y - 22, sx(t), y + 52, "#1d3557", "stroke-width='2'")
        svg.text(sx(t), y - 26, label, 11, "middle")
    svg.text(
        x0, y + 84, "filled: in the trace · dashed: dropped (it ran, straddling an edge or outside the window)", 11
    )
    for i, ((_, label, _), c) in enumerate(zip(KERNELS, COLOURS, strict=True)):
        svg.rect(x0 + i * 66, y + 56, 10, 10, c)
        svg.text(x0 + 13 + i * 66, y + 65, label, 11)


def _straddled(stream: list[Launch], t: float) -> bool:
    return any(x.ts < t < x.end and x.dur >= 8_000 for x in stream)


def _share_bars(svg: Svg, bars: dict[str, tuple[float, float, float]]) -> None:
    top, bottom, left = 200.0, 420.0, 70.0
    top_share = 0.3
    svg.text(20, top - 20, f"GPU time share per kernel, {WINDOWS:,} windows of 20 ms (60 s of simulated activity)", 14)
    for tick in (0.0, 0.1, 0.2, 0.3):
        yy = bottom - tick / top_share * (bottom - top)
        svg.line(left, yy, 730, yy, "#dddddd")
        svg.text(left - 6, yy + 4, f"{tick:.0%}", 11, "end")
    group = (730 - left) / len(KERNELS)
    for i, (name, label, _) in enumerate(KERNELS):
        for j, (value, colour) in enumerate(zip(bars[name], (TRUTH, KEPT, CORRECTED), strict=True)):
            x = left + i * group + 14 + j * 28
            h = value / top_share * (bottom - top)
            svg.rect(x, bottom - h, 24, h, colour)
            svg.text(x + 12, bottom - h - 4, f"{100 * value:.1f}", 10, "middle")
        svg.text(left + i * group + 14 + 40, bottom + 16, f"kernels of {label}", 12, "middle")
    for i, (label, colour) in enumerate(
        (("truth (the whole stream)", TRUTH), ("what the traces hold", KEPT), ("warpwatch, corrected", CORRECTED))
    ):
        svg.rect(left + i * 210, bottom + 32, 12, 12, colour)
        svg.text(left + i * 210 + 17, bottom + 42, label, 12)


def _launch_points() -> Iterator[tuple[float | str | None, float | None, float | None]]:
    for path in REAL_TRACES:
        trace = read_trace(path, workers=1)
        for m in launch_metrics(trace):
            yield m.reported_warps_per_sm, m.warps_per_sm, m.resident_warps_per_sm


def reported_vs_computed() -> str:
    """Log-log: the profiler's warps per SM (x) against warpwatch's (y), one dot per distinct pair."""
    launched: set[tuple[float, float]] = set()
    resident: set[tuple[float, float]] = set()
    invalid: set[tuple[str, float]] = set()
    launches = unknown = 0
    for reported, computed, res in _launch_points():
        launches += 1
        if computed is None:
            unknown += 1
            continue
        if not isinstance(reported, (int, float)) or not math.isfinite(reported) or reported <= 0:
            invalid.add((str(reported), round(computed, 2)))
            continue
        launched.add((_log(reported), _log(computed)))
        if res is not None:
            resident.add((_log(reported), _log(res)))
    svg = Svg(760, 520)
    left, right, top, bottom, lo, hi = 150.0, 730.0, 50.0, 450.0, -2.0, 6.0

    def sx(v: float) -> float:
        return left + (v - lo) / (hi - lo) * (right - left)

    def sy(v: float) -> float:
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    svg.text(20, 24, f"Warps per SM of {launches:,} kernel launches in {len(REAL_TRACES)} traces", 14)
    svg.text(left, top - 10, "warpwatch's warps per SM (log scale)", 12)
    for e in range(int(lo), int(hi) + 1):
        svg.line(sx(e), top, sx(e), bottom, "#e5e5e5")
        svg.line(left, sy(e), right, sy(e), "#e5e5e5")
        svg.text(sx(e), bottom + 16, _power(e), 11, "middle")
        svg.text(left - 6, sy(e) + 4, _power(e), 11, "end")
    svg.line(sx(lo), sy(lo), sx(hi), sy(hi), "#999999", "stroke-dasharray='5 4'")
    svg.text(sx(2.4), sy(3.0), "the same value", 11, "middle", "fill='#777777'")
    for x, y in sorted(resident):
        svg.circle(sx(x), sy(y), 3.4, "#e15759", "fill-opacity='0.6'")
    for x, y in sorted(launched):
        svg.circle(sx(x), sy(y), 2.2, "#2b6cb0", "fill-opacity='0.8'")
    svg.rect(20, top, 90, bottom - top, "#f6f6f6")
    svg.text(65, top + 16, "reported", 11, "middle")
    svg.text(65, top + 30, "negative", 11, "middle")
    svg.text(65, top + 44, "label: reported", 10, "middle")
    svg.text(65, top + 58, "height: warpwatch", 10, "middle")
    for text, computed in sorted(invalid, key=lambda p: p[1]):
        svg.circle(40, sy(_log(computed)), 3.2, "#2b6cb0")
        svg.text(48, sy(_log(computed)) + 4, text.removesuffix(".0"), 10)
    svg.text((left + right) / 2, bottom + 36, "the profiler's warps per SM (log scale)", 12, "middle")
    svg.circle(40, 500, 4, "#2b6cb0")
    svg.text(50, 504, "launched warps per SM, B·ceil(T/warpSize)/SMs (beside what the profiler reported)", 12)
    svg.circle(560, 500, 4, "#e15759")
    svg.text(570, 504, "resident warps per SM", 12)
    return svg.render("The profiler's warps per SM against warpwatch's, on real traces")


def _log(v: float) -> float:
    return round(math.log10(max(v, 1e-2)), 2)


def _power(e: int) -> str:
    return {-2: "0.01", -1: "0.1", 0: "1", 1: "10", 2: "100", 3: "1,000"}.get(e, "10" + "⁰¹²³⁴⁵⁶⁷⁸⁹"[e])


PICTURES = {"window-edges.svg": window_edges, "reported-vs-computed.svg": reported_vs_computed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a committed picture differs")
    args = parser.parse_args(argv)
    stale = []
    for name, draw in PICTURES.items():
        text, path = draw(), HERE / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print(f"stale: {', '.join(stale)} (run `python docs/pictures/make.py`)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
