"""Issue 24, past one Prometheus: two Prometheus shards (hashmod relabelling on the target) scrape
the pods and evaluate the per-pod tier (`warpwatch-pod`); a global Prometheus federates the shards'
`pod_gpu:` / `pod_kernel:` records and evaluates the fleet tier (`warpwatch-fleet`). A single
Prometheus scraping every pod and evaluating both tiers is the reference: the fleet panels' queries
give the same answers on both.

The targets: 6 pods of 2 deployments, each serving counters that grow at constant, distinct rates
(value = rate x seconds since the test began), so every rate is exact whenever it is read.
"""

from __future__ import annotations

import http.server
import re
import threading
import time
from pathlib import Path

import pytest
import yaml

from support.patience import hang_guard
from support.prometheus import PROMETHEUS, prometheus
from support.promfleet import query
from warpwatch.dashboards import rules
from warpwatch.dashboards.boards import all_queries
from warpwatch.dashboards.panels import substitute_variables
from warpwatch.dashboards.settings import Settings
from warpwatch.export import metricdefs as md

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path(PROMETHEUS).exists(), reason="needs prometheus")]
PODS = 6
KERNELS = ("gemm", "attn", "other")
SETTINGS = Settings(rule_interval="2s", capture_period="4s", recording_window="10s")
"""A short rate range, so that within seconds every series is longer than it and each rate exact (a
rate over a range longer than its series reads low, by how much depends on the scrape phase)."""
T0 = time.time()


def body(pod: int) -> str:
    """Each sample stamped with the moment its value was computed: a scrape's own timestamp is when
    Prometheus began it, up to a scheduling delay earlier (measured under stress-ng: up to 1.6e-3 of
    a 10-s rate in one evaluation)."""
    now_ms = int(time.time() * 1000)
    t = now_ms / 1000 - T0
    own = f'namespace="ml",deployment="model-{pod % 2}",pod="model-{pod % 2}-{pod}"'
    lines = []
    for gpu in range(2):
        g = f'{own},gpu="{gpu}"'
        lines.append(f"{md.exposed_name(md.GPU_OBSERVED_SECONDS)}{{{g}}} {t * (1 + pod % 3) / 3} {now_ms}")
        lines.append(f"{md.exposed_name(md.GPU_BUSY_SECONDS)}{{{g}}} {t * (pod + 1) / 10} {now_ms}")
        for k, kernel in enumerate(KERNELS):
            kg = f'{g},kernel="{kernel}"'
            seconds = t * (k + 1) * (pod + 1) / 40
            lines.append(f"{md.exposed_name(md.KERNEL_SECONDS)}{{{kg}}} {seconds} {now_ms}")
            lines.append(
                f"{md.exposed_name(md.KERNEL_ESTIMATED_OCCUPANCY_SECONDS)}{{{kg}}} "
                f"{seconds * (0.2 + 0.1 * k + 0.05 * gpu)} {now_ms}"
            )
    return "\n".join(lines) + "\n"


