"""Prometheus memory per series (issue 24): a real Prometheus scrapes PODS synthetic targets that
serve the real agent's /metrics (copied to 8 GPUs per pod, values advancing every scrape), for
MINUTES minutes; prints head series, Prometheus' PSS, and the bytes per series above an idle
Prometheus' PSS.

    python benchmarks/prom_memory.py --pods 60 --minutes 4 [--old]
"""

from __future__ import annotations

import argparse
import http.server
import json
import re
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from fleet import GPUS, SAMPLE, agent_metrics, pss  # noqa: E402

from support.prometheus import prometheus  # noqa: E402


def pod_body(exposition: str, pod: int, tick: int) -> str:
    out = []
    for line in exposition.splitlines():
        m = SAMPLE.match(line)
        if not m or not m.group(1).startswith("warpwatch_"):
            continue
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(3))
        if 'gpu="' in labels and 'gpu="0"' not in labels:
            continue
        v = value * (tick + 1) if name.endswith(("_total", "_count", "_sum", "_bucket")) else value
        own = f'namespace="fleet",deployment="model-{pod % 5}",pod="model-{pod % 5}-{pod}"'
        for g in range(GPUS) if 'gpu="0"' in labels else (None,):
            lab = labels.replace('gpu="0"', f'gpu="{g}"') if g is not None else labels
            out.append(f"{name}{{{own}{',' + lab if lab else ''}}} {v!r}")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=60)
    parser.add_argument("--minutes", type=float, default=4)
    parser.add_argument("--old", action="store_true", help="f2305fe's exposition (--kernel-gauges, top 50)")
    args = parser.parse_args()
    exposition = agent_metrics(args.old)
    ticks: dict[int, int] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            pod = int(re.sub(r"\D", "", self.path) or 0)
            ticks[pod] = ticks.get(pod, 0) + 1
            body = pod_body(exposition, pod, ticks[pod]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    with tempfile.TemporaryDirectory(prefix="warpwatch-prommem-") as tmp:
        data = Path(tmp) / "idle"
        with prometheus(data) as (_, proc):
            time.sleep(20)
            idle = pss(proc.pid)
        jobs = "".join(
            f"  - job_name: pod{i}\n    honor_labels: true\n    metrics_path: /pod/{i}\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            for i in range(args.pods)
        )
        config = "  scrape_interval: 15s\nscrape_configs:\n" + jobs
        with prometheus(Path(tmp) / "data", config) as (url, proc):
            time.sleep(args.minutes * 60)
            with urllib.request.urlopen(f"{url}/api/v1/status/tsdb", timeout=60) as resp:
                head = int(json.loads(resp.read())["data"]["headStats"]["numSeries"])
            mem = pss(proc.pid)
    server.shutdown()
    per = (mem - idle) / head
    print(
        f"{'old' if args.old else 'new'} exposition, {args.pods} pods x {GPUS} GPUs, {args.minutes:g} min at 15 s: "
        f"head series {head:,}, Prometheus PSS {mem / 2**20:.0f} MiB (idle {idle / 2**20:.0f} MiB), "
        f"{per:,.0f} bytes per series"
    )


if __name__ == "__main__":
    main()
