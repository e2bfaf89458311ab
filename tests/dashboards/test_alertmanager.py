"""Issues 24 and 45: alerts reach a real Alertmanager (Debian's prometheus-alertmanager) from a real
Prometheus evaluating the generated rules, and one build that regresses 50 kernels is one
notification.

The data: deployment `llm` is one pod with one GPU running 50 kernels (1.5 % of the GPU's time
each); at minute 100 of 120 the theoretical (and estimated) occupancy of all 50 drops to 40 % of its
level (a build that raised every kernel's registers). Deployment `steady` runs the same kernels
unchanged. Raw counters are backfilled with promtool,
then both recording tiers (promtool backfills rules too), then Prometheus evaluates the generated
alert groups (thresholds scaled to two hours of data, `for: 0s` for the deployment's alert and 1m for
the kernel alerts it holds back; grouping, group_wait and inhibition unchanged from the generator:
`routing.alertmanager_config`). Expected: WarpwatchOccupancyRegressed once, for llm;
WarpwatchKernelOccupancyRegressed for each of the 50 kernels of llm, all held back by the
inhibition; one webhook notification in all.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from support.agent import free_port
from support.patience import hang_guard
from support.prometheus import PROMETHEUS, prometheus
from support.promfleet import backfill_recording_tiers, create_blocks, openmetrics
from warpwatch.dashboards import rules
from warpwatch.dashboards.queries import GROUPS_RECORDING
from warpwatch.dashboards.routing import alertmanager_config
from warpwatch.dashboards.settings import Settings
from warpwatch.export import metricdefs as md

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
KERNELS = 50
STEP = 60.0
MINUTES = 120
DROP_AT = 100
SETTINGS = Settings(
    rule_interval="5s",
    degraded_window="10m",
    degraded_baseline_window="1h",
    degraded_baseline_offset="20m",
    degraded_min_samples=30,
    degraded_for="0s",
    degraded_min_time_share=0.01,
    inhibit_margin="1m",
)
"""The kernel alert waits `inhibit_margin` longer than the deployment's alert (as generated: 5m)."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(ALERTMANAGER).exists() or not Path(PROMETHEUS).exists(),
        reason="needs Debian's prometheus and prometheus-alertmanager",
    ),
]


def raw_series(end: float) -> str:
    start = end - MINUTES * STEP
    times = [start + i * STEP for i in range(MINUTES + 1)]
    fams: dict[str, tuple[str, list[Any]]] = {}

    def counter(metric: md.MetricDef, labels: dict[str, str], per_step: list[float]) -> None:
        total, points = 0.0, []
        for t, inc in zip(times, [0.0, *per_step], strict=True):
            total += inc
            points.append((t, total))
        fams.setdefault(metric.name, ("counter", []))[1].append((md.exposed_name(metric), labels, points))

    for deployment, faulty in (("llm", True), ("steady", False)):
        gpu = {
            "namespace": "ml",
            "deployment": deployment,
            "pod": f"{deployment}-0",
            "gpu": "0",
            "job": "warpwatch",
            "instance": f"{deployment}-0:9946",
        }
        per_kernel = 0.015 * STEP
        counter(md.GPU_OBSERVED_SECONDS, gpu, [STEP] * MINUTES)
        counter(md.GPU_BUSY_SECONDS, gpu, [KERNELS * per_kernel] * MINUTES)
        for k in range(KERNELS):
            labels = {**gpu, "kernel": f"kernel_{k:02d}"}
            occ = [0.5 * (0.4 if faulty and i >= DROP_AT else 1.0) for i in range(MINUTES)]
            counter(md.KERNEL_SECONDS, labels, [per_kernel] * MINUTES)
            counter(md.KERNEL_THEORETICAL_OCCUPANCY_SECONDS, labels, [per_kernel * o for o in occ])
            counter(md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS, labels, [per_kernel * o for o in occ])
    return openmetrics(fams)


class Receiver(http.server.BaseHTTPRequestHandler):
    notifications: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.notifications.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_one_build_that_regresses_50_kernels_is_one_notification(tmp_path: Path) -> None:
    end = float(int(time.time() // STEP) * STEP)
    data = tmp_path / "data"
    create_blocks(raw_series(end), data, tmp_path)
    groups = rules.prometheus_groups(SETTINGS)
    backfill_recording_tiers(data, groups, end - MINUTES * STEP, end)
    # The alert groups live; the tiers only backfilled: live recording over raw data that ends now
    # would add records that thin out minute by minute, and make the alerts flap.
    rule_file = tmp_path / "warpwatch-alerts.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [g for g in groups if g["name"] not in GROUPS_RECORDING]}))

    Receiver.notifications.clear()  # this test's only, whatever ran before it
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    am_config = alertmanager_config(SETTINGS, f"http://127.0.0.1:{server.server_address[1]}/")
    # group_wait as generated (30 s): the GPU alert may come one evaluation after its kernels'; the
    # inhibition holds them back if it arrives within group_wait.
    (tmp_path / "am.yml").write_text(yaml.safe_dump(am_config))
    am_port, cluster_port = free_port(), free_port()
    am_log = (tmp_path / "am.log").open("w")
    am = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={tmp_path / 'am.yml'}",
            f"--storage.path={tmp_path / 'am'}",
            f"--web.listen-address=127.0.0.1:{am_port}",
            f"--cluster.listen-address=127.0.0.1:{cluster_port}",
        ],
        stdout=am_log,
        stderr=subprocess.STDOUT,
    )
    alerting = f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['127.0.0.1:{am_port}']\n"
    try:
        with prometheus(data, alerting, [rule_file]):
            deadline = time.monotonic() + hang_guard(240)
            held: list[dict[str, Any]] = []
            while sum(a["labels"]["alertname"] == "WarpwatchKernelOccupancyRegressed" for a in held) < KERNELS:
                assert time.monotonic() < deadline, held
                time.sleep(2)
                with urllib.request.urlopen(f"http://127.0.0.1:{am_port}/api/v2/alerts", timeout=10) as resp:
                    held = json.loads(resp.read())
            time.sleep(35)  # a group of the kernel alerts would have flushed within group_wait
            with urllib.request.urlopen(f"http://127.0.0.1:{am_port}/api/v2/alerts", timeout=10) as resp:
                held = json.loads(resp.read())
    finally:
        am.terminate()
        am.wait(30)
        am_log.close()
        server.shutdown()
    summary = [(n["status"], n["groupLabels"], len(n["alerts"])) for n in Receiver.notifications]
    assert len(Receiver.notifications) == 1, summary
    (note,) = Receiver.notifications
    assert note["groupLabels"] == {"alertname": "WarpwatchOccupancyRegressed", "namespace": "ml", "deployment": "llm"}
    (alert,) = note["alerts"]
    assert alert["labels"]["deployment"] == "llm" and "kernel" not in alert["labels"]
    kernels = [a for a in held if a["labels"]["alertname"] == "WarpwatchKernelOccupancyRegressed"]
    assert sorted(a["labels"]["kernel"] for a in kernels) == [f"kernel_{k:02d}" for k in range(KERNELS)]
    assert {a["labels"]["deployment"] for a in kernels} == {"llm"}
    assert all(a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"] for a in kernels)
    assert not [a for a in held if a["labels"].get("deployment") == "steady"]


def test_the_generated_alertmanager_config_passes_amtool(tmp_path: Path) -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool is not installed (Debian package prometheus-alertmanager)")
    path = tmp_path / "am.yml"
    path.write_text(yaml.safe_dump(alertmanager_config(dataclasses.replace(SETTINGS))))
    result = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
