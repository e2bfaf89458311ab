"""Build large, realistic Kineto traces for the benchmarks from the real ones in ../shared/traces.

A generated trace is one real trace's events replicated back to back in time: copy i is shifted
by i * (the source's Trace span + a gap), so kernels never overlap across copies. Every event
category of the source is kept (cpu_op, cuda_runtime, ac2g flows, instant and metadata events,
memcpy/memset, kernels...), not only kernels, and a single `Trace` span event covers all copies,
so a reader sees one long capture window. Top-level keys (deviceProperties, distributedInfo,
schemaVersion...) are copied once. Output goes to benchmarks/data/ (git-ignored).

    python benchmarks/gen_traces.py                      # the reference file + 50 MB, 500 MB, 1 GB
    python benchmarks/gen_traces.py --sizes 50MB 2GB     # other sizes
    python benchmarks/gen_traces.py --reference-only     # only the reference file
    python benchmarks/gen_traces.py --reference-only --one-line --gzip   # + its one-line twin, + .gz of each

The reference file (`reference_df_index_resolver_x10.json`) is HTA's df_index_resolver trace
(8 x V100 training, 216,092 events, 19,370 kernels) replicated exactly 10 times: 2,160,920
events, 193,700 kernels, about 470 MB. The sized files use the same source, replicated until
the requested size is reached (`--source` picks another trace).

Two layouts of the same document: the files above have one event per line, as Kineto's own writer
does; `--one-line` also writes each file's twin `NAME.oneline.json`, the whole document on one line
as `json.dump` writes it (`, ` and `: ` separators: what tools that re-save or merge traces write,
and how TraceLens publishes its production traces). The twin decodes to the same JSON value.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHARED = Path(os.environ.get("WARPWATCH_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
HTA_DATA = SHARED / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"
REFERENCE_SOURCE = HTA_DATA / "df_index_resolver" / "df_index_resolver.json.gz"
REFERENCE_NAME = "reference_df_index_resolver_x10.json"
REFERENCE_COPIES = 10
ONE_LINE_SUFFIX = ".oneline.json"
DATA = HERE / "data"
DEFAULT_SIZES = ("50MB", "500MB", "1GB")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """'50MB' -> 50_000_000 (decimal units; KiB/MiB/GiB are binary)."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 50MB, 1GB, 512MiB)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def load(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        doc = json.load(fh)
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    return doc


def _extent(events: list[dict[str, Any]]) -> tuple[float, float]:
    """(first start, last end) over every timed event of the source, the Trace span included."""
    starts = [ev["ts"] for ev in events if isinstance(ev.get("ts"), (int, float))]
    ends = [
        ev["ts"] + ev["dur"]
        for ev in events
        if isinstance(ev.get("ts"), (int, float)) and isinstance(ev.get("dur"), (int, float))
    ]
    return min(starts), max(ends + starts)