class Targets(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        data = body(int(re.sub(r"\D", "", self.path))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


def scrape_config(port: int, shard: int | None) -> str:
    """One job over every pod (path /pod/N, instance podN: an `up` series each); `shard` keeps the
    pods whose hash mod 2 is it."""
    relabel = (
        ""
        if shard is None
        else (
            "    relabel_configs:\n"
            "      - source_labels: [__metrics_path__]\n        modulus: 2\n        target_label: __tmp_hash\n"
            "        action: hashmod\n"
            f"      - source_labels: [__tmp_hash]\n        regex: '{shard}'\n        action: keep\n"
        )
    )
    jobs = "".join(
        f"      - targets: ['127.0.0.1:{port}']\n        labels: {{__metrics_path__: /pod/{i}, instance: pod{i}}}\n"
        for i in range(PODS)
    )
    return (
        f"  scrape_interval: 2s\nscrape_configs:\n  - job_name: warpwatch\n    honor_labels: true\n"
        f"    static_configs:\n{jobs}{relabel}"
    )


def federate_config(shards: list[str]) -> str:
    targets = ", ".join(f"'{u.removeprefix('http://')}'" for u in shards)
    return (
        "  scrape_interval: 2s\nscrape_configs:\n  - job_name: federate\n    honor_labels: true\n"
        "    metrics_path: /federate\n    params:\n      'match[]': ['{__name__=~\"pod_gpu:.+|pod_kernel:.+\"}']\n"
        f"    static_configs:\n      - targets: [{targets}]\n"
    )


def test_two_shards_and_a_federating_global_tier_answer_the_fleet_panels_like_one_prometheus(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Targets)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        compare_tiers(tmp_path, server.server_address[1])
    finally:  # a thread left running would keep later tests from forking (membudget.may_fork)
        server.shutdown()
        server.server_close()
        serving.join()


def compare_tiers(tmp_path: Path, port: int) -> None:
    groups = rules.prometheus_groups(SETTINGS)
    files = {}
    for name, keep in (("all", None), ("pod", {"warpwatch-pod"}), ("fleet", {"warpwatch-fleet"})):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"groups": [g for g in groups if keep is None or g["name"] in keep]}))
        files[name] = path
    # $__range: the last 20 s (see FULL_AFTER_S)
    fleet_panels = [
        (w, substitute_variables(e.replace("$__range", "20s")))
        for w, e in all_queries(SETTINGS, substitute=False)
        if w.startswith("dashboard:warpwatch-fleet/")
    ]
    assert len(fleet_panels) == 5
    with (
        prometheus(tmp_path / "single" / "data", scrape_config(port, None), [files["all"]]) as (single, _),
        prometheus(tmp_path / "s0" / "data", scrape_config(port, 0), [files["pod"]]) as (s0, _),
        prometheus(tmp_path / "s1" / "data", scrape_config(port, 1), [files["pod"]]) as (s1, _),
        prometheus(tmp_path / "global" / "data", federate_config([s0, s1]), [files["fleet"]]) as (glob, _),
    ):
        at = wait_for_full_ranges([single, glob], [single, s0, s1, glob])
        pods = [
            len(query(u, "count by (pod) (warpwatch_gpu_observed_seconds_total)", at)["data"]["result"])
            for u in (s0, s1)
        ]
        assert sum(pods) == PODS and min(pods) > 0, pods  # each shard scrapes some pods, together all
        for where, expr in fleet_panels:
            ref = answers(query(single, expr, at))
            got = answers(query(glob, expr, at))
            assert ref and set(got) == set(ref), where
            for key, value in ref.items():
                # every sample exact (stamped when computed), every range full: both tiers sum the
                # same rates in another order (pod records measured within 3e-8 of the truth under load)
                assert got[key] == pytest.approx(value, rel=1e-6), (where, key)


RECORDS = "fleet:warpwatch_gpu_observed_seconds_total:rate10s[5m]"
FULL_AFTER_S = 20 + 10 + 2
"""The panels' range (20 s), the records' rate range (10 s), a scrape: fleet records that old were
computed from pod records whose rate ranges held the raw series whole (a rate over a series
younger than its range reads low)."""


CLEAN_S = FULL_AFTER_S + 10
"""How far back a panel's answer reaches into the scrapes: its range, the records' rate range, and
the fleet records' own (pod records over 10 s)."""


def wait_for_full_ranges(urls: list[str], scrapers: list[str]) -> float:
    """Waits until each Prometheus's first fleet record is `FULL_AFTER_S` old and every scrape of
    the last `CLEAN_S` succeeded on each of `scrapers`; returns the moment to query at. A scrape
    that failed (a loaded machine: the 2-s timeout passed, issue 38) ends its series for a moment
    in one tier only, and the tiers then rightly differ: the comparison waits for a span where
    every tier saw every scrape."""
    deadline = time.monotonic() + hang_guard(60)
    while True:
        at = time.time()
        firsts = [[float(r["values"][0][0]) for r in query(u, RECORDS, at)["data"]["result"]] or [at] for u in urls]
        ups = [
            [float(r["value"][1]) for r in query(u, f"min_over_time(up[{CLEAN_S}s])", at)["data"]["result"]]
            for u in scrapers
        ]
        if all(max(f) <= at - FULL_AFTER_S for f in firsts) and all(up and min(up) == 1 for up in ups):
            return at
        assert time.monotonic() < deadline, (firsts, ups)
        time.sleep(2)


def answers(body: dict[str, object]) -> dict[tuple[tuple[str, str], ...], float]:
    result = body["data"]["result"]  # type: ignore[index]
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}  # type: ignore[union-attr]
