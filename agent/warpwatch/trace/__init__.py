"""Trace: bytes of a Kineto trace file -> a typed `Trace` (device properties, kernel launches, window).

Reading is split from parsing, and both from what is kept:

- `schema`: the msgspec types decoded from a trace, and the scan that keeps from a list of
  events what the Trace needs (kernel launches, the Trace span, the GPU extent, hip calls);
- `skim`: the GPU events of a piece found in its bytes (by category) and decoded alone, the
  CPU-side ones never decoded (with `_gpuscan`, its optional compiled scanner);
- `streams`: a document's decompressed text, a bounded read at a time (plain, gzip, bytes);
- `pieces`: the piece reader: a document cut into bounded pieces, each decoded strictly and
  dropped before the next;
- `structure`: the proof of a cut in a document written on one line (its pieces balance: no
  bracket outside strings closes what they did not open), compiled in `_gpuscan_structure.h`;
- `repair`: Kineto's invalid JSON (bare inf/nan, raw control characters) made valid, only in a
  piece whose decode stopped at it;
- `document`: what the pieces add up to (launches, span, hip calls), under the launch cap;
- `parallel`: the same pieces decoded by several processes (plain files, no other threads);
- `messages`: the wording of errors that both readers give;
- `build`: `read_trace` / `parse_trace`, and the decoded document -> `Trace`;
- `devices`: device properties, from a trace or a `--gpu-properties` file.

Peak memory is the pieces in flight plus the launches kept, never the file: `membudget` sizes
both from the cgroup's memory limit. Any failure is one `TraceError` naming the file, with a
`kind` (`invalid_trace`, `too_large`, `io_error`).
"""

from __future__ import annotations

from ..runtime.membudget import DEFAULT_MAX_BYTES, ReadLimits
from .build import build, parse_trace, read_trace
from .devices import device_properties_from_json, load_gpu_properties
from .schema import GPU_CATEGORIES, KERNEL_CATEGORIES

__all__ = [
    "DEFAULT_MAX_BYTES",
    "GPU_CATEGORIES",
    "KERNEL_CATEGORIES",
    "ReadLimits",
    "build",
    "device_properties_from_json",
    "load_gpu_properties",
    "parse_trace",
    "read_trace",
]
