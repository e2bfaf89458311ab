"""Device context in Prometheus: vendor and UUID in warpwatch_gpu_info, kernel labels -> full names."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

import warpwatch.export.metricdefs as md
from support.exportkit import ok, publish
from support.fakenvml import FakeNvml
from support.paths import HTA
from support.tracebuild import H100, kernel, span, trace_doc, write
from warpwatch.analysis.window import analyze
from warpwatch.export.builder import SnapshotBuilder
from warpwatch.export.nvml import Nvml
from warpwatch.names.labels import kernel_label
from warpwatch.trace import read_trace

MI250 = HTA / "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
UUID = "GPU-5e0f6a1c-2b3d-4e5f-8a9b-0c1d2e3f4a5b"


def samples(registry: CollectorRegistry, m: md.MetricDef) -> list[dict[str, str]]:
    return [dict(s.labels) for fam in registry.collect() if fam.name == m.name for s in fam.samples]


def test_nvml_gives_each_gpu_its_uuid() -> None:
    class WithUuid(FakeNvml):
        def nvmlDeviceGetUUID(self, h: str) -> bytes:
            return UUID.encode()

    nvml = Nvml(WithUuid())
    assert nvml.start()
    assert [g.uuid for g in nvml.gpus] == [UUID]
    plain = Nvml(FakeNvml())
    plain.start()
    assert [g.uuid for g in plain.gpus] == [None]  # a driver without the call: no uuid, no error


def test_an_amd_trace_is_vendor_amd_and_every_exported_label_leads_to_its_full_name() -> None:
    trace = read_trace(MI250)
    registry = publish(SnapshotBuilder(top_kernels=5), ok(analyze(trace)))
    (info,) = samples(registry, md.GPU_INFO)
    assert info == {
        "gpu": "2",
        "name": "AMD Radeon Graphics",
        "compute_capability": "9.0",
        "sms": "104",
        "vendor": "amd",
        "uuid": "",
    }
    names = {s["kernel"]: s["name"] for s in samples(registry, md.KERNEL_INFO)}
    exported = {s["kernel"] for s in samples(registry, md.KERNEL_SECONDS)} - {"other"}
    assert set(names) == exported and len(exported) == 5
    raw = {launch.name for launch in trace.launches}
    for label, name in names.items():
        assert name in raw  # every name here is shorter than the 1024-character cap
        assert kernel_label(name) == label


def test_a_trace_uuid_reaches_gpu_info(tmp_path: Path) -> None:
    doc = trace_doc([span(0, 1000), kernel("k")], devices=[{**H100, "uuid": UUID}])
    registry = publish(SnapshotBuilder(top_kernels=5), ok(analyze(read_trace(write(tmp_path / "t.json", doc)))))
    (info,) = samples(registry, md.GPU_INFO)
    assert info["uuid"] == UUID and info["vendor"] == "nvidia"
