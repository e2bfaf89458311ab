"""What is decoded from a trace, and the scan that keeps what the Trace needs from events.

Decoding uses msgspec typed structs that name only the fields the analysis needs, so every
other key of every event is skipped without being built. Two sets of types: strict ones that
make the common case fast, and permissive ones (every field Any) used when the strict ones
reject a piece of the document.

- Events are a tagged union on `ph`: only complete events ("X") get a struct with fields;
  every other phase (flows, instants, metadata...) is validated and skipped. `name` and
  `args` stay raw JSON until an event turns out to be a kernel (so only kernels' args must
  be objects: the args of other events are never read).
- A runtime event whose name starts with `hip` is kept as (correlation, name, grid, block): the
  kernel with the same correlation id gets it as `launch_api` (AMD grid units), and its grid and
  block where the kernel event has none (ROCm 6 writes them on the call only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, Union

import msgspec

from ..model import KernelLaunch
from .badevents import BadEvent, braces, describe_bad_event, first_span
from .values import dims, finite_number, is_int, reported

KERNEL_CATEGORIES = frozenset({"kernel", "Kernel"})
GPU_CATEGORIES = frozenset({"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})
RUNTIME_CATEGORIES = frozenset({"cuda_runtime", "cuda_driver", "Runtime"})
HIP_MARK = b'"hip'
"""A piece that holds no such bytes has no hip runtime event: its runtime events are not looked at."""

_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Dims = tuple[_NonNegative, _NonNegative, _NonNegative]
RAW_NULL = msgspec.Raw(b"null")


class Args(msgspec.Struct, gc=False):
    """The kernel args we read; the raw JSON names are mapped here, once. Permissive."""

    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    correlation: Any = None
    registers_per_thread: Any = msgspec.field(default=None, name="registers per thread")
    shared_memory: Any = msgspec.field(default=None, name="shared memory")
    warps_per_sm: Any = msgspec.field(default=None, name="warps per SM")
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    occupancy_pct: Any = msgspec.field(default=None, name="est. achieved occupancy %")


class KernelArgs(msgspec.Struct, gc=False):
    """The same args with the types every Kineto version writes; anything else -> `Args`."""

    device: int | None = None
    stream: int | str | None = None
    grid: _Dims | None = None
    block: _Dims | None = None
    correlation: int | None = None
    registers_per_thread: _NonNegative | None = msgspec.field(default=None, name="registers per thread")
    shared_memory: _NonNegative | None = msgspec.field(default=None, name="shared memory")
    warps_per_sm: float | str | None = msgspec.field(default=None, name="warps per SM")
    blocks_per_sm: float | str | None = msgspec.field(default=None, name="blocks per SM")
    occupancy_pct: float | str | None = msgspec.field(default=None, name="est. achieved occupancy %")


class Event(msgspec.Struct, gc=False):
    """Any event, permissive."""

    ph: Any = None
    cat: Any = None
    name: msgspec.Raw = RAW_NULL
    pid: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = RAW_NULL


class Complete(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event ("ph": "X"): kernels, memcpy, memset, the Trace span, CPU ops...

    Name and args are typed for every complete event (their args mostly have none of the
    kernel keys, which are then None): one decode builds the launches, and an event whose
    types differ sends its whole piece to the permissive types."""

    cat: str | None = None
    name: str | None = None
    pid: Any = None
    ts: float | None = None
    dur: float | None = None
    args: KernelArgs | None = None


def _skipped_phase(ph: str) -> type[msgspec.Struct]:
    """An event of another phase: validated, its fields skipped, never a GPU activity."""
    ns = {"__annotations__": {"cat": ClassVar[None]}, "cat": None}
    return msgspec.defstruct(f"_Phase_{ord(ph)}", [], namespace=ns, tag_field="ph", tag=ph, gc=False)


# Every phase of the Trace Event Format besides "X"; an event with another (or no) "ph" makes
# the strict decoder fail and the permissive one take over.
_OTHER_PHASES = tuple(_skipped_phase(ph) for ph in "BEiICbnestfPONDMVvRc()")
FastEvent: Any = Union.__getitem__((Complete, *_OTHER_PHASES))


class Header(msgspec.Struct):
    """The top-level keys of a trace object; `traceEvents` only when decoded whole."""

    traceEvents: list[Event] = msgspec.field(default_factory=list)
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    schemaVersion: Any = None


class FastHeader(msgspec.Struct):
    traceEvents: list[FastEvent] = msgspec.field(default_factory=list)
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    schemaVersion: Any = None


HEADER_FIELDS = ("deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion")


