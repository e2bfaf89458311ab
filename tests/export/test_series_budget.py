"""Issue 24: series per GPU at default settings, from the real agent's /metrics on a real trace.

The trace: HTA's `negative_queue_length_values_check/rank0.json.gz`, an A100-SXM4-80GB inference-like
trace with 85 distinct kernels on GPU 0 (the one H100 trace in ../shared, kineto's
`after_fix_trace.json`, holds a single kernel). The README states the formula checked here:
per GPU 10·K + 20 series (K = --top-kernels; issue 45 added one per top kernel: its launch resources,
`warpwatch_kernel_launch_info`) plus one per (kernel, artefact kind) that occurred.
"""

from __future__ import annotations

import pytest

from support.agent import Agent
from support.paths import HTA

TRACE = HTA / "negative_queue_length_values_check/rank0.json.gz"
DEFAULT_TOP_KERNELS = 16


def per_gpu(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], gpu: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, labels in samples:
        if ("gpu", gpu) in labels:
            out[name] = out.get(name, 0) + 1
    return out


@pytest.mark.slow
def test_default_settings_cost_at_most_200_series_per_gpu_on_a_real_trace_and_follow_the_formula() -> None:
    agent = Agent(
        "--source",
        f"replay:{TRACE}",
        "--period",
        "1s",
        "--window",
        "50ms",
        "--jitter",
        "0",
        "--allow-high-duty",
        defaults=True,
    )
    try:
        samples = agent.wait_for(
            lambda s: any(
                n == "warpwatch_kernel_seconds_total" and ("gpu", "0") in ls and v > 0 for (n, ls), v in s.items()
            ),
            timeout=30,
        )
        samples = agent.scrape()
    finally:
        agent.stop()
    families = per_gpu(samples, "0")
    k = DEFAULT_TOP_KERNELS
    assert families["warpwatch_kernel_seconds_total"] == k + 1  # top-K and other, of 85 kernels
    assert families["warpwatch_kernel_info"] == k
    assert families["warpwatch_kernel_launch_info"] == k  # every top kernel of this trace has a block
    for gauge in (
        "warpwatch_kernel_time_share_ratio",
        "warpwatch_kernel_estimated_occupancy_ratio",
        "warpwatch_kernel_warps_per_sm",
    ):
        assert gauge not in families, f"{gauge} is opt-in (--kernel-gauges)"
    artifacts = families.get("warpwatch_profiler_artifacts_total", 0)
    total = sum(families.values())
    assert total == 10 * k + 20 + artifacts, families
    agent_wide = sum(1 for _, labels in samples if not any(name == "gpu" for name, _ in labels))
    # a pod of 8 GPUs shares the agent's own series among them
    assert total + agent_wide / 8 <= 200, (total, agent_wide)
