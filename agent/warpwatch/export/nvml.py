"""NVML: device-level ground truth sampled around each capture window.

`Nvml(pynvml_module)` wraps the `pynvml` module of `nvidia-ml-py` (passed in, so that tests can
hand a stand-in for a GPU). Without a driver `nvmlInit()` raises `NVMLError_LibraryNotFound`:
one log line at start, `warpwatch_nvml_up 0`, and everything else keeps working.

Per GPU (NVML index, which is the physical index, not the traced process's CUDA index when
`CUDA_VISIBLE_DEVICES` reorders devices): name, compute capability, SM count where NVML can
tell, GPU utilisation at the end of the window and, on Hopper and newer, GPM
`SM_OCCUPANCY` between a sample taken when the window opens (`begin`) and one when it closes
(`end`), so that it covers the same time as the trace.

Errors during a run (a GPU falling off the bus, a driver reload) never raise: the reading
says `up=False`, each distinct error is logged once (again at most every ten minutes, with the
number of repeats, while it lasts), counted by kind (`take_errors`: `gpu_lost` for
`NVML_ERROR_GPU_IS_LOST`, else `error`), and the next window tries again.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..logs import RepeatFilter, event, limited_event
from .snapshot import GpuInfo, NvmlSample, gpu_info

log = logging.getLogger(__name__)

NVML_ERROR_GPU_IS_LOST = 15
"""nvmlReturn_t of a GPU that fell off the bus (same value in every NVML since 2012)."""

_CORES_PER_SM = {(7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64}
"""CUDA cores per SM by compute capability (others since 8.6: 128), to derive SMs from cores."""


@dataclass(frozen=True, slots=True)
class NvmlGpu:
    index: int
    name: str
    compute_capability: str
    sms: int | None
    uuid: str | None = None
    """`GPU-…`, as dcgm-exporter's `UUID` label spells it."""


@dataclass(frozen=True, slots=True)
class NvmlGpuReading:
    index: int
    utilization: float | None
    """0..1."""
    sm_occupancy: float | None
    """0..1, GPM, over the window."""


@dataclass(frozen=True, slots=True)
class NvmlReading:
    up: bool
    gpus: tuple[NvmlGpuReading, ...] = ()

    def samples(self) -> list[NvmlSample]:
        """The reading as the snapshot exports it, per GPU index."""
        return [NvmlSample(str(r.index), r.sm_occupancy, r.utilization) for r in self.gpus]


def gpu_infos(gpus: Iterable[NvmlGpu]) -> dict[str, GpuInfo]:
    """NVML's devices as the snapshot exports them (`warpwatch_gpu_info`), by GPU index."""
    return {str(g.index): gpu_info(str(g.index), g.name, g.compute_capability, g.sms, "nvidia", g.uuid) for g in gpus}


