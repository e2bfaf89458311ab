"""Trace: bytes of a Kineto trace file -> a typed `Trace` (device properties, kernel launches, window).

Reading is split from parsing: `read_trace` loads (and gunzips) a file under a size cap,
`parse_trace` decodes bytes. Decoding uses msgspec typed structs that name only the fields
the analysis needs, so every other key of every event is skipped without being built.

Speed on large traces (see benchmarks/README.md):
- Events are a tagged union on `ph`: only complete events ("X") get a struct with fields;
  every other phase (flows, instants, metadata...) is validated and skipped. `name` and
  `args` stay raw JSON until an event turns out to be a kernel (so only kernels' args must
  be objects: the args of other events are never read).
- A large document is decoded in pieces of about `PART_BYTES`, cut between two events of
  `traceEvents` (at `}`, `,`, `{` with a newline in between: never inside a JSON string).
  Every byte is still decoded strictly, and a piece that does not decode as a list of whole
  events means the cut was wrong: the document is then decoded in one piece, as before. The
  pieces are shared between processes (`os.fork`: the GIL does not allow threads to decode
  in parallel) when the machine has several cores and the caller runs no other thread.
- A plain file is never read whole: each process reads its own pieces (`os.pread`).

Kineto has written invalid JSON (bare `inf`/`-inf`/`nan` tokens, raw control characters
inside strings). The fast path is strict; only when it fails to decode do we sanitise the
bytes (`_sanitize`) and decode again. Any failure becomes one `TraceError` naming the file.
"""

from __future__ import annotations

import gc
import gzip
import math
import os
import re
import select
import signal
import struct
import tempfile
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Protocol, Union

import msgspec

from .errors import TraceError
from .model import DeviceProperties, KernelLaunch, Trace, TraceWindow

DEFAULT_MAX_BYTES = 2 * 1024**3
"""Default cap on a trace's decompressed size (2 GiB); configurable everywhere it is used."""

