"""The readers that benchmarks/run.py times, one per process: `python readers.py READER TRACE`.

Each reads one trace and prints one JSON line (kernel count, plus a checksum where it computes
warps per SM) so that run.py can check that the readers agree.

- warpwatch-report: `warpwatch analyze --format json` without the CLI module (analyze_command.py only).
- warpwatch-api: what `warpwatch analyze --format json` does, through `read_trace` and `analyze`
  (the file is read in pieces, by one process per core, never whole).
- warpwatch-1proc: the same forced to one process (`read_trace(workers=1)`), as the agent reads;
  it also reports the time of read + analyze inside the process (what one capture window costs
  the agent, interpreter start and imports excluded).
- msgspec-loop: the plain-Python floor: msgspec decodes every event into a typed struct that
  names only ph/cat/name/args (grid, block, device), then a loop sums warps per SM per kernel
  (B * ceil(T / warpSize) / numSms) -- no window, no occupancy, no artefacts.
- orjson-loop: orjson.loads into dicts, then the same loop (runs in benchmarks/.venv-hta).
- hta: HolisticTraceAnalysis's trace parser (`parse_trace_dataframe`, its default json
  backend), as HTA's own analyses call it (runs in benchmarks/.venv-hta).
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections import defaultdict
from typing import Any


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        data = fh.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _warps(events: Any, props: dict[int, Any], get: Any) -> tuple[int, float]:
    """Kernel count and the sum over kernels of warps per SM (B * ceil(T / w) / S)."""
    per_kernel: dict[str, float] = defaultdict(float)
    n = 0
    for ev in events:
        if get(ev, "ph") != "X" or get(ev, "cat") not in ("kernel", "Kernel"):
            continue
        n += 1
        args = get(ev, "args") or {}
        grid, block, dev = get(args, "grid"), get(args, "block"), props.get(get(args, "device"))
        if not grid or not block or dev is None:
            continue
        warp = dev["warpSize"]
        per_kernel[get(ev, "name")] += (
            grid[0] * grid[1] * grid[2] * -(-(block[0] * block[1] * block[2]) // warp) / dev["numSms"]
        )
    return n, sum(per_kernel.values())


def warpwatch_api(path: str, workers: int | None = None) -> dict[str, Any]:
    import msgspec

    from warpwatch.analysis.window import analyze
    from warpwatch.commands.analyze import analysis_to_dict
    from warpwatch.trace import read_trace

    start = time.perf_counter()
    trace = read_trace(path, workers=workers)
    analysis = analyze(trace)
    elapsed = time.perf_counter() - start
    out = msgspec.json.encode({"traces": [analysis_to_dict(analysis, trace)]})
    return {"kernels": len(trace.launches), "output_bytes": len(out), "in_process_s": round(elapsed, 3)}


def warpwatch_report(path: str) -> None:
    """`warpwatch analyze --format json` through warpwatch.commands.analyze alone (when the CLI does not start)."""
    import argparse

    from warpwatch.commands import analyze as report

    parser = argparse.ArgumentParser(prog="warpwatch")
    report.register(parser.add_subparsers())
    args = parser.parse_args(["analyze", "--format", "json", path])
    sys.exit(args.func(args))


def msgspec_loop(path: str) -> dict[str, Any]:
    import msgspec

    # gc=False: millions of structs that hold no cycles; the cyclic GC would otherwise rescan them
    args = msgspec.defstruct("Args", [("device", Any, None), ("grid", Any, None), ("block", Any, None)], gc=False)
    event = msgspec.defstruct(
        "Event", [("ph", Any, None), ("cat", Any, None), ("name", Any, None), ("args", args | None, None)], gc=False
    )
    doc_type = msgspec.defstruct("Doc", [("traceEvents", list[event], []), ("deviceProperties", Any, None)])
    doc = msgspec.json.decode(_read(path), type=doc_type)
    props = {p["id"]: p for p in doc.deviceProperties or []}
    n, total = _warps(doc.traceEvents, props, lambda o, k: getattr(o, k, None))
    return {"kernels": n, "warps_per_sm_sum": round(total, 3)}


def orjson_loop(path: str) -> dict[str, Any]:
    import orjson

    doc = orjson.loads(_read(path))
    props = {p["id"]: p for p in doc.get("deviceProperties") or []}
    n, total = _warps(doc.get("traceEvents", []), props, lambda o, k: o.get(k))
    return {"kernels": n, "warps_per_sm_sum": round(total, 3)}


def hta(path: str) -> dict[str, Any]:
    import logging

    logging.disable(logging.WARNING)
    from hta.common.trace_parser import parse_trace_dataframe
    from hta.configs.parser_config import ParserConfig

    _meta, df, symbols = parse_trace_dataframe(path, ParserConfig())
    cats = symbols.get_sym_id_map()
    kernel_ids = [cats[c] for c in ("kernel", "Kernel") if c in cats]
    return {"kernels": int(df["cat"].isin(kernel_ids).sum()), "events": len(df)}


def warpwatch_1proc(path: str) -> dict[str, Any]:
    return warpwatch_api(path, workers=1)


READERS = {
    "warpwatch-report": warpwatch_report,
    "warpwatch-api": warpwatch_api,
    "warpwatch-1proc": warpwatch_1proc,
    "msgspec-loop": msgspec_loop,
    "orjson-loop": orjson_loop,
    "hta": hta,
}

if __name__ == "__main__":
    reader, trace_path = sys.argv[1], sys.argv[2]
    result = READERS[reader](trace_path)
    if result is not None:
        print(json.dumps(result))
