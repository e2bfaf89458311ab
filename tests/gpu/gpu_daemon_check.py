"""GPU check for zero-code attach (issue 4): run on a machine with an NVIDIA GPU and a CUDA torch.

    python tests/gpu/gpu_daemon_check.py          # prints what it saw; exit 0 = every check passed

1. Starts the agent with `--source kineto-daemon` (socket dir private to this run).
2. Starts a real PyTorch workload with KINETO_USE_DAEMON=1 (a small MLP forward/backward loop) that
   also launches, every iteration, an empty Triton kernel on a grid of (65536, 32768, 1) blocks of
   128 threads: B = 2^31, so Kineto's 32-bit grid product overflows and it writes a negative
   "warps per SM" (-2^31 * 4 / numSms).
3. Scrapes /metrics until kernel metrics appear and checks: kernel series exist; the huge-grid
   kernel's corrected warps per SM equals 2^31 * 4 / numSms (arithmetic here, numSms from torch);
   its reported minimum is negative; grid_overflow and negative_warps_per_sm artefacts are counted.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

WORKLOAD = textwrap.dedent(
    """
    import sys, time, torch, triton, triton.language as tl

    @triton.jit
    def empty_kernel(x_ptr):
        pass

    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device=dev)
    end = time.time() + float(sys.argv[1])
    while time.time() < end:
        loss = model(x).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        empty_kernel[(65536, 32768, 1)](x, num_warps=4)
        torch.cuda.synchronize()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())


def value(text: str, metric: str, **labels: str) -> float | None:
    for line in text.splitlines():
        if not line.startswith(metric + "{"):
            continue
        if all(f'{k}="{v}"' in line or re.search(f'{k}="[^"]*{re.escape(v)}[^"]*"', line) for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def main() -> int:
    import torch

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tmp = Path(tempfile.mkdtemp(prefix="warpwatch-gpu-", dir="/tmp"))
    conf = tmp / "kineto.conf"
    conf.write_text("ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS=1\n")
    env = {**os.environ, "KINETO_IPC_SOCKET_DIR": str(tmp)}
    port = free_port()
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warpwatch",
            "run",
            "--source",
            "kineto-daemon",
            "--port",
            str(port),
            "--address",
            "127.0.0.1",
            "--period",
            "10s",
            "--window",
            "1s",
            "--jitter",
            "0s",
            "--trace-dir",
            str(tmp / "traces"),
            "--allow-high-duty",
        ],
        env=env,
    )
    workload = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, "90"],
        env={**env, "KINETO_USE_DAEMON": "1", "KINETO_CONFIG": str(conf)},
    )
    ok = False
    try:
        deadline = time.time() + 100
        text = ""
        while time.time() < deadline:
            time.sleep(3)
            try:
                text = scrape(port)
            except OSError:
                continue
            if value(text, "warpwatch_kernel_warps_per_sm", kernel="empty_kernel") is not None:
                break
        print("\n".join(line for line in text.splitlines() if line.startswith("warpwatch_") and "_bucket" not in line))
        expected = 2**31 * 4 / sms
        corrected = value(text, "warpwatch_kernel_warps_per_sm", kernel="empty_kernel")
        reported = value(text, "warpwatch_kernel_reported_warps_per_sm_min", kernel="empty_kernel")
        overflow = value(text, "warpwatch_profiler_artifacts_total", kernel="empty_kernel", artifact="grid_overflow")
        negative = value(
            text, "warpwatch_profiler_artifacts_total", kernel="empty_kernel", artifact="negative_warps_per_sm"
        )
        kernels = len(re.findall(r"^warpwatch_kernel_time_share_ratio\{", text, re.M))
        checks = {
            "kernel series exported": kernels > 1,
            f"corrected warps/SM == 2^31*4/{sms} = {expected:.1f} (got {corrected})": corrected is not None
            and abs(corrected - expected) < 1e-6 * expected,
            f"reported warps/SM negative (got {reported})": reported is not None and reported < 0,
            f"grid_overflow counted (got {overflow})": bool(overflow),
            f"negative_warps_per_sm counted (got {negative})": bool(negative),
        }
        for what, passed in checks.items():
            print(("PASS " if passed else "FAIL ") + what)
        ok = all(checks.values())
    finally:
        workload.terminate()
        agent.terminate()
        workload.wait(30)
        agent.wait(30)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
