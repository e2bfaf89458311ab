"""Device properties: a trace's `deviceProperties` entries, or a `--gpu-properties` file."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

from ..errors import TraceError
from ..model import DeviceProperties
from .values import is_int

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
    if not is_int(dev_id):
        raise ValueError("missing integer 'id'")
    values: dict[str, Any] = {}
    for key, field_name in _PROP_FIELDS.items():
        v = entry.get(key)
        if v is None:
            continue
        if not is_int(v):
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
        id=dev_id,
        name=name,
        vendor="amd" if amd else "nvidia",
        **values,
        arch=arch[:64] if isinstance(arch, str) and arch else None,
        uuid=uuid[:64] if isinstance(uuid, str) and uuid else None,
    )


def device_properties(raw: object, warnings: list[str]) -> dict[int, DeviceProperties]:
    """A trace's `deviceProperties` (a list, or one entry); unusable entries become warnings."""
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
        raise TraceError(name, f"cannot read GPU properties: {exc.strerror or exc}", kind="io_error") from None
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


def one_model_devices(
    devices: dict[int, DeviceProperties], used: Iterable[int]
) -> tuple[dict[int, DeviceProperties], dict[int, int]]:
    """The properties that apply to each device id the kernels ran on (spec "Physical bounds"):
    each entry to the id it names; where every entry describes one device model (under one id or
    several), that model to the used ids the trace does not list too (real MI300X traces list
    id 0 while their kernels ran on device 2 or 9). Returns the properties by id and, for each id
    given another's, the id they came from."""
    missing = sorted({d for d in used if d not in devices})
    if not devices or not missing:
        return devices, {}
    models = {replace(p, id=0, uuid=None) for p in devices.values()}
    if len(models) != 1:
        return devices, {}
    source = min(devices)
    out = dict(devices)
    for d in missing:
        out[d] = replace(devices[source], id=d, uuid=None)
    return out, dict.fromkeys(missing, source)
