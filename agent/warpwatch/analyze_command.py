"""The `warpwatch analyze TRACE...` command: explain traces as tables, JSON or per-launch JSON lines."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from dataclasses import asdict
from typing import IO, Any

import msgspec
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .analysis import analyze, launch_metrics, window_of
from .errors import TraceError
from .escape import printable
from .labels import KernelNamer
from .model import (
    ARTIFACT_EXPLANATIONS,
    ARTIFACT_KINDS,
    DeviceProperties,
    KernelStats,
    LaunchMetrics,
    Trace,
    WindowAnalysis,
)
from .trace import DEFAULT_MAX_BYTES, load_gpu_properties, read_trace

PROGRESS_MIN_BYTES = 50 * 1024**2
_ARTIFACT_SHORT = {
    "negative_warps_per_sm": "neg",
    "non_finite": "inf/nan",
    "grid_overflow": "overflow",
    "sm_count_invalid": "bad SMs",
    "occupancy_sentinel": "sentinel",
    "occupancy_smem_optin": "smem 0%",
    "unrounded_warps": "unrounded",
    "missing_launch_config": "no grid",
    "grid_units_unknown": "grid unit?",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "analyze",
        help="explain one or more Kineto traces: corrected warps per SM, occupancy, profiler artefacts",
        description="Read Kineto (PyTorch profiler) traces and report per-kernel warps per SM, occupancy and "
        "waves, corrected for the profiler's artefacts and for the sampling window.",
    )
    p.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (.json, .json.gz)")
    p.add_argument("--format", choices=("table", "json", "jsonl"), default="table", help="output format")
    p.add_argument(
        "--launches", action="store_true", help="one record per kernel event (use with --format jsonl)"
    )
    p.add_argument("--gpu-properties", metavar="FILE", help="device properties for traces that carry none")
    p.add_argument("--top", type=int, default=25, metavar="N", help="table rows per trace (default 25; 0 = all)")
    p.add_argument(
        "--max-trace-bytes", type=int, default=DEFAULT_MAX_BYTES, metavar="BYTES",
        help="refuse traces larger than this once decompressed (default 2 GiB)",
    )
    p.set_defaults(func=run_analyze)


def run_analyze(args: argparse.Namespace) -> int:
    if args.launches and args.format != "jsonl":
        print("warpwatch analyze: error: --launches needs --format jsonl", file=sys.stderr)
        return 2
    gpu_props = load_gpu_properties(args.gpu_properties) if args.gpu_properties else None
    out = sys.stdout
    failed = 0
    results: list[dict[str, Any]] = []
    console = Console(file=out, highlight=False, soft_wrap=False, width=None if out.isatty() else 200)
    for path in args.traces:
        try:
            trace = _read(path, args.max_trace_bytes, gpu_props)
            if args.launches:
                _write_launches(trace, out)
                continue
            analysis = analyze(trace)
        except TraceError as exc:
            print(f"warpwatch: error: {exc}", file=sys.stderr)
            failed += 1
            continue
        if args.format == "table":
            render_table(console, trace, analysis, top=args.top)
        else:
            results.append(analysis_to_dict(analysis, trace))
    if args.format == "json" and not args.launches:
        out.write(msgspec.json.encode({"traces": results}).decode() + "\n")
    elif args.format == "jsonl" and not args.launches:
        for r in results:
            out.write(msgspec.json.encode(r).decode() + "\n")
    out.flush()
    return 1 if failed else 0


def _read(path: str, max_bytes: int, gpu_props: dict[int, DeviceProperties] | None) -> Trace:
    size = _size(path)
    if size < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        return read_trace(path, max_bytes=max_bytes, gpu_properties=gpu_props)
    # No auto-refresh: a refresh thread would keep read_trace from decoding on every core (it
    # forks worker processes only when the caller runs no other thread).
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
        console=Console(file=sys.stderr), transient=True, auto_refresh=False,
    ) as progress:
        task = progress.add_task(f"reading {os.path.basename(path)} ({size / 1e6:.0f} MB)", total=2)
        progress.refresh()
        trace = read_trace(path, max_bytes=max_bytes, gpu_properties=gpu_props)
        progress.update(task, advance=1, description=f"analysing {os.path.basename(path)}")
        progress.refresh()
        return trace


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def launch_record(lm: LaunchMetrics, namer: KernelNamer | None = None) -> dict[str, Any]:
    """One kernel event as a JSON-ready dict (unknown = None); `label` is its `kernel` label."""
    launch = lm.launch
    return {
        "name": launch.name,
        "label": (namer or KernelNamer())(launch.name),
        "device": launch.device,
        "ts": launch.ts,
        "dur": launch.dur,
        "grid": list(launch.grid) if launch.grid else None,
        "block": list(launch.block) if launch.block else None,
        "launch_api": launch.launch_api,
        "registers_per_thread": launch.registers_per_thread,
        "shared_memory": launch.shared_memory,
        "warps_per_sm": lm.warps_per_sm,
        "reported_warps_per_sm": lm.reported_warps_per_sm,
        "warps_per_block": lm.warps_per_block,
        "max_active_blocks_per_sm": lm.max_active_blocks_per_sm,
        "limiting_factors": list(lm.limiting_factors) if lm.limiting_factors is not None else None,
        "theoretical_occupancy": lm.theoretical_occupancy,
        "waves_per_sm": lm.waves_per_sm,
        "resident_warps_per_sm": lm.resident_warps_per_sm,
        "estimated_occupancy": lm.estimated_occupancy,
        "artifacts": list(lm.artifacts),
        "weight": lm.weight,
    }


def _write_launches(trace: Trace, out: IO[str]) -> None:
    enc = msgspec.json.Encoder()
    buf = bytearray()
    namer = KernelNamer()
    for lm in launch_metrics(trace, window_of(trace)):
        enc.encode_into(launch_record(lm, namer), buf, len(buf))
        buf.extend(b"\n")
        if len(buf) > 1 << 20:
            out.write(buf.decode())
            buf.clear()
    out.write(buf.decode())


def analysis_to_dict(analysis: WindowAnalysis, trace: Trace | None = None) -> dict[str, Any]:
    """The JSON summary of one window (the shape of `warpwatch analyze --format json`)."""
    window = analysis.window
    namer = KernelNamer()
    return {
        "path": analysis.path,
        "rank": analysis.rank,
        "window": {
            "t0": window.t0,
            "t1": window.t1,
            "duration_us": window.duration,
            "bounds": window.bounds,
            "estimated_bounds": window.bounds == "estimated",
        },
        "launch_count": analysis.launch_count,
        "artifacts": {k: analysis.artifacts[k] for k in ARTIFACT_KINDS if k in analysis.artifacts},
        "devices": [
            {
                "device": d.device,
                "name": d.properties.name if d.properties else None,
                "compute_capability": d.properties.compute_capability if d.properties else None,
                "sms": d.properties.num_sms if d.properties else None,
                "max_warps_per_sm": d.properties.max_warps_per_sm if d.properties else None,
                "resident_warps_per_sm": d.resident_warps_per_sm,
                "estimated_occupancy": d.estimated_occupancy,
                "busy_ratio": d.busy_ratio,
                "samples": d.samples,
                "low_confidence": d.low_confidence,
            }
            for d in analysis.devices
        ],
        "kernels": [_kernel_dict(k, namer) for k in analysis.kernels],
        "warnings": list(trace.warnings) if trace else [],
    }


def _kernel_dict(k: KernelStats, namer: KernelNamer) -> dict[str, Any]:
    """A kernel summary: its full `name`, then its `label` (the `kernel` label of its metrics)."""
    d = asdict(k)
    return {"device": d.pop("device"), "name": d.pop("name"), "label": namer(k.name), **d}


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _fmt_reported(v: float | None) -> Text:
    if v is None:
        return Text("-")
    text = Text(format(v, ".4g"))
    if v < 0:
        text.stylize("bold red")
    return text


def _short(name: str, width: int = 60) -> Text:
    """A kernel name for a table cell: escaped (`names.printable`), cut, never read as markup."""
    name = printable(name[: width * 8])
    return Text(name if len(name) <= width else name[: width - 1] + "…")


def render_table(console: Console, trace: Trace, analysis: WindowAnalysis, *, top: int = 25) -> None:
    """Header, one row per (device, kernel) by GPU time, then one explanation per artefact kind found."""
    w = analysis.window
    console.print(Text(f"Trace: {printable(analysis.path)}", style="bold"))
    for d in analysis.devices:
        p = d.properties
        desc = (
            f"{p.name}, compute {p.compute_capability}, {p.num_sms} SMs, max {p.max_warps_per_sm} warps/SM"
            if p else "no device properties in the trace (use --gpu-properties): occupancy unknown"
        )
        extra = ""
        if d.estimated_occupancy is not None:
            extra = f"; estimated occupancy {d.estimated_occupancy:.1%}"
        busy = f", busy {d.busy_ratio:.1%}" if d.busy_ratio is not None else ""
        conf = " (low confidence: few launches)" if d.low_confidence else ""
        console.print(Text(printable(f"  GPU {d.device}: {desc}{busy}{extra}{conf}")))
    bounds = {
        "trace_span": "from the trace's profiler span",
        "requested": "as requested by the agent",
        "estimated": "estimated from the first and last GPU events",
        "none": "unknown",
    }[w.bounds]
    rank = f", rank {analysis.rank}" if analysis.rank is not None else ""
    console.print(
        f"  Window: {w.duration / 1000:.3f} ms ({bounds}){rank}; {analysis.launch_count} kernel launches"
    )
    if not analysis.kernels:
        console.print("  No kernel events in this trace (a CPU-only capture, or GPU activities were not recorded).")
        console.print()
        return
    table = Table(show_lines=False, pad_edge=False, header_style="bold")
    for col, justify in (
        ("Kernel", "left"), ("GPU", "right"), ("Launches", "right"), ("Time %", "right"),
        ("Warps/SM", "right"), ("Reported min", "right"), ("Resident", "right"), ("Theor. occ", "right"),
        ("Est. occ", "right"), ("Limiter", "left"), ("Waves", "right"), ("Artefacts", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    shown = analysis.kernels if top <= 0 else analysis.kernels[:top]
    for k in shown:
        arts = ", ".join(f"{_ARTIFACT_SHORT[a]} {n}" for a, n in k.artifacts.items())
        table.add_row(
            _short(k.name),
            str(k.device),
            str(k.samples),
            _fmt(k.time_share * 100 if k.time_share is not None else None, ".1f"),
            _fmt(k.warps_per_sm),
            _fmt_reported(k.reported_warps_per_sm_min),
            _fmt(k.resident_warps_per_sm),
            _fmt(k.theoretical_occupancy * 100 if k.theoretical_occupancy is not None else None, ".0f") + "%"
            if k.theoretical_occupancy is not None else "-",
            _fmt(k.estimated_occupancy * 100 if k.estimated_occupancy is not None else None, ".0f") + "%"
            if k.estimated_occupancy is not None else "-",
            k.main_limiter or "-",
            _fmt(k.waves_per_sm),
            arts,
        )
    console.print(table)
    if len(shown) < len(analysis.kernels):
        console.print(f"  … {len(analysis.kernels) - len(shown)} more kernels (--top 0 shows all)")
    console.print(
        "  Warps/SM: launched warps per SM, corrected; Reported: the profiler's own value (minimum); "
        "Resident: warps actually on an SM at once (waves and tail accounted). Launches are raw counts; "
        "time shares and means are corrected for the capture window (long kernels are under-sampled)."
    )
    for line in explanations(analysis, trace):
        console.print(Text("  • " + printable(line)))
    console.print()


def explanations(analysis: WindowAnalysis, trace: Trace | None = None) -> Iterator[str]:
    """One plain sentence per artefact kind found, plus the launched-vs-resident note when it applies."""
    for kind in ARTIFACT_KINDS:
        n = analysis.artifacts.get(kind)
        if n:
            yield f"{kind} ({n} launches): {ARTIFACT_EXPLANATIONS[kind]}"
    over = [
        k for k in analysis.kernels
        if k.reported_warps_per_sm_min is not None
        and (props := next((d.properties for d in analysis.devices if d.device == k.device), None)) is not None
        and k.reported_warps_per_sm_min > props.max_warps_per_sm
    ]
    if over:
        yield (
            f"{len(over)} kernels report more warps per SM than an SM can hold: the profiler's 'warps per SM' "
            "counts every warp of every wave (launched, not resident). See the Resident column for what an SM "
            "actually holds."
        )
    if trace is not None:
        yield from trace.warnings
