"""Trace: bytes of a Kineto trace file -> a typed `Trace` (device properties, kernel launches, window).

Reading is split from parsing: `read_trace` loads (and gunzips) a file under a size cap,
`parse_trace` decodes bytes. Decoding uses msgspec typed structs that name only the fields
the analysis needs, so every other key of every event is skipped without being built.

Kineto has written invalid JSON (bare `inf`/`-inf`/`nan` tokens, raw control characters
inside strings). The fast path is strict; only when it fails to decode do we sanitise the
bytes (`_sanitize`) and decode again. Any failure becomes one `TraceError` naming the file.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from .errors import TraceError
from .model import DeviceProperties, KernelLaunch, Trace, TraceWindow

DEFAULT_MAX_BYTES = 2 * 1024**3
"""Default cap on a trace's decompressed size (2 GiB); configurable everywhere it is used."""

KERNEL_CATEGORIES = frozenset({"kernel", "Kernel"})
GPU_CATEGORIES = frozenset({"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset"})


class _Args(msgspec.Struct):
    """The kernel args we read; the raw JSON names are mapped here, once."""

    device: Any = None
    stream: Any = None
    grid: Any = None
    block: Any = None
    registers_per_thread: Any = msgspec.field(default=None, name="registers per thread")
    shared_memory: Any = msgspec.field(default=None, name="shared memory")
    warps_per_sm: Any = msgspec.field(default=None, name="warps per SM")
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    occupancy_pct: Any = msgspec.field(default=None, name="est. achieved occupancy %")


class _Event(msgspec.Struct):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | None = None


class _TraceFile(msgspec.Struct):
    traceEvents: list[_Event] = msgspec.field(default_factory=list)
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    schemaVersion: Any = None


_EMPTY_ARGS = _Args()
_TOP: msgspec.json.Decoder[_TraceFile | list[_Event]] = msgspec.json.Decoder(_TraceFile | list[_Event])


def read_trace(
    path: str | os.PathLike[str],
    *,
    max_bytes: int | None = None,
    gpu_properties: Mapping[int, DeviceProperties] | None = None,
) -> Trace:
    """Read one trace file (`.json` or gzip-compressed) and parse it.

    `max_bytes` caps the decompressed size (default `DEFAULT_MAX_BYTES`); a larger file
    fails with a TraceError instead of exhausting memory. `gpu_properties` supply device
    properties for traces that carry none (the trace's own take precedence).
    """
    name = os.fspath(path)
    data = load_bytes(name, max_bytes=DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)
    return parse_trace(data, name, gpu_properties=gpu_properties)


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
        raise TraceError(
            path, f"larger than the {max_bytes:,}-byte limit once decompressed (raise max_trace_bytes to read it)"
        )
    if not data.strip():
        raise TraceError(path, "empty file")
    return data


def parse_trace(
    data: bytes, path: str = "<bytes>", *, gpu_properties: Mapping[int, DeviceProperties] | None = None
) -> Trace:
    """Decode a trace document (object with `traceEvents`, or a bare event list)."""
    top = _decode(_TOP, data, path)
    if isinstance(top, list):
        events: list[_Event] = top
        header = _TraceFile()
    else:
        header = top
        events = header.traceEvents
        if not events and header.deviceProperties is None and header.schemaVersion is None:
            raise TraceError(path, "not a Kineto trace (no traceEvents, deviceProperties or schemaVersion)")

    warnings: list[str] = []
    devices = _device_properties(header.deviceProperties, path, warnings)
    for dev_id, props in (gpu_properties or {}).items():
        devices.setdefault(dev_id, props)

    launches: list[KernelLaunch] = []
    span: TraceWindow | None = None
    gpu_lo = math.inf
    gpu_hi = -math.inf
    for index, ev in enumerate(events):
        if ev.ph != "X":
            continue
        cat = ev.cat
        if cat == "Trace":
            if span is None:
                ts, dur = _times(ev, path, index)
                if dur > 0:
                    span = TraceWindow(ts, ts + dur, "trace_span")
            continue
        if cat not in GPU_CATEGORIES:
            continue
        ts, dur = _times(ev, path, index)
        gpu_lo = min(gpu_lo, ts)
        gpu_hi = max(gpu_hi, ts + dur)
        if cat in KERNEL_CATEGORIES:
            launches.append(_launch(ev, ev.args or _EMPTY_ARGS, ts, dur))

    rank, world = _distributed(header.distributedInfo)
    base = header.baseTimeNanoseconds
    return Trace(
        path=path,
        devices=devices,
        launches=tuple(launches),
        span=span,
        gpu_extent=(gpu_lo, gpu_hi) if gpu_lo <= gpu_hi else None,
        rank=rank,
        world_size=world,
        schema_version=header.schemaVersion if _is_int(header.schemaVersion) else None,
        base_time_ns=base if _is_int(base) else None,
        warnings=tuple(warnings),
    )


def _decode(decoder: msgspec.json.Decoder[Any], data: bytes, path: str) -> Any:
    """Strict fast path; on a decode error, sanitise Kineto's known invalid JSON and retry once."""
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"unexpected structure: {exc}") from None
    except msgspec.DecodeError as exc:
        fixed = _sanitize(data)
        if fixed == data:
            raise TraceError(path, _describe_decode_error(data, exc)) from None
        try:
            return decoder.decode(fixed)
        except msgspec.ValidationError as exc2:
            raise TraceError(path, f"unexpected structure: {exc2}") from None
        except msgspec.DecodeError:
            raise TraceError(path, _describe_decode_error(data, exc)) from None


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


def _times(ev: _Event, path: str, index: int) -> tuple[float, float]:
    ts = _finite_number(ev.ts)
    dur = _finite_number(ev.dur)
    if ts is None or dur is None or dur < 0:
        raise TraceError(
            path,
            f"traceEvents[{index}] ({ev.cat!s:.20} {ev.name!s:.60}): ts/dur must be finite numbers, "
            f"dur >= 0 (got ts={ev.ts!r:.30}, dur={ev.dur!r:.30})",
        )
    return ts, dur


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


def _launch(ev: _Event, args: _Args, ts: float, dur: float) -> KernelLaunch:
    device = args.device if _is_int(args.device) else ev.pid if _is_int(ev.pid) else -1
    stream = args.stream if _is_int(args.stream) or isinstance(args.stream, str) else None
    regs = args.registers_per_thread
    smem = args.shared_memory
    name = ev.name if isinstance(ev.name, str) else str(ev.name)
    return KernelLaunch(
        name=name,
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
    )


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
    assert isinstance(dev_id, int)
    return DeviceProperties(id=dev_id, name=name, vendor="amd" if amd else "nvidia", **values)


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
