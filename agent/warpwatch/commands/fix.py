"""The `warpwatch fix TRACE -o OUT` command: a copy of a trace with the profiler's numbers corrected.

Every kernel event's `warps per SM`, `blocks per SM` and `est. achieved occupancy %` args get the
values warpwatch computes (docs/metrics.md), so that any trace viewer (Perfetto, TensorBoard's
trace viewer, HTA) shows the right numbers:

- `warps per SM`: launched warps per SM, B·ceil(T/warpSize)/SMs (what Kineto meant, computed right);
- `blocks per SM`: B/SMs;
- `est. achieved occupancy %`: estimated occupancy (resident warps per SM / max warps per SM) in %.

Beside each, the value the trace had is kept as `reported <arg>`, and `warpwatch artefacts` lists
every way the reported values were wrong (the spec's artefact kinds). A value warpwatch cannot
compute (no device properties, no launch configuration, an AMD grid in unknown units) is left as
the trace had it, and the command says why, per reason. Nothing else changes: other events, other
args and the top-level keys are kept, in their order.

Run on its own output, `fix` starts from the profiler's values kept in `reported <arg>` (`null`
there: the profiler wrote none), so that those stay the profiler's and the artefacts are the
profiler's, not warpwatch's. The copy is gzip-compressed when OUT ends in `.gz`, and created with
the mode the umask gives (0666 minus the umask), like any file the shell writes.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from ..analysis.window import effective_devices, launch_metrics
from ..errors import TraceError
from ..model import LaunchMetrics, Trace
from ..trace import DEFAULT_MAX_BYTES, KERNEL_CATEGORIES, parse_trace
from ..trace.messages import too_large
from ..trace.repair import sanitize
from .escape import printable
from .sizes import add_max_trace_bytes, cli_message

REPORTED_PREFIX = "reported "
"""Prefix (not a suffix: HTA drops parenthesised parts of arg names, so `x (reported)` would read as `x`)."""
ARTEFACTS_ARG = "warpwatch artefacts"
WARPS, BLOCKS, OCCUPANCY = "warps per SM", "blocks per SM", "est. achieved occupancy %"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "fix",
        help="write a copy of a Kineto trace whose warps/blocks per SM and occupancy args are corrected",
        description="Copy a Kineto (PyTorch profiler) trace, replacing each kernel's 'warps per SM', "
        "'blocks per SM' and 'est. achieved occupancy %%' with warpwatch's corrected values; the reported "
        "values stay beside them as 'reported <arg>', with the artefact kinds in 'warpwatch artefacts'.",
    )
    p.add_argument("trace", metavar="TRACE", help="trace file (.json or .json.gz)")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        required=True,
        help="where to write the corrected copy (gzip-compressed when OUT ends in .gz)",
    )
    add_max_trace_bytes(p)
    p.set_defaults(func=run_fix)


def run_fix(args: argparse.Namespace) -> int:
    try:
        counts = fix_trace(args.trace, args.output, max_bytes=args.max_trace_bytes)
    except TraceError as exc:
        print(f"warpwatch fix: error: {cli_message(exc)}", file=sys.stderr)
        return 1
    print(
        f"wrote {printable(args.output)}: {counts['kernels']} kernel events, {counts['corrected']} with corrected "
        f"values, {counts['artefacts']} with profiler artefacts"
    )
    for reason, n in counts.get("reasons", {}).items():
        print(f"  {n} not corrected: {printable(reason)}")
    for note in counts.get("notes", []):
        print(f"  {printable(note)}")
    return 0


def fix_trace(src: str, dst: str, *, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """Write the corrected copy of `src` to `dst` (module doc); counts of kernels, corrected, with
    artefacts, and `reasons` (why kernels were not corrected: count by reason) and `notes`."""
    if _same_file(src, dst):
        raise TraceError(dst, "is the input trace: write the corrected copy elsewhere")
    data, _ = _load(src, max_bytes)
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError:
        try:  # Kineto's known invalid JSON (bare inf/nan, raw control characters), made valid as the reader does
            doc = msgspec.json.decode(sanitize(data))
        except msgspec.DecodeError as exc:
            raise TraceError(src, f"invalid JSON ({exc})") from None
    events = doc if isinstance(doc, list) else doc.get("traceEvents", []) if isinstance(doc, dict) else []
    kernels = [e for e in events if _is_kernel(e)]
    restored = [_restore_reported(e) for e in kernels]  # all of them: any() alone would stop at the first
    if any(restored):  # warpwatch's own output: read the profiler's values
        data = msgspec.json.encode(doc)
    trace = parse_trace(data, src)
    metrics = list(launch_metrics(trace))
    if len(kernels) != len(metrics):
        raise TraceError(src, f"found {len(kernels)} kernel events but read {len(metrics)} launches")
    counts: dict[str, Any] = {"kernels": len(kernels), "corrected": 0, "artefacts": 0}
    reasons: Counter[str] = Counter()
    devices, inferred = effective_devices(trace)
    for event, lm in zip(kernels, metrics, strict=True):
        changed, flagged = _fix_event(event, lm)
        counts["corrected"] += changed
        counts["artefacts"] += flagged
        if not changed:
            reasons[_why_not(lm, trace, devices)] += 1
    counts["reasons"] = dict(reasons.most_common())
    counts["notes"] = [
        f"device {d}: the properties of device {s} applied (the trace describes one device model)"
        for d, s in sorted(inferred.items())
    ]
    out = msgspec.json.encode(doc)
    if dst.endswith(".gz"):
        out = gzip.compress(out, compresslevel=6, mtime=0)
    _write_atomically(dst, out)
    return counts


def _restore_reported(event: dict[str, Any]) -> bool:
    """Put back the profiler's values that an earlier `fix` kept as `reported <arg>`; whether any were."""
    args = event.get("args")
    if not isinstance(args, dict) or not any(REPORTED_PREFIX + k in args for k in (WARPS, BLOCKS, OCCUPANCY)):
        return False
    for key in (WARPS, BLOCKS, OCCUPANCY):
        if REPORTED_PREFIX + key in args:
            original = args.pop(REPORTED_PREFIX + key)
            if original is None:
                args.pop(key, None)
            else:
                args[key] = original
    args.pop(ARTEFACTS_ARG, None)
    return True


