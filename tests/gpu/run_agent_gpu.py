"""GPU check for `warpwatch run` (issue 3): run on a machine with an NVIDIA GPU.

    python tests/gpu/run_agent_gpu.py        # prints what it saw; exit 0 = every check passed

1. Starts the agent with `--source dir:TMP` (period 2 s, window 500 ms), real NVML.
2. With a CUDA torch: starts a workload (matmuls, softmax, elementwise ops in a loop) that records
   itself with `torch.profiler` + `tensorboard_trace_handler(TMP)`, so finished traces land in
   the folder the agent watches. Without one: replays the bundled A100 sample through the same
   folder, which still exercises NVML with the real driver while the GPU idles.
3. Scrapes /metrics until windows are analysed and prints: windows by outcome, NVML up/info,
   utilisation and GPM SM occupancy (Hopper+), the GPU's busy ratio and estimated occupancy from
   the trace, and the top kernels with warps per SM, occupancy and time share.

Checks: the agent serves and exits 0 on SIGTERM; `warpwatch_nvml_up` is 1 and `gpu_info` names the
GPU; at least one window is ok; with torch, kernel series exist for the workload's GPU and, on
Hopper, NVML GPM SM occupancy is exported. Writes the last scrape and the agent's log to $OUT
when that is set.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "agent" / "warpwatch" / "samples" / "a100_alexnet.json.gz"

WORKLOAD = textwrap.dedent(
    """
    import sys, torch
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    out = sys.argv[1]
    x = torch.randn(4096, 4096, device="cuda")
    w = torch.randn(4096, 4096, device="cuda")
    sched = schedule(wait=5, warmup=2, active=3, repeat=4)
    with profile(activities=[ProfilerActivity.CUDA], schedule=sched,
                 on_trace_ready=tensorboard_trace_handler(out, use_gzip=True)) as prof:
        for step in range(5 * 10):
            for _ in range(20):
                y = torch.softmax(x @ w, dim=-1)
                y = torch.relu(y * 2.0 + 1.0)
            torch.cuda.synchronize()
            prof.step()
    print("workload done", flush=True)
    """
)


def has_cuda_torch() -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def scrape(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def values(text: str, name: str) -> list[tuple[str, float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            out.append((labels[len(name) :], float(value)))
    return out


def main() -> int:
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    smi = shutil.which("nvidia-smi")
    if smi:
        print(subprocess.run([smi, "-L"], capture_output=True, text=True).stdout.strip())
    cuda = has_cuda_torch()
    print(f"CUDA torch: {'yes' if cuda else 'no (replaying the bundled A100 sample instead)'}")

    traces = Path(tempfile.mkdtemp(prefix="warpwatch_gpu_"))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "agent"), PYTHONUNBUFFERED="1")
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warpwatch",
            "run",
            "--source",
            f"dir:{traces}",
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--period",
            "2s",
            "--window",
            "500ms",
            "--jitter",
            "0",
            "--allow-high-duty",
            "--collect-timeout",
            "5s",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    log: list[str] = []
    assert agent.stderr is not None
    port = None
    deadline = time.monotonic() + 60
    while port is None and time.monotonic() < deadline:
        line = agent.stderr.readline()
        if not line:
            break
        log.append(line.rstrip())
        m = re.search(r"event=listening .*port=(\d+)", line)
        if m:
            port = int(m.group(1))
    if port is None:
        print("\n".join(log))
        print("FAIL: the agent did not start")
        return 1
    import threading

    threading.Thread(target=lambda: log.extend(x.rstrip() for x in agent.stderr or []), daemon=True).start()
    url = f"http://127.0.0.1:{port}"

    workload = None
    if cuda:
        workload = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(traces)], env=env)
    else:
        shutil.copy(SAMPLE, traces / "sample.json.gz")

    text = ""
    ok = 0.0
    deadline = time.monotonic() + (240 if cuda else 30)
    while time.monotonic() < deadline:
        time.sleep(1)
        text = scrape(url)
        ok = sum(v for labels, v in values(text, "warpwatch_windows_total") if 'outcome="ok"' in labels)
        if ok >= (3 if cuda else 1) and (workload is None or workload.poll() is not None or ok >= 3):
            break
    if workload is not None:
        workload.wait(300)

    agent.send_signal(signal.SIGTERM)
    rc = agent.wait(30)

    print("\n== windows")
    for labels, v in values(text, "warpwatch_windows_total"):
        print(f"  {labels} {v:g}")
    print("== NVML")
    for name in (
        "warpwatch_nvml_up",
        "warpwatch_nvml_gpu_utilization_ratio",
        "warpwatch_nvml_sm_occupancy_ratio",
        "warpwatch_gpu_info",
    ):
        for labels, v in values(text, name):
            print(f"  {name}{labels} {v:g}")
    print("== from the traces")
    for name in (
        "warpwatch_gpu_busy_ratio",
        "warpwatch_gpu_estimated_occupancy_ratio",
        "warpwatch_gpu_resident_warps_per_sm",
    ):
        for labels, v in values(text, name):
            print(f"  {name}{labels} {v:.4g}")
    shares = sorted(values(text, "warpwatch_kernel_time_share_ratio"), key=lambda lv: -lv[1])[:10]
    print("== top kernels (time share, warps/SM, theoretical, estimated occupancy)")
    for labels, share in shares:

        def get(name: str, labels: str = labels) -> str:
            found = [v for lab, v in values(text, name) if lab == labels]
            return f"{found[0]:.3g}" if found else "-"

        print(
            f"  {labels} share={share:.3g} warps/SM={get('warpwatch_kernel_warps_per_sm')} "
            f"theo={get('warpwatch_kernel_theoretical_occupancy_ratio')} "
            f"est={get('warpwatch_kernel_estimated_occupancy_ratio')}"
        )
    if out_dir is not None:
        (out_dir / "metrics.txt").write_text(text)
        (out_dir / "agent.log").write_text("\n".join(log) + "\n")

    failures = []
    if rc != 0:
        failures.append(f"agent exited {rc} on SIGTERM")
    if [v for _, v in values(text, "warpwatch_nvml_up")] != [1.0]:
        failures.append("warpwatch_nvml_up is not 1")
    if not values(text, "warpwatch_gpu_info"):
        failures.append("no warpwatch_gpu_info")
    if ok < 1:
        failures.append("no ok window")
    if cuda:
        if not shares:
            failures.append("no kernel series from the workload")
        info = " ".join(labels for labels, _ in values(text, "warpwatch_gpu_info"))
        if re.search(r'compute_capability="(9|1\d)\.', info) and not values(text, "warpwatch_nvml_sm_occupancy_ratio"):
            failures.append("Hopper or newer, but no NVML GPM SM occupancy")
    shutil.rmtree(traces, ignore_errors=True)
    if failures:
        print("\n".join(log[-40:]))
        print("FAIL: " + "; ".join(failures))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
