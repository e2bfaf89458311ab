"""The JSON shapes of `warpwatch analyze`: the `--format json` document (`document`: its
`schema_version`, a summary per trace read and an error per trace that could not be), one summary
per trace (`--format json`/`jsonl`) and one record per kernel event (`--launches`). Every duration
carries its unit in its name (`_us`), every rate its (`_per_s`); figures about the window stay
within what the trace proves possible, beside what the trace itself shows (`observed_*`), as
docs/metrics.md says."""

from __future__ import annotations

from typing import Any

from ..errors import TraceError
from ..model import ARTIFACT_KINDS, DeviceStats, KernelStats, LaunchMetrics, LaunchResources, Trace, WindowAnalysis
from ..names.labels import KernelNamer
from .table_cells import AMD, NVIDIA

SCHEMA_VERSION = 1
"""The version of the `--format json` document. Raised when a field goes away or changes meaning;
a new field does not raise it (readers ignore fields they do not know)."""


def document(traces: list[dict[str, Any]], errors: list[dict[str, Any]]) -> dict[str, Any]:
    """The `--format json` document: the summaries (`analysis_to_dict`) of the traces read, and one
    entry (`error_record`) per trace that could not be, in the order they were given."""
    return {"schema_version": SCHEMA_VERSION, "traces": traces, "errors": errors}


def error_record(exc: TraceError, message: str) -> dict[str, Any]:
    """A trace that could not be read: its `path` as given, why (`kind`: invalid_trace, too_large or
    io_error, as the agent's `read` fault counts it) and the `error` as stderr says it."""
    return {"path": exc.path, "kind": exc.kind, "error": message}


def launch_record(lm: LaunchMetrics, namer: KernelNamer | None = None) -> dict[str, Any]:
    """One kernel event as a JSON-ready dict (unknown = None); `label` is its `kernel` label."""
    launch = lm.launch
    return {
        "name": launch.name,
        "label": (namer or KernelNamer())(launch.name),
        "device": launch.device,
        "stream": launch.stream,
        "ts_us": launch.ts,
        "dur_us": launch.dur,
        "grid": list(launch.grid) if launch.grid else None,
        "block": list(launch.block) if launch.block else None,
        "launch_api": launch.launch_api,
        "registers_per_thread": launch.registers_per_thread,
        "shared_memory": launch.shared_memory,
        "warps_per_sm": lm.warps_per_sm,
        "reported_warps_per_sm": lm.reported_warps_per_sm,
        "warps_per_block": lm.warps_per_block,
        "max_active_blocks_per_sm": lm.max_active_blocks_per_sm,
        "limiting_factors": list(lm.limiting_factors) if lm.limiting_factors is not None else None,
        "theoretical_occupancy": lm.theoretical_occupancy,
        "waves_per_sm": lm.waves_per_sm,
        "resident_warps_per_sm": lm.resident_warps_per_sm,
        "estimated_occupancy": lm.estimated_occupancy,
        "artifacts": list(lm.artifacts),
        "weight": lm.weight,
    }


def analysis_to_dict(analysis: WindowAnalysis, trace: Trace | None = None) -> dict[str, Any]:
    """The JSON summary of one window (the shape of `warpwatch analyze --format json`)."""
    window = analysis.window
    namer = KernelNamer()
    return {
        "path": analysis.path,
        "rank": analysis.rank,
        "window": {
            "t0_us": window.t0,
            "t1_us": window.t1,
            "duration_us": window.duration,
            "bounds": window.bounds,
            "estimated_bounds": window.bounds == "estimated",
        },
        "launch_count": analysis.launch_count,
        "artifacts": {k: analysis.artifacts[k] for k in ARTIFACT_KINDS if k in analysis.artifacts},
        "devices": [_device_dict(d) for d in analysis.devices],
        "kernels": [_kernel_dict(k, namer) for k in analysis.kernels],
        "warnings": list(trace.warnings) if trace else [],
    }


def _device_dict(d: DeviceStats) -> dict[str, Any]:
    p = d.properties
    words = (AMD if p.vendor == "amd" else NVIDIA) if p else None
    return {
        "device": d.device,
        "name": (p.name or None) if p else None,
        "vendor": p.vendor if p else None,
        "uuid": p.uuid if p else None,
        "arch": p.arch if p else None,
        "compute_capability": p.compute_capability if p else None,
        "compute_unit": words.unit if words else None,
        "warp_unit": words.warp if words else None,
        "sms": p.num_sms if p else None,
        "max_warps_per_sm": p.max_warps_per_sm if p else None,
        "properties_from_device": d.properties_from,
        "resident_warps_per_sm": d.resident_warps_per_sm,
        "estimated_occupancy": d.estimated_occupancy,
        "busy_ratio": d.busy_ratio,
        "observed_busy_ratio": d.observed_busy_ratio,
        "busy_ratio_bounds": list(d.busy_bounds) if d.busy_bounds else None,
        "busy_ratio_bounded": d.unbounded_busy_ratio is not None,
        "streams": d.streams,
        "launches_observed": d.samples,
        "low_confidence": d.low_confidence,
        "low_confidence_reasons": list(d.low_confidence_reasons),
    }


def _kernel_dict(k: KernelStats, namer: KernelNamer) -> dict[str, Any]:
    """A kernel summary: its full `name`, then its `label` (the `kernel` label of its metrics)."""
    return {
        "device": k.device,
        "name": k.name,
        "label": namer(k.name),
        "launches_observed": k.samples,
        "launches_estimated": k.launches,
        "launch_rate_per_s": k.launch_rate,
        "gpu_time_us": k.gpu_time,
        "observed_gpu_time_us": k.observed_gpu_time,
        "time_share": k.time_share,
        "observed_time_share": k.observed_time_share,
        "bounded": k.bounded,
        "warps_per_sm": k.warps_per_sm,
        "reported_warps_per_sm": k.reported_warps_per_sm,
        "reported_warps_per_sm_min": k.reported_warps_per_sm_min,
        "resident_warps_per_sm": k.resident_warps_per_sm,
        "theoretical_occupancy": k.theoretical_occupancy,
        "estimated_occupancy": k.estimated_occupancy,
        "waves_per_sm": k.waves_per_sm,
        "main_limiter": k.main_limiter,
        "launch_resources": _resources(k.main_resources),
        "artifacts": dict(k.artifacts),
    }


def _resources(r: LaunchResources | None) -> dict[str, int | None] | None:
    """The launch resources of the kernel's main configuration (what the code decides)."""
    if r is None:
        return None
    return {
        "block_size": r.block_size,
        "registers_per_thread": r.registers_per_thread,
        "shared_memory_bytes": r.shared_memory,
    }