def _why_not(lm: LaunchMetrics, trace: Trace, devices: dict[int, Any]) -> str:
    """Why a launch got no corrected value, in words."""
    launch = lm.launch
    props = devices.get(launch.device)
    if props is None:
        listed = ", ".join(map(str, sorted(trace.devices))) or "none"
        return (
            f"no device properties for device {launch.device} (the trace lists: {listed}); "
            "give them with `warpwatch analyze --gpu-properties`"
        )
    if launch.grid is None or launch.block is None:
        return "no grid/block in the event (CUDA graph replays, some ROCm versions)"
    if "grid_units_unknown" in lm.artifacts:
        return "an AMD grid in unknown units (no HIP launch call with the same correlation id)"
    if props.num_sms <= 0:
        return f"device {launch.device} has no valid SM count in its properties"
    return "its block or grid is empty"


def _is_kernel(event: Any) -> bool:
    return isinstance(event, dict) and event.get("ph") == "X" and event.get("cat") in KERNEL_CATEGORIES


def corrected_args(lm: LaunchMetrics) -> dict[str, float]:
    """The corrected values of one launch, for those warpwatch knows."""
    out: dict[str, float] = {}
    if lm.warps_per_sm is not None:
        out[WARPS] = lm.warps_per_sm
        if lm.warps_per_block:
            out[BLOCKS] = lm.warps_per_sm / lm.warps_per_block
    if lm.estimated_occupancy is not None:
        out[OCCUPANCY] = round(lm.estimated_occupancy * 100, 2)
    return out


def _fix_event(event: dict[str, Any], lm: LaunchMetrics) -> tuple[bool, bool]:
    args = event.get("args")
    if not isinstance(args, dict):
        return False, False
    fixed = corrected_args(lm)
    for key, value in fixed.items():
        args[REPORTED_PREFIX + key] = args.get(key)  # None: the profiler wrote none
        args[key] = value
    if lm.artifacts:
        args[ARTEFACTS_ARG] = list(lm.artifacts)
    return bool(fixed), bool(lm.artifacts)


def _load(path: str, max_bytes: int) -> tuple[bytes, bool]:
    """The trace's bytes (gunzipped, at most `max_bytes`) and whether it was gzip-compressed.

    The whole document is held (and re-encoded): `fix` is a command for one trace, not the agent."""
    try:
        with open(path, "rb") as raw:
            gzipped = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            if gzipped:
                with gzip.GzipFile(fileobj=raw) as gz:
                    data = gz.read(max_bytes + 1)
            else:
                data = raw.read(max_bytes + 1)
    except FileNotFoundError:
        raise TraceError(path, "no such file", kind="io_error") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file", kind="io_error") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(path, f"corrupt or truncated gzip data ({exc})") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}", kind="io_error") from None
    if len(data) > max_bytes:
        raise TraceError(path, too_large(max_bytes), kind="too_large")
    return data, gzipped


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_atomically(path: str, data: bytes) -> None:
    target = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or ".")
    except OSError as exc:
        raise TraceError(path, f"cannot write: {exc.strerror or exc}") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a written file follows the umask
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise TraceError(path, f"cannot write: {exc.strerror or exc}") from None