class _Device:
    def __init__(self, index: int, handle: Any, info: NvmlGpu, gpm: bool) -> None:
        self.index = index
        self.handle = handle
        self.info = info
        self.gpm = gpm
        self.samples: list[Any] = []
        self.began = False


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """NVML sampling for the service; every method is safe to call when NVML is unavailable."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml: Any = nvml
        self._devices: list[_Device] = []
        self._started = False
        self._errors = 0
        self._new_errors: Counter[str] = Counter()
        self._repeats = RepeatFilter()

    @property
    def available(self) -> bool:
        return self._started

    @property
    def errors(self) -> int:
        """NVML errors seen since start (each distinct one is logged once)."""
        return self._errors

    @property
    def gpus(self) -> tuple[NvmlGpu, ...]:
        return tuple(d.info for d in self._devices)

    def start(self) -> bool:
        """Initialise NVML and list the GPUs; False (and one log line) when there is no NVML."""
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            nv = self._nvml
            nv.nvmlInit()
        except ImportError as exc:
            event(log, "nvml_unavailable", logging.WARNING, reason=f"cannot import pynvml: {exc}")
            return False
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            event(
                log,
                "nvml_unavailable",
                logging.INFO,
                reason=str(exc) or type(exc).__name__,
                hint="no NVIDIA driver here; NVML metrics are off, everything else works",
            )
            return False
        self._started = True
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            self._error("device_count", exc)
            count = 0
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
            except nv.NVMLError as exc:
                self._error(f"handle {index}", exc)
                continue
            self._devices.append(_Device(index, handle, self._info(index, handle), self._gpm_supported(handle)))
        event(
            log,
            "nvml_started",
            gpus=len(self._devices),
            gpm=",".join(str(d.index) for d in self._devices if d.gpm) or "none",
        )
        return True

    def _info(self, index: int, handle: Any) -> NvmlGpu:
        nv = self._nvml
        name, cc, sms, uuid = "unknown", "", None, None
        try:
            name = _text(nv.nvmlDeviceGetName(handle))
        except nv.NVMLError as exc:
            self._error(f"name {index}", exc)
        try:
            uuid = _text(nv.nvmlDeviceGetUUID(handle))
        except (nv.NVMLError, AttributeError) as exc:
            if not isinstance(exc, AttributeError):
                self._error(f"uuid {index}", exc)
        major = minor = None
        try:
            major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
            cc = f"{major}.{minor}"
        except nv.NVMLError as exc:
            self._error(f"compute capability {index}", exc)
        try:
            cores = int(nv.nvmlDeviceGetNumGpuCores(handle))
            if major is not None and minor is not None and cores > 0:
                per_sm = _CORES_PER_SM.get((major, minor), 128 if major >= 8 else 64)
                sms = cores // per_sm
        except (nv.NVMLError, AttributeError):
            sms = None  # not offered by this driver; the trace's deviceProperties still has it
        return NvmlGpu(index, name, cc, sms, uuid)

    def _gpm_supported(self, handle: Any) -> bool:
        nv = self._nvml
        try:
            return bool(nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except (nv.NVMLError, AttributeError):
            return False

    def take_errors(self) -> dict[str, int]:
        """NVML errors by kind (`gpu_lost`, `error`) since the last call."""
        taken, self._new_errors = dict(self._new_errors), Counter()
        return taken

    def _error(self, where: str, exc: BaseException) -> None:
        self._errors += 1
        self._new_errors["gpu_lost" if getattr(exc, "value", None) == NVML_ERROR_GPU_IS_LOST else "error"] += 1
        limited_event(
            log,
            self._repeats,
            (where, str(exc)),
            "nvml_error",
            logging.WARNING,
            where=where,
            error=str(exc) or type(exc).__name__,
            errors=self._errors,
        )

    def begin(self) -> None:
        """Take the GPM sample that opens the window."""
        if not self._started:
            return
        nv = self._nvml
        for d in self._devices:
            d.began = False
            if not d.gpm:
                continue
            try:
                if not d.samples:
                    d.samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
                nv.nvmlGpmSampleGet(d.handle, d.samples[0])
                d.began = True
            except nv.NVMLError as exc:
                self._error(f"gpm sample {d.index}", exc)

    def end(self) -> NvmlReading:
        """Take the closing samples and read utilisation; `up` is False if anything failed."""
        if not self._started:
            return NvmlReading(False)
        nv = self._nvml
        ok = True
        readings: list[NvmlGpuReading] = []
        for d in self._devices:
            occupancy = None
            if d.gpm and d.began:
                try:
                    nv.nvmlGpmSampleGet(d.handle, d.samples[1])
                    occupancy = self._sm_occupancy(d)
                except nv.NVMLError as exc:
                    ok = False
                    self._error(f"gpm metrics {d.index}", exc)
            elif d.gpm:
                ok = False
            utilization = None
            try:
                utilization = float(nv.nvmlDeviceGetUtilizationRates(d.handle).gpu) / 100.0
            except nv.NVMLError as exc:
                ok = False
                self._error(f"utilization {d.index}", exc)
            readings.append(NvmlGpuReading(d.index, utilization, occupancy))
        return NvmlReading(ok, tuple(readings))

    def _sm_occupancy(self, d: _Device) -> float | None:
        nv = self._nvml
        get = nv.c_nvmlGpmMetricsGet_t()
        get.version = nv.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = 1
        get.sample1 = d.samples[0]
        get.sample2 = d.samples[1]
        get.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_OCCUPANCY
        nv.nvmlGpmMetricsGet(get)
        metric = get.metrics[0]
        if int(metric.nvmlReturn) != 0:
            raise nv.NVMLError(int(metric.nvmlReturn))
        return float(metric.value) / 100.0

    def close(self) -> None:
        if not self._started:
            return
        nv = self._nvml
        for d in self._devices:
            for s in d.samples:
                with contextlib.suppress(nv.NVMLError):
                    nv.nvmlGpmSampleFree(s)
            d.samples = []
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
        self._started = False