class Scanned(msgspec.Struct, array_like=True, gc=False):
    """What one piece of `traceEvents` contributes to the Trace."""

    events: int
    """How many events the piece holds (for the index of an event named in an error); -1 when
    it was skimmed (only its GPU events decoded)."""
    launches: list[KernelLaunch]
    correlations: list[int]
    """The correlation id of each launch (-1 when it has none), for `launch_api`."""
    hip_calls: list[HipCall]
    """(correlation, name, grid, block) of each runtime event named hip*."""
    span: tuple[float, float] | None
    """Start and end of the piece's first Trace event with a positive duration."""
    gpu_lo: float
    gpu_hi: float
    bad: tuple[int, str] | None = None
    """(index in the piece, message with `{index}` for the index in the document) of a bad
    GPU event; the piece is then of no use."""
    span_bad: tuple[int, str] | None = None
    """The same for an invalid Trace event before `span` (an error only if no earlier piece
    has a span)."""


DOC: msgspec.json.Decoder[Header | list[Event]] = msgspec.json.Decoder(Header | list[Event])
DOC_FAST: msgspec.json.Decoder[Any] = msgspec.json.Decoder(FastHeader | list[FastEvent])
PART_FAST: msgspec.json.Decoder[Any] = msgspec.json.Decoder(list[FastEvent])
PART: msgspec.json.Decoder[list[Event]] = msgspec.json.Decoder(list[Event])
_VALUES: msgspec.json.Decoder[list[Any]] = msgspec.json.Decoder(list[Any])
_KERNEL_ARGS: msgspec.json.Decoder[list[KernelArgs | None]] = msgspec.json.Decoder(list[KernelArgs | None])
_ONE_ARGS: msgspec.json.Decoder[Args | None] = msgspec.json.Decoder(Args | None)
_EMPTY_ARGS = KernelArgs()
_EMPTY_PERMISSIVE_ARGS = Args()
_INTERESTING = GPU_CATEGORIES | {"Trace"}
HipCall = tuple[int, str, Any, Any]
"""(correlation, name, grid, block) of a hip* runtime event; grid and block as written (None when not
three non-negative integers; lists after a trip between processes)."""