KERNEL_CATEGORIES = frozenset({"kernel", "Kernel"})
GPU_CATEGORIES = frozenset({"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})

PART_BYTES = 8 * 1024**2
"""Size of one piece of a large document (decoded, then dropped before the next)."""
PARTS_MIN_BYTES = 4 * PART_BYTES
"""Documents at least this large are decoded in pieces; smaller ones in one go."""
PARALLEL_MIN_BYTES = 32 * 1024**2
"""Documents at least this large are decoded by several processes when `workers` allows."""
MAX_WORKERS = 8

_SPLIT_MARK = "__warpwatch_split__"
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Dims = tuple[_NonNegative, _NonNegative, _NonNegative]
_RAW_NULL = msgspec.Raw(b"null")


# --- What is decoded. Two sets of types: strict ones that make the common case fast, and
# permissive ones (every field Any) used when the strict ones reject a piece of the document.


class _Args(msgspec.Struct, gc=False):
    """The kernel args we read; the raw JSON names are mapped here, once. Permissive."""

    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers_per_thread: Any = msgspec.field(default=None, name="registers per thread")
    shared_memory: Any = msgspec.field(default=None, name="shared memory")
    warps_per_sm: Any = msgspec.field(default=None, name="warps per SM")
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    occupancy_pct: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    correlation: Any = None


class _KernelArgs(msgspec.Struct, gc=False):
    """The same args with the types every Kineto version writes; anything else -> `_Args`."""

    device: int | None = None
    stream: int | str | None = None
    grid: _Dims | None = None
    block: _Dims | None = None
    registers_per_thread: _NonNegative | None = msgspec.field(default=None, name="registers per thread")
    shared_memory: _NonNegative | None = msgspec.field(default=None, name="shared memory")
    warps_per_sm: float | str | None = msgspec.field(default=None, name="warps per SM")
    blocks_per_sm: float | str | None = msgspec.field(default=None, name="blocks per SM")
    occupancy_pct: float | str | None = msgspec.field(default=None, name="est. achieved occupancy %")
    correlation: int | None = None


class _RuntimeArgs(msgspec.Struct, gc=False):
    """What a HIP runtime event says about the launch it made (spec "AMD traces"). Permissive."""

    correlation: Any = None
    grid: Any = None
    block: Any = None


class _Event(msgspec.Struct, gc=False):
    """Any event, permissive."""

    ph: Any = None
    cat: Any = None
    name: msgspec.Raw = _RAW_NULL
    pid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = _RAW_NULL


class _Complete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event ("ph": "X"): kernels, memcpy, memset, the Trace span, CPU ops..."""

    cat: str | None = None
    name: msgspec.Raw = _RAW_NULL
    pid: Any = None
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = _RAW_NULL


def _skipped_phase(ph: str) -> type[msgspec.Struct]:
    """An event of another phase: validated, its fields skipped, never a GPU activity."""
    ns = {"__annotations__": {"cat": ClassVar[None]}, "cat": None}
    return msgspec.defstruct(f"_Phase_{ord(ph)}", [], namespace=ns, tag_field="ph", tag=ph, gc=False)


# Every phase of the Trace Event Format besides "X"; an event with another (or no) "ph" makes
# the strict decoder fail and the permissive one take over.
_OTHER_PHASES = tuple(_skipped_phase(ph) for ph in "BEiICbnestfPONDMVvRc()")
_FastEvent: Any = Union.__getitem__((_Complete, *_OTHER_PHASES))


class _TraceFile(msgspec.Struct):
    traceEvents: list[_Event] = msgspec.field(default_factory=list)
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    schemaVersion: Any = None


class _FastTraceFile(msgspec.Struct):
    traceEvents: list[_FastEvent] = msgspec.field(default_factory=list)
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    schemaVersion: Any = None


class _Scanned(msgspec.Struct, array_like=True, gc=False):
    """What one piece of `traceEvents` contributes to the Trace."""

    launches: list[KernelLaunch]
    spans: list[tuple[Any, Any]]
    """ts and dur of every Trace event, in order (the first valid one is the span)."""
    gpu_lo: float
    gpu_hi: float
    correlations: list[int] = msgspec.field(default_factory=list)
    """The `correlation` arg of each launch (-1 when absent), in order."""
    hip_calls: list[tuple[int, str, Any, Any]] = msgspec.field(default_factory=list)
    """(correlation, name, grid, block) of every runtime event whose name starts with `hip`."""


_TOP: msgspec.json.Decoder[_TraceFile | list[_Event]] = msgspec.json.Decoder(_TraceFile | list[_Event])
_TOP_FAST: msgspec.json.Decoder[Any] = msgspec.json.Decoder(_FastTraceFile | list[_FastEvent])
_PART: msgspec.json.Decoder[list[_Event]] = msgspec.json.Decoder(list[_Event])
_PART_FAST: msgspec.json.Decoder[Any] = msgspec.json.Decoder(list[_FastEvent])
_VALUES: msgspec.json.Decoder[list[Any]] = msgspec.json.Decoder(list[Any])
_KERNEL_ARGS: msgspec.json.Decoder[list[_KernelArgs | None]] = msgspec.json.Decoder(list[_KernelArgs | None])
_ONE_ARGS: msgspec.json.Decoder[_Args | None] = msgspec.json.Decoder(_Args | None)
_SEND = msgspec.msgpack.Encoder()
_RECEIVE: msgspec.msgpack.Decoder[_Scanned] = msgspec.msgpack.Decoder(_Scanned)
_EMPTY_ARGS = _KernelArgs()
_EMPTY_PERMISSIVE_ARGS = _Args()
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime"})
"""Runtime events: a `hip...` one names the call that launched the kernel with its `correlation`."""
_INTERESTING = GPU_CATEGORIES | RUNTIME_CATEGORIES | {"Trace"}
_RUNTIME_ARGS: msgspec.json.Decoder[_RuntimeArgs | None] = msgspec.json.Decoder(_RuntimeArgs | None)


class _Irregular(Exception):
    """A piece did not decode as whole events, or holds a bad event: decode the document in one go."""


class _BadEvent(Exception):
    """An event the Trace cannot be built from; `_describe_bad_event` finds its index for the message."""

    def __init__(self, event: Any, problem: str, detail: str = "") -> None:
        super().__init__(problem)
        self.event = event
        self.problem = problem
        self.detail = detail


# --- Public API


def read_trace(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    gpu_properties: Mapping[int, DeviceProperties] | None = None,
    workers: int | None = None,
) -> Trace:
    """Read one trace file (`.json` or gzip-compressed) and parse it.

    `max_bytes` caps the decompressed size (default `DEFAULT_MAX_BYTES`); a larger file
    fails with a TraceError instead of exhausting memory. `gpu_properties` supply device
    properties for traces that carry none (the trace's own take precedence). `workers` caps
    the processes that decode a large trace (default: one per core, see `parse_trace`).
    """
    name = os.fspath(path)
    cap = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    source = _FileSource.open_plain(name, cap)
    if source is not None:
        with source:
            doc = _parse_in_parts(source, _workers(workers, source.size))
        if doc is not None:
            return _build(doc, name, gpu_properties)
    # Small, gzipped, or not decodable in pieces (then not worth a second try in pieces).
    data = load_bytes(name, max_bytes=cap)
    return _parse(data, name, gpu_properties, workers, pieces=source is None)


def load_bytes(path: str, *, max_bytes: int) -> bytes:
    """The file's bytes, gunzipped when it starts with the gzip magic, at most `max_bytes`."""
    try:
        with open(path, "rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            if magic == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=raw) as gz:
                    data = gz.read(max_bytes + 1)
            else:
                data = raw.read(max_bytes + 1)
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory, not a trace file") from None
    except PermissionError:
        raise TraceError(path, "permission denied") from None
    except EOFError:
        raise TraceError(path, "truncated gzip stream (the file ends before the compressed data does)") from None
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise TraceError(path, f"corrupt gzip data ({exc})") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise TraceError(path, _too_large(max_bytes))
    if not data or data.isspace():  # (not data.strip(): that copies the whole file)
        raise TraceError(path, "empty file")
    return data


def parse_trace(
    data: bytes,
    path: str = "<bytes>",
    *,
    gpu_properties: Mapping[int, DeviceProperties] | None = None,
    workers: int | None = None,
) -> Trace:
    """Decode a trace document (object with `traceEvents`, or a bare event list).

    A large document is decoded by up to `workers` processes (default: one per core, at most
    `MAX_WORKERS`; only when the calling process runs no other thread, since it forks).
    """
    return _parse(data, path, gpu_properties, workers, pieces=True)


def _parse(
    data: bytes,
    path: str,
    gpu_properties: Mapping[int, DeviceProperties] | None,
    workers: int | None,
    *,
    pieces: bool,
) -> Trace:
    try:
        try:
            doc = _decode(data, path, workers) if pieces else _parse_whole(data, path)
        except msgspec.DecodeError as exc:
            fixed = _sanitize(data)
            if fixed == data:
                raise TraceError(path, _describe_decode_error(data, exc)) from None
            try:
                doc = _decode(fixed, path, workers)
            except msgspec.DecodeError:
                raise TraceError(path, _describe_decode_error(data, exc)) from None
    except RecursionError:  # msgspec decodes nested arrays and objects recursively
        raise TraceError(path, "invalid JSON (arrays or objects nested too deeply)") from None
    return _build(doc, path, gpu_properties)


# --- Decoding


@dataclass
class _Document:
    """A decoded trace before device properties are resolved."""

    header: _TraceFile | _FastTraceFile
    has_events: bool
    launches: list[KernelLaunch]
    span: TraceWindow | None
    gpu_lo: float
    gpu_hi: float
    correlations: list[int]
    hip_calls: list[tuple[int, str, Any, Any]]


def _decode(data: bytes, path: str, workers: int | None) -> _Document:
    """Strict decode of the whole document; raises msgspec.DecodeError for invalid JSON."""
    if len(data) >= PARTS_MIN_BYTES:
        doc = _parse_in_parts(_BytesSource(data), _workers(workers, len(data)))
        if doc is not None:
            return doc
    return _parse_whole(data, path)


def _parse_whole(data: bytes, path: str) -> _Document:
    """Decode the document in one go; every error names its event by index."""
    with gc_paused():
        try:
            try:
                top = _TOP_FAST.decode(data)
                fast = True
            except msgspec.ValidationError:
                top = _TOP.decode(data)
                fast = False
        except msgspec.ValidationError as exc:
            raise TraceError(path, f"unexpected structure: {exc}") from None
        if isinstance(top, list):
            events: list[Any] = top
            header: _TraceFile | _FastTraceFile = _TraceFile()
        else:
            header, events = top, top.traceEvents
        try:
            scanned = _scan(events, fast)
            span = _first_span(scanned.spans)
        except _BadEvent as bad:
            raise TraceError(path, _describe_bad_event(bad, events)) from None
    return _Document(
        header, bool(events), scanned.launches, span, scanned.gpu_lo, scanned.gpu_hi,
        scanned.correlations, scanned.hip_calls,
    )


def _scan(events: list[Any], fast: bool) -> _Scanned:
    """The Trace's share of a list of events: launches, Trace spans, GPU extent.

    `fast`: the events are `_FastEvent`s (checked types); else permissive `_Event`s.
    Raises _BadEvent for a GPU event without valid times or with args that are no object.
    """
    if not fast:
        events = [ev for ev in events if ev.ph == "X" and isinstance(ev.cat, str)]
    isfinite = math.isfinite
    spans: list[tuple[Any, Any]] = []
    kernels: list[tuple[Any, float, float]] = []
    hip_calls: list[tuple[int, str, Any, Any]] = []
    lo = math.inf
    hi = -math.inf
    for ev in events:
        cat = ev.cat
        if cat not in _INTERESTING:
            continue
        ts = ev.ts
        dur = ev.dur
        if cat == "Trace":
            spans.append((ts, dur))
            continue
        if cat in RUNTIME_CATEGORIES:
            if bytes(memoryview(ev.name)[:4]) == b'"hip':
                _hip_call(ev, hip_calls)
            continue
        if ts.__class__ is not float or dur.__class__ is not float:
            ts = _finite_number(ts)
            dur = _finite_number(dur)
            if ts is None or dur is None:
                raise _BadEvent(ev, "times")
        if not (dur >= 0 and isfinite(ts) and isfinite(dur)):
            raise _BadEvent(ev, "times")
        if ts < lo:
            lo = ts
        if ts + dur > hi:
            hi = ts + dur
        if cat in KERNEL_CATEGORIES:
            kernels.append((ev, ts, dur))
    launches, correlations = _launches(kernels)
    return _Scanned(launches, spans, lo, hi, correlations, hip_calls)


def _hip_call(ev: Any, out: list[tuple[int, str, Any, Any]]) -> None:
    """Keep a HIP runtime event's correlation, name and launch configuration (never fails: a
    runtime event that cannot be read is no launch of ours)."""
    try:
        name = msgspec.json.decode(ev.name)
        args = _RUNTIME_ARGS.decode(ev.args)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return
    if args is None or not isinstance(name, str) or not _is_int(args.correlation):
        return
    out.append((args.correlation, name[:64], _dims(args.grid), _dims(args.block)))


def _launches(kernels: list[tuple[Any, float, float]]) -> tuple[list[KernelLaunch], list[int]]:
    """Kernel events -> launches and their correlation ids. Names and args are decoded here, for
    kernels only, in one go."""
    if not kernels:
        return [], []
    names = _VALUES.decode(b"[" + b",".join([k[0].name for k in kernels]) + b"]")
    try:
        args = _KERNEL_ARGS.decode(b"[" + b",".join([k[0].args for k in kernels]) + b"]")
    except msgspec.ValidationError:
        pairs = [_launch_permissive(ev, name, ts, dur) for (ev, ts, dur), name in zip(kernels, names, strict=True)]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    out = []
    correlations = []
    for (ev, ts, dur), name, a in zip(kernels, names, args, strict=True):
        if a is None:
            a = _EMPTY_ARGS
        device = a.device
        if device is None:
            device = ev.pid if ev.pid.__class__ is int else -1
        warps, blocks, occupancy = a.warps_per_sm, a.blocks_per_sm, a.occupancy_pct
        if warps.__class__ is str or blocks.__class__ is str or occupancy.__class__ is str:
            warps, blocks, occupancy = _reported(warps), _reported(blocks), _reported(occupancy)
        correlations.append(-1 if a.correlation is None else a.correlation)
        out.append(
            KernelLaunch(
                name if name.__class__ is str else str(name),
                device,
                ts,
                dur,
                a.stream,
                a.grid,
                a.block,
                a.registers_per_thread,
                a.shared_memory,
                warps,
                blocks,
                occupancy,
            )
        )
    return out, correlations


def _launch_permissive(ev: Any, name: Any, ts: float, dur: float) -> tuple[KernelLaunch, int]:
    try:
        args = _ONE_ARGS.decode(ev.args) or _EMPTY_PERMISSIVE_ARGS
    except msgspec.ValidationError as exc:
        raise _BadEvent(ev, "args", str(exc)) from None
    device = args.device if _is_int(args.device) else ev.pid if _is_int(ev.pid) else -1
    stream = args.stream if _is_int(args.stream) or isinstance(args.stream, str) else None
    regs = args.registers_per_thread
    smem = args.shared_memory
    correlation = args.correlation if _is_int(args.correlation) else -1
    return KernelLaunch(
        name=name if isinstance(name, str) else str(name),
        device=device,
        ts=ts,
        dur=dur,
        stream=stream,
        grid=_dims(args.grid),
        block=_dims(args.block),
        registers_per_thread=regs if _is_int(regs) and regs >= 0 else None,
        shared_memory=smem if _is_int(smem) and smem >= 0 else None,
        reported_warps_per_sm=_reported(args.warps_per_sm),
        reported_blocks_per_sm=_reported(args.blocks_per_sm),
        reported_occupancy_pct=_reported(args.occupancy_pct),
    ), correlation


def _first_span(spans: Iterable[tuple[Any, Any]]) -> TraceWindow | None:
    """The first Trace event with a positive duration (an invalid one before it is an error)."""
    for k, (ts, dur) in enumerate(spans):
        t = _finite_number(ts)
        d = _finite_number(dur)
        if t is None or d is None or d < 0:
            raise _BadEvent(k, "span")
        if d > 0:
            return TraceWindow(t, t + d, "trace_span")
    return None


def _describe_bad_event(bad: _BadEvent, events: list[Any]) -> str:
    """The TraceError message for a bad event, which is found again in `events` for its index."""
    if bad.problem == "span":  # bad.event is the rank of the span among Trace events
        spans = (i for i, ev in enumerate(events) if ev.cat == "Trace" and getattr(ev, "ph", "X") == "X")
        index = next(i for k, i in enumerate(spans) if k == bad.event)
    else:
        index = next(i for i, ev in enumerate(events) if ev is bad.event)
    ev = events[index]
    if bad.problem == "args":
        return f"unexpected structure: {bad.detail} - at `$.traceEvents[{index}].args`"
    try:
        name = msgspec.json.decode(ev.name)
    except msgspec.DecodeError:
        name = ev.name
    return (
        f"traceEvents[{index}] ({ev.cat!s:.20} {name!s:.60}): ts/dur must be finite numbers, "
        f"dur >= 0 (got ts={ev.ts!r:.30}, dur={ev.dur!r:.30})"
    )


# --- Large documents: pieces, processes


class _Source(Protocol):
    size: int

    def window(self, lo: int, hi: int) -> bytes | memoryview: ...

    def fill(self, buf: bytearray, at: int, lo: int, hi: int) -> None: ...


class _BytesSource:
    def __init__(self, data: bytes) -> None:
        self.view = memoryview(data)
        self.size = len(data)

    def window(self, lo: int, hi: int) -> memoryview:
        return self.view[lo:hi]

    def fill(self, buf: bytearray, at: int, lo: int, hi: int) -> None:
        buf[at : at + hi - lo] = self.view[lo:hi]


class _FileSource:
    """A plain (not gzipped) trace file read piecewise, each process reading its own pieces."""

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size

    @classmethod
    def open_plain(cls, path: str, max_bytes: int) -> _FileSource | None:
        """The file, when it is large enough to be decoded in pieces and not gzipped."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None  # load_bytes reports it
        try:
            size = os.fstat(fd).st_size
            if size > max_bytes and os.pread(fd, 2, 0) != b"\x1f\x8b":
                raise TraceError(path, _too_large(max_bytes))
            if size >= PARTS_MIN_BYTES and os.pread(fd, 2, 0) != b"\x1f\x8b":
                return cls(fd, size)
        except OSError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        return None

    def __enter__(self) -> _FileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def window(self, lo: int, hi: int) -> bytes:
        return os.pread(self.fd, hi - lo, lo)

    def fill(self, buf: bytearray, at: int, lo: int, hi: int) -> None:
        view = memoryview(buf)
        while lo < hi:
            n = os.preadv(self.fd, [view[at : at + hi - lo]], lo)
            if n <= 0:
                raise _Irregular("file shrank while being read")
            at += n
            lo += n


# `}` , `{` between two events; only a cut with a newline in it is taken (a JSON string holds no
# raw newline, so such a cut is never inside a string).
_BETWEEN_EVENTS = re.compile(rb"\}\s*,\s*\{")
_SEARCH_BYTES = 1024**2


def _cuts(source: _Source) -> list[tuple[int, int]] | None:
    """Byte ranges (start, end) that tile the document: the head (up to the first cut between
    two events), pieces of about PART_BYTES, and the tail (the last 64 KiB or so)."""
    size = source.size
    edge = 64 * 1024
    key = re.search(rb'"traceEvents"', source.window(0, min(size, 4 * 1024**2)))
    first = (key.start() if key else 0) + edge
    targets = [first, *range(first + PART_BYTES, size - edge - PART_BYTES // 4, PART_BYTES), size - edge]
    bounds = [0]
    for target in targets:
        if target <= bounds[-1]:
            continue
        cut = _find_cut(source, target)
        if cut is not None and cut[1] < size:
            bounds.extend(cut)
    bounds.append(size)
    if len(bounds) < 6:  # fewer than two cuts: not worth it, or not a Kineto layout
        return None
    return list(zip(bounds[::2], bounds[1::2], strict=True))


def _find_cut(source: _Source, target: int) -> tuple[int, int] | None:
    window = source.window(target, min(source.size, target + _SEARCH_BYTES))
    for m in _BETWEEN_EVENTS.finditer(window):
        if b"\n" in m.group():
            return target + m.start() + 1, target + m.end() - 1
    return None


def _parse_in_parts(source: _Source, workers: int) -> _Document | None:
    """Decode the head, the pieces and the tail; None when the document cannot be cut this way."""
    ranges = _cuts(source)
    if ranges is None:
        return None
    (head_lo, head_hi), *middle, (tail_lo, tail_hi) = ranges
    with gc_paused():
        try:
            head, head_events = _decode_edge(source, head_lo, head_hi, at_start=True)
            tail, tail_events = _decode_edge(source, tail_lo, tail_hi, at_start=False)
            scanned = _scan_parallel(source, middle, workers)
            if scanned is None:
                return None
            first = _scan(head_events, fast=False)
            last = _scan(tail_events, fast=False)
            pieces = [first, *scanned, last]
            span = _first_span(s for p in pieces for s in p.spans)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, _Irregular, _BadEvent):
            return None
    if isinstance(head, _TraceFile) and isinstance(tail, _TraceFile):
        for field in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion"):
            if getattr(tail, field) is not None:
                setattr(head, field, getattr(tail, field))
    launches = [launch for p in pieces for launch in p.launches]
    header = head if isinstance(head, _TraceFile) else _TraceFile()
    return _Document(
        header, True, launches, span, min(p.gpu_lo for p in pieces), max(p.gpu_hi for p in pieces),
        [c for p in pieces for c in p.correlations], [h for p in pieces for h in p.hip_calls],
    )


def _decode_edge(source: _Source, lo: int, hi: int, *, at_start: bool) -> tuple[Any, list[_Event]]:
    """The head (document start up to the first cut) or the tail (last cut to the end).

    A marker event closes the head's `traceEvents` (or opens the tail's): finding it where it
    was put proves the cut is between two events of `traceEvents`, not in another array.
    """
    text = source.window(lo, hi)
    is_list = bytes(source.window(0, 64)).lstrip()[:1] == b"["
    mark = b'{"ph":"X","cat":"' + _SPLIT_MARK.encode() + b'"}'
    if at_start:
        top = _TOP.decode(b"".join([text, b",", mark, b"]" if is_list else b"]}"]))
    else:
        top = _TOP.decode(b"".join([b"[" if is_list else b'{"traceEvents":[', mark, b",", text]))
    events = top if isinstance(top, list) else top.traceEvents
    if not events or (events[-1] if at_start else events[0]).cat != _SPLIT_MARK:
        raise _Irregular("the cut is not between two trace events")
    return top, (events[:-1] if at_start else events[1:])


def _scan_range(source: _Source, lo: int, hi: int, buf: bytearray) -> _Scanned:
    """Decode one piece (a run of whole events) and keep what the Trace needs from it."""
    n = hi - lo
    if len(buf) < n + 2:
        buf.extend(bytes(n + 2 - len(buf)))
    buf[0] = ord("[")
    source.fill(buf, 1, lo, hi)
    buf[n + 1] = ord("]")
    text = memoryview(buf)[: n + 2]
    try:
        return _scan(_PART_FAST.decode(text), fast=True)
    except msgspec.ValidationError:
        return _scan(_PART.decode(text), fast=False)


def _scan_parallel(source: _Source, ranges: Sequence[tuple[int, int]], workers: int) -> list[_Scanned] | None:
    """Scan the pieces in `workers` processes; results in document order, None on any failure.

    The piece numbers wait in a pipe that every process reads from, so each takes the next
    piece when it is free: the parent, which also rebuilds the other processes' launches,
    simply scans fewer. Children send each piece's result as soon as it is ready.
    """
    if workers <= 1 or len(ranges) < 2 or len(ranges) * _PIECE.size > 32 * 1024:  # (the pipe holds 64 KiB)
        buf = bytearray()
        return [_scan_range(source, lo, hi, buf) for lo, hi in ranges]
    results: list[_Scanned | None] = [None] * len(ranges)
    todo_r, todo_w = os.pipe()
    os.write(todo_w, b"".join(_PIECE.pack(i) for i in range(len(ranges))))
    os.close(todo_w)
    children: list[_Child] = []
    try:
        for _ in range(min(workers, len(ranges)) - 1):
            children.append(_fork_scanner(source, ranges, todo_r))
        buf = bytearray()
        while (i := _next_piece(todo_r)) is not None:
            results[i] = _scan_range(source, *ranges[i], buf)
            for child in children:
                child.receive(results, wait=False)
        del buf
        for child in children:
            child.receive(results, wait=True)
    finally:
        os.close(todo_r)
        for child in children:
            child.close()
    complete = [r for r in results if r is not None]
    return complete if len(complete) == len(results) else None


_PIECE = struct.Struct("<I")
_NOTE = struct.Struct("<IQQ")  # piece number, offset and size of its result in the child's scratch file


def _next_piece(todo: int) -> int | None:
    data = os.read(todo, _PIECE.size)  # pipe reads this small are atomic: no piece is taken twice
    return _PIECE.unpack(data)[0] if data else None


class _Child:
    """A scanning child process. Each result goes to a scratch file (writing never waits for
    the parent), and a 20-byte note on a pipe says where it is."""

    def __init__(self, pid: int, notes: int, store: int) -> None:
        self.pid = pid
        self.notes = notes
        self.store = store
        self.pending = b""
        self.done = False

    def receive(self, results: list[_Scanned | None], *, wait: bool) -> None:
        """Decode the pieces finished so far, or (`wait`) every piece until the child is done."""
        while not self.done and (wait or select.select([self.notes], [], [], 0)[0]):
            data = os.read(self.notes, 64 * 1024)
            if not data:
                self.done = True
                return
            data = self.pending + data
            whole = len(data) - len(data) % _NOTE.size
            for piece, offset, size in _NOTE.iter_unpack(data[:whole]):
                results[piece] = _RECEIVE.decode(os.pread(self.store, size, offset))
            self.pending = data[whole:]

    def close(self) -> None:
        with suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)  # a child still running here is no longer needed
        os.waitpid(self.pid, 0)
        os.close(self.notes)
        os.close(self.store)


def _fork_scanner(source: _Source, ranges: Sequence[tuple[int, int]], todo: int) -> _Child:
    """A child process that scans the pieces it takes from `todo` and stores each result."""
    notes_r, notes_w = os.pipe()
    store = _scratch_file()
    pid = os.fork()
    if pid == 0:  # the child: never returns; sends nothing more after a failure
        code = 1
        try:
            os.close(notes_r)
            buf = bytearray()
            offset = 0
            while (i := _next_piece(todo)) is not None:
                payload = _SEND.encode(_scan_range(source, *ranges[i], buf))
                _write_all(store, payload)
                os.write(notes_w, _NOTE.pack(i, offset, len(payload)))  # atomic: shorter than PIPE_BUF
                offset += len(payload)
            code = 0
        finally:
            os._exit(code)
    os.close(notes_w)
    return _Child(pid, notes_r, store)


def _scratch_file() -> int:
    """An anonymous file (in memory where the OS allows) for a child's results."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("warpwatch-trace", getattr(os, "MFD_CLOEXEC", 0))
    with tempfile.TemporaryFile() as tmp:
        return os.dup(tmp.fileno())


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _workers(requested: int | None, size: int) -> int:
    """How many processes decode a document of `size` bytes."""
    if requested is not None:
        n = requested
    else:
        try:
            n = len(os.sched_getaffinity(0))
        except AttributeError:  # not Linux
            n = os.cpu_count() or 1
        n = min(n, MAX_WORKERS)
    if n <= 1 or size < PARALLEL_MIN_BYTES or not hasattr(os, "fork"):
        return 1
    # Forking a process that runs other threads can deadlock the child (locks held by them).
    if threading.active_count() > 1 or threading.current_thread() is not threading.main_thread():
        return 1
    return n


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while millions of acyclic objects are being built (the
    collector would walk every one of them; none of them forms a cycle)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# --- From decoded parts to a Trace


def _build(doc: _Document, path: str, gpu_properties: Mapping[int, DeviceProperties] | None) -> Trace:
    header = doc.header
    if not doc.has_events and header.deviceProperties is None and header.schemaVersion is None:
        raise TraceError(path, "not a Kineto trace (no traceEvents, deviceProperties or schemaVersion)")
    warnings: list[str] = []
    devices = _device_properties(header.deviceProperties, path, warnings)
    for dev_id, props in (gpu_properties or {}).items():
        devices.setdefault(dev_id, props)
    rank, world = _distributed(header.distributedInfo)
    base = header.baseTimeNanoseconds
    return Trace(
        path=path,
        devices=devices,
        launches=tuple(_with_launch_api(doc)),
        span=doc.span,
        gpu_extent=(doc.gpu_lo, doc.gpu_hi) if doc.gpu_lo <= doc.gpu_hi else None,
        rank=rank,
        world_size=world,
        schema_version=header.schemaVersion if _is_int(header.schemaVersion) else None,
        base_time_ns=base if _is_int(base) else None,
        warnings=tuple(warnings),
    )


def _with_launch_api(doc: _Document) -> list[KernelLaunch]:
    """Each launch with the HIP call that made it (`launch_api`), found by `correlation`, and the
    call's grid and block where the kernel event has none (ROCm 6 writes them on the call only)."""
    if not doc.hip_calls:
        return doc.launches
    # (Tuples again: results sent back by the decoding processes arrive with lists.)
    calls = {corr: (name, _dims(list(grid)) if grid else None, _dims(list(block)) if block else None)
             for corr, name, grid, block in doc.hip_calls}
    out = []
    for launch, corr in zip(doc.launches, doc.correlations, strict=True):
        call = calls.get(corr)
        if call is not None:
            name, grid, block = call
            launch = msgspec.structs.replace(
                launch,
                launch_api=name,
                grid=launch.grid if launch.grid is not None else grid,
                block=launch.block if launch.block is not None else block,
            )
        out.append(launch)
    return out


def _too_large(max_bytes: int) -> str:
    return f"larger than the {max_bytes:,}-byte limit once decompressed (raise max_trace_bytes to read it)"


def _describe_decode_error(data: bytes, exc: Exception) -> str:
    text = str(exc)
    if "truncated" in text.lower():
        return f"truncated JSON (the document ends early: {text})"
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        return f"not JSON (starts with {data.lstrip()[:16]!r})"
    return f"invalid JSON ({text})"


# A JSON string, or a bare non-finite token outside strings. Strings are matched first so
# that `"inf"` inside a string is left alone.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|-?(?:Infinity|inf|NaN|nan)\b', re.DOTALL)
_CONTROL = re.compile(rb"[\x00-\x1f]")


def _sanitize(data: bytes) -> bytes:
    """Make Kineto's known invalid JSON valid: quote bare inf/nan, escape raw control characters."""

    def fix(m: re.Match[bytes]) -> bytes:
        tok = m.group(0)
        if tok[:1] == b'"':
            return _CONTROL.sub(lambda c: b"\\u%04x" % c.group(0)[0], tok)
        low = tok.lower()
        if b"nan" in low:
            return b'"nan"'
        return b'"-inf"' if tok.startswith(b"-") else b'"inf"'

    return _TOKENS.sub(fix, data)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite_number(v: object) -> float | None:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return float(v)
    return None


def _dims(v: object) -> tuple[int, int, int] | None:
    if isinstance(v, list) and len(v) == 3 and all(_is_int(x) and x >= 0 for x in v):
        return (v[0], v[1], v[2])
    return None


def _reported(v: object) -> float | str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return v[:32]
    return None


def _distributed(info: object) -> tuple[int | None, int | None]:
    if not isinstance(info, dict):
        return None, None
    rank = info.get("rank")
    world = info.get("world_size")
    return (rank if _is_int(rank) else None, world if _is_int(world) else None)


_PROP_FIELDS: dict[str, str] = {
    "computeMajor": "compute_major",
    "computeMinor": "compute_minor",
    "numSms": "num_sms",
    "warpSize": "warp_size",
    "maxThreadsPerBlock": "max_threads_per_block",
    "maxThreadsPerMultiprocessor": "max_threads_per_sm",
    "regsPerBlock": "regs_per_block",
    "regsPerMultiprocessor": "regs_per_sm",
    "sharedMemPerBlock": "shared_mem_per_block",
    "sharedMemPerMultiprocessor": "shared_mem_per_sm",
    "maxSharedMemoryPerMultiProcessor": "shared_mem_per_sm",
    "sharedMemPerBlockOptin": "shared_mem_per_block_optin",
}
_REQUIRED = ("compute_major", "compute_minor", "num_sms", "warp_size", "max_threads_per_block", "max_threads_per_sm")


def device_properties_from_json(entry: object) -> DeviceProperties:
    """One `deviceProperties` entry -> DeviceProperties; ValueError says what is missing or wrong."""
    if not isinstance(entry, dict):
        raise ValueError(f"expected an object, got {type(entry).__name__}")
    dev_id = entry.get("id")
    if not _is_int(dev_id):
        raise ValueError("missing integer 'id'")
    values: dict[str, Any] = {}
    for key, field_name in _PROP_FIELDS.items():
        v = entry.get(key)
        if v is None:
            continue
        if not _is_int(v):
            raise ValueError(f"device {dev_id}: {key} must be an integer, got {v!r:.30}")
        values[field_name] = v
    missing = [f for f in _REQUIRED if f not in values]
    if missing:
        raise ValueError(f"device {dev_id}: missing {', '.join(missing)}")
    if values["warp_size"] <= 0 or values["max_threads_per_sm"] <= 0:
        raise ValueError(f"device {dev_id}: warpSize and maxThreadsPerMultiprocessor must be positive")
    name = entry.get("name")
    name = name[:128] if isinstance(name, str) else f"device {dev_id}"
    amd = values["warp_size"] == 64 or "AMD" in name or "Radeon" in name or "Instinct" in name
    arch, uuid = entry.get("gcnArchName"), entry.get("uuid")
    assert isinstance(dev_id, int)
    return DeviceProperties(
        id=dev_id, name=name, vendor="amd" if amd else "nvidia", **values,
        arch=arch[:64] if isinstance(arch, str) and arch else None,
        uuid=uuid[:64] if isinstance(uuid, str) and uuid else None,
    )


def _device_properties(raw: object, path: str, warnings: list[str]) -> dict[int, DeviceProperties]:
    out: dict[int, DeviceProperties] = {}
    if raw is None:
        return out
    entries: Iterable[object] = raw if isinstance(raw, list) else [raw]
    for entry in entries:
        try:
            props = device_properties_from_json(entry)
        except ValueError as exc:
            warnings.append(f"deviceProperties entry ignored: {exc}")
            continue
        out[props.id] = props
    return out


def load_gpu_properties(path: str | os.PathLike[str]) -> dict[int, DeviceProperties]:
    """`--gpu-properties FILE`: a JSON object (one device, or {id: props}) or a list, as in traces."""
    name = os.fspath(path)
    try:
        doc = msgspec.json.decode(Path(name).read_bytes())
    except OSError as exc:
        raise TraceError(name, f"cannot read GPU properties: {exc.strerror or exc}") from None
    except msgspec.DecodeError as exc:
        raise TraceError(name, f"GPU properties are not valid JSON: {exc}") from None
    if isinstance(doc, dict) and "id" not in doc:
        entries: list[object] = []
        for key, value in doc.items():
            if isinstance(value, dict):
                value = {"id": int(key) if str(key).isdigit() else key, **value}
            entries.append(value)
    elif isinstance(doc, list):
        entries = doc
    else:
        entries = [doc]
    out: dict[int, DeviceProperties] = {}
    for entry in entries:
        try:
            props = device_properties_from_json(entry)
        except ValueError as exc:
            raise TraceError(name, f"invalid GPU properties: {exc}") from None
        out[props.id] = props
    if not out:
        raise TraceError(name, "no GPU properties in file")
    return out
