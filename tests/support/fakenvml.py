"""A stand-in for pynvml (no GPU driver on these machines): the NVML calls the agent makes."""

from __future__ import annotations

from typing import Any


class FakeNvml:
    """A stand-in for a GPU behind pynvml: one Hopper device with GPM; `lost` makes it fall off the bus."""

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return {15: "GPU is lost", 3: "Not Supported"}.get(self.value, f"NVML error {self.value}")

    NVML_GPM_METRICS_GET_VERSION = 1
    NVML_GPM_METRIC_SM_OCCUPANCY = 3

    class _Metric:
        metricId = 0
        nvmlReturn = 0
        value = 0.0

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.metrics = [FakeNvml._Metric()]

    def __init__(self) -> None:
        self.lost = False
        self.samples_taken = 0
        self.shutdown = False

    def _check(self) -> None:
        if self.lost:
            raise self.NVMLError(15)

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetCudaComputeCapability(self, h: str) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetNumGpuCores(self, h: str) -> int:
        return 16896

    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:
        return type("S", (), {"isSupportedDevice": 1})()

    def nvmlGpmSampleAlloc(self) -> object:
        return object()

    def nvmlGpmSampleFree(self, s: object) -> None:
        pass

    def nvmlGpmSampleGet(self, h: str, s: object) -> object:
        self._check()
        self.samples_taken += 1
        return s

    def nvmlGpmMetricsGet(self, get: Any) -> Any:
        self._check()
        get.metrics[0].value = 37.5
        return get

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        self._check()
        return type("U", (), {"gpu": 80})()
