"""The `warpwatch analyze TRACE...` command: explain traces as tables, JSON or per-launch JSON lines.
A TRACE of `-` is the trace piped in on standard input (plain or gzip-compressed), named `<stdin>`."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

import msgspec
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..analysis.window import analyze, effective_devices, launch_metrics, window_of
from ..errors import TraceError
from ..model import (
    DeviceProperties,
    Trace,
)
from ..names.labels import KernelNamer
from ..trace import load_gpu_properties, read_trace
from ..trace.messages import too_large
from .analyze_json import analysis_to_dict, document, error_record, launch_record
from .escape import printable
from .sizes import add_max_trace_bytes, cli_message
from .table import render_table

PROGRESS_MIN_BYTES = 50 * 1024**2
STDIN, STDIN_NAME = "-", "<stdin>"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "analyze",
        help="explain one or more Kineto traces: corrected warps per SM, occupancy, profiler artefacts",
        description="Read Kineto (PyTorch profiler) traces and report per-kernel warps per SM, occupancy and "
        "waves, corrected for the profiler's artefacts and for the sampling window.",
    )
    p.add_argument(
        "traces", nargs="+", metavar="TRACE", help="trace files (.json, .json.gz); - reads one from standard input"
    )
    p.add_argument("--format", choices=("table", "json", "jsonl"), default="table", help="output format")
    p.add_argument("--launches", action="store_true", help="one record per kernel event (use with --format jsonl)")
    p.add_argument(
        "--gpu-properties",
        metavar="FILE",
        help="device properties for traces that carry none: JSON in the trace's own `deviceProperties` form, "
        "one object, a list of them, or an object keyed by device id (see docs/analyze.md)",
    )
    p.add_argument("--top", type=int, default=25, metavar="N", help="table rows per trace (default 25; 0 = all)")
    add_max_trace_bytes(p)
    p.set_defaults(func=run_analyze)


def run_analyze(args: argparse.Namespace) -> int:
    if args.launches and args.format != "jsonl":
        print("warpwatch analyze: error: --launches needs --format jsonl", file=sys.stderr)
        return 2
    gpu_props = load_gpu_properties(args.gpu_properties) if args.gpu_properties else None
    out = sys.stdout
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    console = Console(file=out, highlight=False, soft_wrap=False, width=table_width(out.isatty()))
    namer = KernelNamer()
    for path in args.traces:
        try:
            if path == STDIN:
                trace = _read_stdin(args.max_trace_bytes, gpu_props)
            else:
                trace = _read(path, args.max_trace_bytes, gpu_props)
            if gpu_props is not None:
                _check_gpu_properties(args.gpu_properties, gpu_props, trace)
            if args.launches:
                _write_launches(trace, out)
                continue
            analysis = analyze(trace)
        except TraceError as exc:
            print(f"warpwatch: error: {cli_message(exc)}", file=sys.stderr)
            errors.append(error_record(exc, cli_message(exc)))
            continue
        if args.format == "table":
            render_table(console, trace, analysis, top=args.top, namer=namer)
        else:
            results.append(analysis_to_dict(analysis, trace))
    if args.format == "json" and not args.launches:
        out.write(msgspec.json.encode(document(results, errors)).decode() + "\n")
    elif args.format == "jsonl" and not args.launches:
        for r in results:
            out.write(msgspec.json.encode(r).decode() + "\n")
    out.flush()
    return 1 if errors else 0


def table_width(tty: bool) -> int | None:
    """`COLUMNS` when set (also when piped), else the terminal's width, else 200."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return None if tty else 200


def _check_gpu_properties(path: str, props: dict[int, DeviceProperties], trace: Trace) -> None:
    """Say so when no device id of `--gpu-properties` is a device the trace's kernels ran on."""
    used = sorted({launch.device for launch in trace.launches})
    if not used or set(used) & set(props):
        return
    devices, inferred = effective_devices(trace)
    missing = [d for d in used if d not in devices]
    applied = sorted(inferred)
    print(
        f"warpwatch analyze: warning: --gpu-properties {printable(path)}: its device ids "
        f"({', '.join(map(str, sorted(props)))}) match no device of {printable(trace.path)}, whose kernels ran on "
        f"device{'s' if len(used) > 1 else ''} {', '.join(map(str, used))}; "
        + (f"occupancy stays unknown for {', '.join(map(str, missing))}. " if missing else "")
        + (
            f"as the trace then describes one device model, its properties apply to {', '.join(map(str, applied))} "
            "(the output says so). "
            if applied
            else ""
        )
        + "Give each entry the `id` of the device it describes.",
        file=sys.stderr,
    )


def _read(path: str, max_bytes: int, gpu_props: dict[int, DeviceProperties] | None) -> Trace:
    size = _size(path)
    if size < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        return read_trace(path, max_bytes=max_bytes, gpu_properties=gpu_props)
    # No auto-refresh: a refresh thread would keep read_trace from decoding on every core (it
    # forks worker processes only when the caller runs no other thread).
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
        auto_refresh=False,
    ) as progress:
        task = progress.add_task(f"reading {os.path.basename(path)} ({size / 1e6:.0f} MB)", total=2)
        progress.refresh()
        trace = read_trace(path, max_bytes=max_bytes, gpu_properties=gpu_props)
        progress.update(task, advance=1, description=f"analysing {os.path.basename(path)}")
        progress.refresh()
        return trace


def _read_stdin(max_bytes: int, gpu_props: dict[int, DeviceProperties] | None) -> Trace:
    """The trace piped in (`analyze -`), named `<stdin>`: spooled to a temporary file, as the reader
    seeks (and tells gzip by its magic); more than `max_bytes` piped in is refused as too large."""
    if sys.stdin is None or sys.stdin.isatty():
        raise TraceError(STDIN_NAME, "standard input is a terminal; pipe a trace in: warpwatch analyze - < TRACE")
    with tempfile.TemporaryDirectory(prefix="warpwatch-stdin-") as tmp:
        spooled = Path(tmp) / "stdin.json"
        with spooled.open("wb") as f:
            while chunk := sys.stdin.buffer.read(1024**2):
                if f.tell() + len(chunk) > max_bytes:
                    raise TraceError(STDIN_NAME, too_large(max_bytes), kind="too_large")
                f.write(chunk)
        try:
            trace = read_trace(spooled, max_bytes=max_bytes, gpu_properties=gpu_props)
        except TraceError as exc:
            raise TraceError(STDIN_NAME, exc.reason, kind=exc.kind) from None
    return dataclasses.replace(trace, path=STDIN_NAME)


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


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
