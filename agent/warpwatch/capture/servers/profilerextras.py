"""What a server's profiler records beyond what warpwatch reads, seen in a trace it wrote.

vLLM's profiler is configured on the server (`--profiler-config`), which the agent cannot read,
and its default records every CPU op with its Python stack: a window then stops in minutes, not
seconds (66 s and +2.4 GiB for 1 s measured on the CPU build). So the first traces a vllm source
hands over are looked at (their first `SCAN_BYTES`, decompressed) for the marks each option leaves
in Kineto's JSON, and a loud warning names the options to turn off.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

SCAN_BYTES = 16 << 20
"""Decompressed bytes looked at per trace (a tenth of a second's reading; only the first windows)."""
MARKS: dict[str, tuple[bytes, ...]] = {
    "torch_profiler_with_stack": (b'"python_function"',),
    "torch_profiler_with_memory": (b'"[memory]"',),
    "torch_profiler_record_shapes": (b'"Input Dims"',),
}
"""Per profiler option, the marks it leaves: Python frames as events of category python_function,
memory instant events named [memory], and the arguments of recorded shapes."""


def recorded_extras(path: Path, limit: int = SCAN_BYTES) -> list[str]:
    """The `MARKS` options whose marks show in the first `limit` bytes of the trace (gzip or
    plain); [] when it cannot be read (the window's reading reports that)."""
    try:
        with path.open("rb") as raw:
            head = raw.read(2)
            raw.seek(0)
            if head == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=raw) as gz:
                    text = gz.read(limit)
            else:
                text = raw.read(limit)
    except (OSError, EOFError, zlib.error):
        return []
    return [option for option, marks in MARKS.items() if any(m in text for m in marks)]