class Interned:
    """One object per distinct kernel name and launch configuration within one read: a window
    keeps hundreds of thousands of launches of a few hundred kernels."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.dims: dict[tuple[int, int, int], tuple[int, int, int]] = {}

    def name(self, s: str) -> str:
        return self.names.setdefault(s, s)

    def dim(self, d: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
        return None if d is None else self.dims.setdefault(d, d)


def scan(events: list[Any], fast: bool, interned: Interned, *, hip: bool = False) -> Scanned:
    """The Trace's share of a list of events: launches, Trace spans, GPU extent, hip calls.

    `fast`: the events are `FastEvent`s (checked types); else permissive `Event`s. `hip`: look
    for hip* runtime events. A GPU event without valid times, or a kernel whose args are no
    object, is reported in `Scanned.bad` (nothing else is kept then).
    """
    count = len(events)
    try:
        return _scan(events, fast, interned, hip)
    except BadEvent as bad:
        return Scanned(count, [], [], [], None, math.inf, -math.inf, describe_bad_event(bad, events))
    except msgspec.DecodeError as exc:  # a kernel's name or args (kept raw until now) are not valid JSON
        message = braces(f"invalid JSON in a kernel event's name or args ({exc})")
        return Scanned(count, [], [], [], None, math.inf, -math.inf, (0, message))


def _scan(events: list[Any], fast: bool, interned: Interned, hip: bool) -> Scanned:
    count = len(events)
    events_all = events
    if not fast:
        events = [ev for ev in events if ev.ph == "X" and isinstance(ev.cat, str)]
    isfinite = math.isfinite
    spans: list[tuple[Any, Any]] = []
    kernels: list[tuple[Any, float, float]] = []
    calls: list[Any] = []
    lo = math.inf
    hi = -math.inf
    for ev in events:
        cat = ev.cat
        if cat not in _INTERESTING:
            if hip and cat in RUNTIME_CATEGORIES:
                calls.append(ev)
            continue
        ts = ev.ts
        dur = ev.dur
        if cat == "Trace":
            spans.append((ts, dur))
            continue
        if ts.__class__ is not float or dur.__class__ is not float:
            ts = finite_number(ts)
            dur = finite_number(dur)
            if ts is None or dur is None:
                raise BadEvent(ev, "times")
        if not (dur >= 0 and isfinite(ts) and isfinite(dur)):
            raise BadEvent(ev, "times")
        if ts < lo:
            lo = ts
        if ts + dur > hi:
            hi = ts + dur
        if cat in KERNEL_CATEGORIES:
            kernels.append((ev, ts, dur))
    if fast:
        launches, correlations = _typed_launches(kernels, interned)
        hip_calls = [
            (ev.args.correlation, ev.name[:64], ev.args.grid, ev.args.block)
            for ev in calls
            if ev.name is not None and ev.name[:3] == "hip" and ev.args is not None and ev.args.correlation is not None
        ]
    else:
        launches, correlations = _launches(kernels, interned)
        hip_calls = _hip_calls(c for c in calls if bytes(c.name)[:4] == HIP_MARK)
    span = None
    span_bad = None
    try:
        window = first_span(spans)
        span = None if window is None else (window.t0, window.t1)
    except BadEvent as bad:
        span_bad = describe_bad_event(bad, events_all)
    return Scanned(count, launches, correlations, hip_calls, span, lo, hi, None, span_bad)


def _typed_launches(
    kernels: list[tuple[Any, float, float]], interned: Interned
) -> tuple[list[KernelLaunch], list[int]]:
    """Kernel events decoded with their names and args typed -> launches."""
    return _build_launches(((ev, ts, dur, ev.name, ev.args) for ev, ts, dur in kernels), interned)


def _hip_calls(calls: Iterable[Any]) -> list[HipCall]:
    out = []
    for ev in calls:
        try:
            name = msgspec.json.decode(ev.name)
            args = _ONE_ARGS.decode(ev.args)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue  # not a kernel: a runtime event's odd args fail nothing
        if isinstance(name, str) and args is not None and is_int(args.correlation):
            out.append((args.correlation, name[:64], dims(args.grid), dims(args.block)))
    return out


def _launches(kernels: list[tuple[Any, float, float]], interned: Interned) -> tuple[list[KernelLaunch], list[int]]:
    """Kernel events -> launches. Names and args are decoded here, for kernels only, in one go."""
    if not kernels:
        return [], []
    names = _VALUES.decode(b"[" + b",".join([k[0].name for k in kernels]) + b"]")
    try:
        args = _KERNEL_ARGS.decode(b"[" + b",".join([k[0].args for k in kernels]) + b"]")
    except msgspec.ValidationError:
        pairs = [_launch_permissive(ev, n, ts, dur, interned) for (ev, ts, dur), n in zip(kernels, names, strict=True)]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    rows = ((ev, ts, dur, name, a) for (ev, ts, dur), name, a in zip(kernels, names, args, strict=True))
    return _build_launches(rows, interned)


def _build_launches(
    rows: Iterable[tuple[Any, float, float, Any, KernelArgs | None]], interned: Interned
) -> tuple[list[KernelLaunch], list[int]]:
    """(event, ts, dur, name, typed args or None) of each kernel -> launches, and their correlation
    ids (-1: none). A name that is not a string (None included) becomes its `str`."""
    out = []
    correlations = []
    name_of = interned.names.setdefault
    dim = interned.dim
    empty = _EMPTY_ARGS
    for ev, ts, dur, name, a in rows:
        if a is None:
            a = empty
        device = a.device
        if device is None:
            device = ev.pid if ev.pid.__class__ is int else -1
        warps, blocks, occupancy = a.warps_per_sm, a.blocks_per_sm, a.occupancy_pct
        if warps.__class__ is str or blocks.__class__ is str or occupancy.__class__ is str:
            warps, blocks, occupancy = reported(warps), reported(blocks), reported(occupancy)
        if name.__class__ is not str:
            name = str(name)
        out.append(
            KernelLaunch(
                name_of(name, name),
                device,
                ts,
                dur,
                a.stream,
                dim(a.grid),
                dim(a.block),
                a.registers_per_thread,
                a.shared_memory,
                warps,
                blocks,
                occupancy,
            )
        )
        correlations.append(-1 if a.correlation is None else a.correlation)
    return out, correlations


def _launch_permissive(ev: Any, name: Any, ts: float, dur: float, interned: Interned) -> tuple[KernelLaunch, int]:
    try:
        args = _ONE_ARGS.decode(ev.args) or _EMPTY_PERMISSIVE_ARGS
    except msgspec.ValidationError as exc:
        raise BadEvent(ev, "args", str(exc)) from None
    device = args.device if is_int(args.device) else ev.pid if is_int(ev.pid) else -1
    stream = args.stream if is_int(args.stream) or isinstance(args.stream, str) else None
    regs = args.registers_per_thread
    smem = args.shared_memory
    launch = KernelLaunch(
        name=interned.name(name if isinstance(name, str) else str(name)),
        device=device,
        ts=ts,
        dur=dur,
        stream=stream,
        grid=interned.dim(dims(args.grid)),
        block=interned.dim(dims(args.block)),
        registers_per_thread=regs if is_int(regs) and regs >= 0 else None,
        shared_memory=smem if is_int(smem) and smem >= 0 else None,
        reported_warps_per_sm=reported(args.warps_per_sm),
        reported_blocks_per_sm=reported(args.blocks_per_sm),
        reported_occupancy_pct=reported(args.occupancy_pct),
    )
    return launch, args.correlation if is_int(args.correlation) else -1
