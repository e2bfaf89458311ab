"""`warpwatch diff A B`: what changed per kernel between two traces (issue 45, "Say why").

A and B are trace files (what `warpwatch analyze` reads) or windows that `warpwatch evidence pull`
wrote (`ID.trace.json.gz`, its `ID.meta.json`, or `DIR/ID`). The table shows, per kernel, what
changed from A to B: launch resources (the code: block, registers, shared memory), what the device
makes of them (active blocks per SM, limiter, theoretical occupancy), the load (grid, waves) and
the estimated occupancy, with the time share on each side. By default only kernels whose resources
or occupancy limits changed, and those that appeared or vanished with a share of at least
`MIN_SHARE`, are shown; `--all` shows every kernel. `--format json` gives every kernel
(`"schema": "warpwatch.diff/1"`).
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Sequence
from typing import IO, Any

import msgspec

from ..analysis.kerneldiff import KernelChange, KernelProfile, LaunchConfig, Side, TraceDiff, diff_traces
from ..errors import TraceError, WarpwatchError
from ..evidence.store import META_SUFFIX, TRACE_SUFFIX, is_id
from ..model import Trace
from ..names.labels import KernelNamer
from ..trace import DEFAULT_MAX_BYTES, read_trace
from .analyze import table_width
from .escape import printable
from .sizes import byte_size, cli_message
from .table import distinct_cuts
from .table_cells import DASH, percent, share

SCHEMA = "warpwatch.diff/1"
MIN_SHARE = 0.005
"""Kernels that appeared or vanished are shown by default from this time share on (0.5 %)."""
INDENT = 2
ARROW = "→"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "diff",
        help="what changed per kernel between two traces: resources, limiter, occupancy, time share",
        description="Compare two traces (or two windows kept by the agent) kernel by kernel: launch "
        "configuration, registers, shared memory, limiting factor, theoretical and estimated occupancy, "
        "time share; kernels that appeared or vanished.",
    )
    p.add_argument("a", metavar="A", help="the earlier trace: a file (.json, .json.gz) or a kept window's id or path")
    p.add_argument("b", metavar="B", help="the later trace, likewise")
    add_output_flags(p)
    p.add_argument(
        "--max-trace-bytes",
        type=byte_size,
        default=DEFAULT_MAX_BYTES,
        metavar="SIZE",
        help="refuse traces larger than this once decompressed (default 2GiB)",
    )
    p.set_defaults(func=run_diff)


def add_output_flags(p: argparse.ArgumentParser) -> None:
    """`--format`, `--top`, `--all`: shared with `warpwatch evidence diff`."""
    p.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    p.add_argument("--top", type=int, default=25, metavar="N", help="table rows at most (default 25; 0 = all)")
    p.add_argument(
        "--all",
        action="store_true",
        help="every kernel, also those whose launch resources did not change (the load alone, or nothing)",
    )


def run_diff(args: argparse.Namespace) -> int:
    a = read_side(args.a, args.max_trace_bytes)
    b = read_side(args.b, args.max_trace_bytes)
    write_diff(sys.stdout, diff_traces(a, b), args)
    return 0


def trace_path(arg: str) -> str:
    """The trace file `arg` names: a file as it is; a kept window's id, `DIR/ID` or its
    `ID.meta.json`: the `ID.trace.json.gz` beside it."""
    if arg.endswith(META_SUFFIX) and is_id(os.path.basename(arg).removesuffix(META_SUFFIX)):
        return arg.removesuffix(META_SUFFIX) + TRACE_SUFFIX
    if not os.path.exists(arg) and is_id(os.path.basename(arg)):
        return arg + TRACE_SUFFIX
    return arg


def read_side(arg: str, max_bytes: int = DEFAULT_MAX_BYTES) -> Trace:
    """The trace `arg` names (`trace_path`); a trace that cannot be read: a WarpwatchError naming it."""
    try:
        return read_trace(trace_path(arg), max_bytes=max_bytes)
    except TraceError as exc:
        raise WarpwatchError(cli_message(exc)) from None


def notable(change: KernelChange) -> bool:
    """Shown without `--all`: launch resources or occupancy limits changed, or the kernel appeared or
    vanished with at least `MIN_SHARE` of its window."""
    if change.status in ("appeared", "vanished"):
        return change.max_share >= MIN_SHARE
    return change.resources_changed


def write_diff(
    out: IO[str], diff: TraceDiff, args: argparse.Namespace, heading: Sequence[str] = (), extra: Any = None
) -> None:
    """The diff in `args.format`; `heading`: lines above the table, `extra`: a JSON member `evidence`."""
    if args.format == "json":
        doc = diff_to_dict(diff)
        if extra is not None:
            doc["evidence"] = extra
        out.write(msgspec.json.encode(doc).decode() + "\n")
    else:
        for line in heading:
            out.write(printable(line) + "\n")
        for line in table_lines(diff, top=args.top, show_all=args.all, width=table_width(out.isatty()) or 200):
            out.write(line + "\n")
    out.flush()


# --- Table


def table_lines(diff: TraceDiff, *, top: int = 25, show_all: bool = False, width: int = 200) -> list[str]:
    """The header, one row per kernel shown (what changed wrapped under its column), and what was left
    out, at `width` characters."""
    lines = [wrapped for line in header_lines(diff) for wrapped in _wrap(line, width, 0)]
    chosen = [c for c in diff.kernels if show_all or notable(c)]
    rows = chosen if top <= 0 else chosen[:top]
    if not rows:
        return lines + _wrap("No kernel's launch resources changed (--all shows every kernel).", width, INDENT)
    namer = KernelNamer()
    labels = [printable(namer(c.name)) for c in rows]
    shares = [f"{_share(c.a)}{ARROW}{_share(c.b)}" for c in rows]
    kernel_w = max(len("Kernel"), min(max(map(len, labels)), max(24, min(64, width // 3))))
    share_w = max(len("Time % A→B"), *map(len, shares))
    lead = INDENT + kernel_w + 2 + share_w + 2
    body = []
    for label, s, change in zip(distinct_cuts(labels, kernel_w), shares, rows, strict=True):
        what = _pack(what_changed(change).split(", "), width - lead)
        body.append(" " * INDENT + f"{label:<{kernel_w}}  {s:>{share_w}}  {what[0]}")
        body.extend(" " * lead + more for more in what[1:])
    lines.append(" " * INDENT + f"{'Kernel':<{kernel_w}}  {'Time % A→B':>{share_w}}  What changed")
    lines.append(" " * INDENT + "─" * (min(width, max(map(len, body))) - INDENT))
    lines.extend(body)
    for note in _left_out(diff, chosen, rows, show_all):
        lines.extend(_wrap(note, width, INDENT))
    return lines


def _pack(items: Sequence[str], width: int) -> list[str]:
    """`items` joined by ", " in lines of at most `width` (at least 40) characters, never cut inside one."""
    out = [items[0]]
    for item in items[1:]:
        if len(out[-1]) + 2 + len(item) <= max(width, 40):
            out[-1] += ", " + item
        else:
            out[-1] += ","
            out.append(item)
    return out


def _wrap(text: str, width: int, indent: int) -> list[str]:
    """`text` wrapped at `width` (at least 40), every line indented by `indent`, long words broken."""
    pad = " " * indent
    return textwrap.wrap(text, max(width, 40), initial_indent=pad, subsequent_indent=pad, break_on_hyphens=False) or [
        ""
    ]


def header_lines(diff: TraceDiff) -> list[str]:
    """Which traces, which GPUs, and how their devices were matched."""
    out = []
    for tag, side in (("A", diff.a), ("B", diff.b)):
        gpus = "; ".join(f"GPU {d} {p.name if p else '(no device properties)'}" for d, p in side.devices.items())
        out.append(
            f"{tag}: {printable(side.path)}  ({gpus or 'no kernels'}; window {side.window.duration / 1000:,.3f} ms)"
        )
    for da, db in diff.device_pairs:
        if da is not None and db is not None and da != db:
            out.append(f"Kernels of GPU {da} in A matched with GPU {db} in B: each trace ran its kernels on one GPU.")
    names = {p.name for side in (diff.a, diff.b) for p in side.devices.values() if p is not None}
    if len(names) > 1:
        out.append(
            f"The GPU models differ ({', '.join(sorted(names))}): the same launch resources can give another "
            "occupancy, and the same grid other waves."
        )
    out.append("")
    return out


def _left_out(
    diff: TraceDiff, chosen: Sequence[KernelChange], rows: Sequence[KernelChange], show_all: bool
) -> list[str]:
    notes = []
    if len(rows) < len(chosen):
        notes.append(f"… {len(chosen) - len(rows)} more (--top 0 shows all)")
    hidden = len(diff.kernels) - len(chosen)
    if hidden and not show_all:
        notes.append(
            f"{hidden} kernel{'s' if hidden != 1 else ''} not shown: only their load (grid, waves) or estimated "
            "occupancy changed, or nothing, or they appeared or vanished below "
            f"{MIN_SHARE * 100:g} % of the window (--all shows them)."
        )
    return notes


def _share(p: KernelProfile | None) -> str:
    return DASH if p is None else share(p.time_share)


def what_changed(change: KernelChange) -> str:
    """`regs 64→128, blocks/SM 4→2 (limiter registers), theor. occ 50%→25%`, or what a kernel that
    appeared or vanished ran with."""
    if change.a is None or change.b is None:
        p = change.b or change.a
        assert p is not None
        return f"{change.status}: {describe(p.config)}"
    a, b = change.a, change.b
    parts = []
    for field, word, value in _TEXTS:
        if field in change.changed:
            parts.append(f"{word} {value(a)}{ARROW}{value(b)}")
            if field == "max_active_blocks_per_sm":
                parts[-1] += f" (limiter {_limiter_change(a.config, b.config)})"
    if "max_active_blocks_per_sm" not in change.changed and "limiting_factors" in change.changed:
        parts.append(f"limiter {_limiter_change(a.config, b.config)}")
    return ", ".join(parts) or "no change"


def describe(c: LaunchConfig) -> str:
    """A launch configuration in a few words."""
    limiter = f" (limiter {_limiter(c)})" if c.limiting_factors else ""
    return (
        f"grid {_dims(c.grid)}, block {_dims(c.block)}, regs {_num(c.registers_per_thread)}, "
        f"smem {_bytes(c.shared_memory)}, blocks/SM {_num(c.max_active_blocks_per_sm)}{limiter}, "
        f"theor. occ {percent(c.theoretical_occupancy)}"
    )


_TEXTS: tuple[tuple[str, str, Callable[[KernelProfile], str]], ...] = (
    ("block", "block", lambda p: _dims(p.config.block)),
    ("registers_per_thread", "regs", lambda p: _num(p.config.registers_per_thread)),
    ("shared_memory", "smem", lambda p: _bytes(p.config.shared_memory)),
    ("max_active_blocks_per_sm", "blocks/SM", lambda p: _num(p.config.max_active_blocks_per_sm)),
    ("theoretical_occupancy", "theor. occ", lambda p: percent(p.config.theoretical_occupancy)),
    ("estimated_occupancy", "est. occ", lambda p: percent(p.estimated_occupancy)),
    ("grid", "grid", lambda p: _dims(p.config.grid)),
    ("waves_per_sm", "waves", lambda p: _waves(p.waves_per_sm)),
)
"""(field, word, its value on one side) in the order the table says the changed fields: the code, what
the device makes of it, the estimate, then the load."""


def _limiter_change(a: LaunchConfig, b: LaunchConfig) -> str:
    la, lb = _limiter(a), _limiter(b)
    return lb if la == lb else f"{la}{ARROW}{lb}"


def _dims(d: tuple[int, int, int] | None) -> str:
    if d is None:
        return DASH
    x, y, z = d
    return str(x) if y == z == 1 else f"{x}×{y}" if z == 1 else f"{x}×{y}×{z}"


def _num(v: int | None) -> str:
    return DASH if v is None else str(v)


def _bytes(n: int | None) -> str:
    if n is None:
        return DASH
    return f"{n // 1024} KiB" if n and n % 1024 == 0 else f"{n:,} B"


def _waves(v: float | None) -> str:
    """Waves with two decimals, none from 100 on, two significant digits below 0.1 (a wave's tail)."""
    if v is None:
        return DASH
    return f"{v:,.0f}" if v >= 100 else f"{v:.2f}" if v >= 0.1 else f"{v:.2g}"


def _limiter(c: LaunchConfig) -> str:
    return "+".join(f.replace("_", " ") for f in c.limiting_factors) if c.limiting_factors else DASH


# --- JSON


def diff_to_dict(diff: TraceDiff) -> dict[str, Any]:
    """The JSON form: both traces, the device pairs, and every kernel with both sides and `changed`."""
    namer = KernelNamer()
    return {
        "schema": SCHEMA,
        "a": _side_dict(diff.a),
        "b": _side_dict(diff.b),
        "device_pairs": [{"a": da, "b": db} for da, db in diff.device_pairs],
        "kernels": [_change_dict(c, namer) for c in diff.kernels],
    }


def _side_dict(side: Side) -> dict[str, Any]:
    return {
        "path": side.path,
        "window": {"t0_us": side.window.t0, "t1_us": side.window.t1, "duration_us": side.window.duration},
        "devices": [
            {"device": d, "name": p.name if p else None, "sms": p.num_sms if p else None}
            for d, p in side.devices.items()
        ],
    }


def _change_dict(c: KernelChange, namer: KernelNamer) -> dict[str, Any]:
    return {
        "name": c.name,
        "label": namer(c.name),
        "status": c.status,
        "notable": notable(c),
        "changed": list(c.changed),
        "code_changed": list(c.code),
        "load_changed": list(c.load),
        "a": _profile_dict(c.a),
        "b": _profile_dict(c.b),
    }


def _profile_dict(p: KernelProfile | None) -> dict[str, Any] | None:
    if p is None:
        return None
    c = p.config
    return {
        "device": p.device,
        "grid": list(c.grid) if c.grid else None,
        "block": list(c.block) if c.block else None,
        "registers_per_thread": c.registers_per_thread,
        "shared_memory": c.shared_memory,
        "max_active_blocks_per_sm": c.max_active_blocks_per_sm,
        "limiting_factors": list(c.limiting_factors) if c.limiting_factors is not None else None,
        "theoretical_occupancy": c.theoretical_occupancy,
        "config_gpu_time_us": c.gpu_time,
        "config_launches_observed": c.samples,
        "configurations": p.configurations,
        "launches_observed": p.samples,
        "gpu_time_us": p.gpu_time,
        "time_share": p.time_share,
        "mean_theoretical_occupancy": p.theoretical_occupancy,
        "estimated_occupancy": p.estimated_occupancy,
        "waves_per_sm": p.waves_per_sm,
    }