def _shift(value: Any, offset: int | float) -> Any:
    return value + offset if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def write_replicated(source: Path, out: Path, *, copies: int | None = None, size: int | None = None) -> dict[str, Any]:
    """Write `source` replicated `copies` times (or until `size` bytes); return a summary."""
    doc = load(source)
    events: list[dict[str, Any]] = doc.pop("traceEvents")
    t0, t1 = _extent(events)
    length = t1 - t0
    period = length + max(length / 100, 1)  # copies follow each other with a 1 % gap
    if isinstance(t0, int) and isinstance(length, int):
        period = int(period)
    body = [ev for ev in events if not (ev.get("ph") == "X" and ev.get("cat") == "Trace")]
    template = next((ev for ev in events if ev.get("ph") == "X" and ev.get("cat") == "Trace"), None)
    header = {k: v for k, v in doc.items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    written = n_events = n_kernels = 0
    with open(tmp, "wb") as fh:

        def emit(chunk: str) -> None:
            nonlocal written
            data = chunk.encode()
            fh.write(data)
            written += len(data)

        head = json.dumps(header)[:-1]  # without the closing brace
        emit(head + (", " if header else "") + '"traceEvents": [\n')
        # The span covering every copy comes first, as Kineto writes it near the start.
        n = copies if copies is not None else 1 << 30
        first = True
        i = 0
        span_pos = fh.tell()
        span_placeholder = json.dumps(_span_event(template, t0, 0)) + ",\n"
        emit(" " * (len(span_placeholder) + 32) + "\n")  # overwritten below once the copy count is known
        end = t0
        while i < n and (size is None or written < size):
            offset = i * period
            for start in range(0, len(body), 1000):
                if size is not None and written >= size:
                    break
                parts = []
                for ev in body[start : start + 1000]:
                    shifted = dict(ev)
                    if "ts" in shifted:
                        shifted["ts"] = _shift(shifted["ts"], offset)
                        dur = shifted.get("dur")
                        end = max(end, shifted["ts"] + (dur if isinstance(dur, (int, float)) else 0))
                    parts.append(json.dumps(shifted))
                    if ev.get("ph") == "X" and ev.get("cat") in ("kernel", "Kernel"):
                        n_kernels += 1
                n_events += len(parts)
                emit(("" if first else ",\n") + ",\n".join(parts))
                first = False
            i += 1
        emit("\n]}\n")
        # Now the span: from the first event's start to the end of the last event written.
        span = json.dumps(_span_event(template, t0, end - t0))
        fh.seek(span_pos)
        fh.write((span + ",").ljust(len(span_placeholder) + 32).encode())
    os.replace(tmp, out)
    n_events += 1
    return {
        "path": str(out),
        "bytes": out.stat().st_size,
        "copies": i,
        "events": n_events,
        "kernels": n_kernels,
        "source": str(source),
    }


def one_line_name(path: Path) -> Path:
    """NAME.json -> NAME.oneline.json"""
    return path.with_name(path.name.removesuffix(".json") + ONE_LINE_SUFFIX)


def write_one_line(source: Path, out: Path) -> int:
    """Write the one-line twin of a file written by `write_replicated` (every event, the head and
    the end on lines of their own), streamed a line at a time: the lines stripped and joined as
    `json.dump` joins them (`, ` after a comma); returns the bytes written."""
    tmp = out.with_name(out.name + ".tmp")
    written = 0
    with open(source, "rb") as src, open(tmp, "wb") as dst:
        after_comma = False
        for raw in src:
            line = raw.strip()
            if not line:
                continue
            data = (b" " if after_comma else b"") + line
            dst.write(data)
            written += len(data)
            after_comma = line.endswith(b",")
    os.replace(tmp, out)
    return written


def _span_event(template: dict[str, Any] | None, ts: float, dur: float) -> dict[str, Any]:
    ev = (
        dict(template)
        if template
        else {
            "ph": "X",
            "cat": "Trace",
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        }
    )
    ev["ts"] = ts
    ev["dur"] = dur
    return ev


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="*", type=parse_size, default=None, help="sizes to build (default 50MB 500MB 1GB)")
    p.add_argument("--source", type=Path, default=REFERENCE_SOURCE, help="the trace to replicate for sized files")
    p.add_argument("--out", type=Path, default=DATA, help="output folder (default benchmarks/data)")
    p.add_argument("--reference-only", action="store_true", help="only the reference file")
    p.add_argument("--one-line", action="store_true", help="also write each file's one-line twin (NAME.oneline.json)")
    p.add_argument("--gzip", action="store_true", help="also write a .json.gz of each file (and of each twin)")
    p.add_argument("--force", action="store_true", help="rebuild files that exist")
    args = p.parse_args(argv)
    jobs: list[tuple[Path, dict[str, Any]]] = [(args.out / REFERENCE_NAME, {"copies": REFERENCE_COPIES})]
    if not args.reference_only:
        sizes = args.sizes if args.sizes is not None else [parse_size(s) for s in DEFAULT_SIZES]
        for size in sizes:
            label = f"{size / 1e9:g}GB" if size >= 10**9 else f"{size / 1e6:g}MB"
            jobs.append((args.out / f"{args.source.name.split('.')[0]}_{label}.json", {"size": size}))
    for path, how in jobs:
        source = REFERENCE_SOURCE if path.name == REFERENCE_NAME else args.source
        if path.exists() and not args.force:
            print(f"exists: {path} ({path.stat().st_size / 1e6:.0f} MB); --force rebuilds it")
        else:
            info = write_replicated(source, path, **how)
            print(
                f"wrote {path} ({info['bytes'] / 1e6:.0f} MB, {info['copies']} copies, "
                f"{info['events']:,} events, {info['kernels']:,} kernels)"
            )
        outputs = [path]
        if args.one_line:
            twin = one_line_name(path)
            outputs.append(twin)
            if not twin.exists() or args.force:
                print(f"wrote {twin} ({write_one_line(path, twin) / 1e6:.0f} MB, the same document on one line)")
        for plain in outputs if args.gzip else []:
            gz = plain.with_name(plain.name + ".gz")
            if not gz.exists() or args.force:
                with open(plain, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
                    while chunk := src.read(1 << 24):
                        dst.write(chunk)
                print(f"wrote {gz} ({gz.stat().st_size / 1e6:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
