"""Fleet benchmark (issue 24): the dashboards' and rules' queries over a synthetic fleet, old design
(f2305fe's generator and exposition) beside the new one, on a real Prometheus.

1. The real agent replays a real trace (HTA's rank0, 85 kernels) and its /metrics is read: at its
   defaults (new), and with `--kernel-gauges --top-kernels 50` (f2305fe's exposition, family for
   family).
2. Each exposition is copied into PODS pods x 8 GPUs (labels namespace, deployment, pod, as the
   chart's ServiceMonitor attaches them), one sample a minute over HOURS hours (counters grow by their
   scraped value every minute), written as OpenMetrics and turned into blocks by `promtool tsdb
   create-blocks-from openmetrics`.
3. The recording rules are backfilled (`promtool tsdb create-blocks-from rules`; new: tier by tier).
4. Every dashboard query (variables: f2305fe's All; the new boards one pod, the first item, which the
   boards opened on before issue 47 and which a user picks on a large fleet) runs
   as Grafana would (range queries at the panel's step, `$__range` tables as instant queries), and
   every rule expression as an instant query, through the HTTP API with `stats=all`.

Prints per query: samples touched (`totalQueryableSamples`, the stable figure), wall time, errors;
per design: series, Prometheus' peak PSS. `run()` is also what tests/dashboards/test_fleet_bench.py calls.

    python benchmarks/fleet.py --pods 20 --hours 6
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.prometheus import prometheus  # noqa: E402
from support.promfleet import backfill_rules, create_blocks, query  # noqa: E402

OLD = "f2305fe"
TRACE = Path(os.environ.get("WARPWATCH_SHARED_TRACES", ROOT.parent / "shared" / "traces")) / (
    "facebookresearch__HolisticTraceAnalysis/tests/data/negative_queue_length_values_check/rank0.json.gz"
)
GPUS = 8
STEP = 60
SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$")


def agent_metrics(old: bool) -> str:
    """The real agent's /metrics after a few rounds on the trace: at its defaults, or (old) with
    support.agent.GAUGES_ENV (`--kernel-gauges`, top 50: f2305fe's exposition)."""
    from support.agent import Agent

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
        defaults=not old,
    )
    try:
        time.sleep(8)
        return agent.get("/metrics")[2].decode()
    finally:
        agent.stop()


def fleet_openmetrics(exposition: str, pods: int, hours: float, end: float, out: Path) -> None:
    """The exposition's warpwatch_* series copied into `pods` pods x 8 GPUs, a sample a minute,
    written to `out` family by family (streamed: a fleet does not fit in memory as text)."""
    types: dict[str, str] = {}
    rows: list[tuple[str, str, float]] = []
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, fam, kind = line.split(" ", 3)
            types[fam] = kind
        elif line and not line.startswith("#") and (m := SAMPLE.match(line)) and m.group(1).startswith("warpwatch_"):
            labels = m.group(2) or ""
            if 'gpu="' in labels and 'gpu="0"' not in labels:
                continue
            rows.append((m.group(1), labels, float(m.group(3))))
    steps = int(hours * 3600 / STEP)
    times = [f"{end - (steps - i) * STEP:.0f}" for i in range(steps + 1)]
    by_family: dict[str, list[tuple[str, str, float]]] = {}
    for name, labels, value in rows:
        fam = next((f for f in (name.removesuffix("_total"), name.rsplit("_", 1)[0], name) if f in types), name)
        by_family.setdefault(fam, []).append((name, labels, value))
    with out.open("w") as f:
        for fam, members in by_family.items():
            # a histogram's series are written as plain gauges and counters (promtool keeps their names)
            f.write(f"# TYPE {fam} {'counter' if types.get(fam) == 'counter' else 'gauge'}\n")
            for name, labels, value in members:
                counter = name.endswith(("_total", "_count", "_sum", "_bucket"))
                for p in range(pods):
                    pod = (
                        f'namespace="fleet",deployment="model-{p % 5}",pod="model-{p % 5}-{p}",'
                        f'instance="10.0.{p // 250}.{p % 250}:9946"'
                    )
                    for g in range(GPUS) if 'gpu="0"' in labels else (None,):
                        lab = labels.replace('gpu="0"', f'gpu="{g}"') if g is not None else labels
                        sel = f"{name}{{{pod}{',' + lab if lab else ''}}}"
                        f.writelines(
                            f"{sel} {value * (i + 1) if counter else value!r} {t}\n" for i, t in enumerate(times)
                        )
        f.write("# EOF\n")


def design_queries(old: bool, work: Path) -> tuple[list[tuple[str, str]], list[dict[str, Any]], str]:
    """(where, expr) unsubstituted, the recording groups, and the panels' min step of a design."""
    code = (
        "import json,sys; from warpwatch.dashboards.boards import all_queries; "
        "from warpwatch.dashboards.rules import prometheus_groups; from warpwatch.dashboards import settings; "
        "s=settings.DEFAULT_SETTINGS; print(json.dumps([all_queries(substitute=False), prometheus_groups(s), "
        "getattr(s, 'min_interval', '30s')]))"
    )
    path = ROOT / "agent"
    if old:
        path = work / "old" / "agent"
        if not path.exists():
            (work / "old").mkdir(exist_ok=True)
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD, "agent"], capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(work / "old")], input=archive.stdout, check=True)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(path)},
    )
    queries, groups, step = json.loads(out.stdout)
    return [tuple(q) for q in queries], [g for g in groups if any("record" in r for r in g["rules"])], step


def passes(rules: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Recording rules in backfill passes: a rule after every rule whose record it reads (promtool
    backfills one pass from what is already stored)."""
    done: set[str] = set()
    out = []
    left = list(rules)
    while left:
        ready = [
            r for r in left if not any(o["record"] in r["expr"] and o["record"] not in done for o in left if o is not r)
        ]
        out.append(ready)
        done |= {r["record"] for r in ready}
        left = [r for r in left if r not in ready]
    return out


def regex_value(value: str) -> str:
    """A variable's value as Grafana puts it into `=~"..."`: regex-escaped, then PromQL-string-escaped."""
    escaped = re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", value)
    return escaped.replace("\\", "\\\\").replace('"', '\\"')


def substitute(expr: str, values: Mapping[str, str]) -> str:
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(name, values[name])
    return expr


def pss(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next(int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith("Pss:"))


def run_design(old: bool, pods: int, hours: float, work: Path, end: float) -> dict[str, Any]:
    exposition = agent_metrics(old)
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    source = work / "fleet.om"
    fleet_openmetrics(exposition, pods, hours, end, source)
    create_blocks(source, data, work)
    queries, groups, step = design_queries(old, work)
    tiers = []
    for i, rules in enumerate(passes([r for g in groups for r in g["rules"] if "record" in r])):
        path = work / f"{'old' if old else 'new'}-pass{i}.yaml"
        path.write_text(json.dumps({"groups": [{"name": f"pass{i}", "interval": "60s", "rules": rules}]}))
        tiers.append(path)
    backfill_rules(data, tiers, end - hours * 3600, end)
    range_s = int(hours * 3600)
    values = {
        "$__rate_interval": "2m" if old else "2m30s",
        "$__interval": "1m" if old else step,
        "$__range": f"{range_s}s",
        "$namespace": ".*" if old else "fleet",
        "$deployment": "model-0",
        "$pod": ".*" if old else "model-0-0",
        "$gpu": ".*" if old else "0",
        "$kernel": ".*",
    }
    step_s = 30 if old else int(step.rstrip("m")) * 60
    rows = []
    peak = 0
    with prometheus(data, flags=("--query.max-samples=50000000",)) as (url, proc):
        if not old:  # the kernel picker's first item, as Grafana's label-values call returns it
            kernels = query(url, 'group by (kernel) (warpwatch_kernel_seconds_total{pod="model-0-0", gpu="0"})', end)
            values["$kernel"] = regex_value(sorted(r["metric"]["kernel"] for r in kernels["data"]["result"])[0])
        series = int(query(url, 'count({__name__=~"warpwatch_.+"})', end)["data"]["result"][0]["value"][1])
        for where, raw in queries:
            expr = substitute(raw, values)
            if where.startswith("variable:"):
                expr = f"group by ({where.rsplit('/', 1)[1]}) ({expr})"
            instant = not where.startswith("dashboard:") or "$__range" in raw
            params = {"stats": "all"}
            t0 = time.monotonic()
            try:
                if instant:
                    body = query(url, expr, end, **params)
                else:
                    body = range_query(url, expr, end - range_s, end, step_s)
                error = ""
            except urllib.error.HTTPError as exc:
                body, error = {}, json.loads(exc.read()).get("error", str(exc))[:80]
            elapsed = time.monotonic() - t0
            peak = max(peak, pss(proc.pid))
            stats = body.get("data", {}).get("stats", {}).get("samples", {})
            rows.append(
                {"where": where, "samples": stats.get("totalQueryableSamples"), "seconds": elapsed, "error": error}
            )
        peak = max(peak, pss(proc.pid))
    return {"rows": rows, "series": series, "peak_pss": peak, "series_per_gpu": series / (pods * GPUS)}


def range_query(url: str, expr: str, start: float, end: float, step: int) -> dict[str, Any]:
    data = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step, "stats": "all"})
    with urllib.request.urlopen(f"{url}/api/v1/query_range", data=data.encode(), timeout=600) as resp:
        body: dict[str, Any] = json.loads(resp.read())
    return body


def run(pods: int, hours: float, work: Path, designs: tuple[str, ...] = ("old", "new")) -> dict[str, dict[str, Any]]:
    end = float(int(time.time() // 3600) * 3600)
    return {d: run_design(d == "old", pods, hours, work / d, end) for d in designs}


def report(result: Mapping[str, Mapping[str, Any]], pods: int, hours: float) -> str:
    out = [f"fleet: {pods} pods x {GPUS} GPUs, {hours:g} h at 60 s", ""]
    for name in result:
        r = result[name]
        samples = [x["samples"] or 0 for x in r["rows"]]
        out.append(
            f"{name}: {r['series']} series ({r['series_per_gpu']:.0f} per GPU), {len(r['rows'])} queries, "
            f"{sum(1 for x in r['rows'] if x['error'])} errors, samples touched max {max(samples):,} "
            f"total {sum(samples):,}, slowest {max(x['seconds'] for x in r['rows']):.2f} s, "
            f"Prometheus peak PSS {r['peak_pss'] / 2**20:.0f} MiB"
        )
    out.append("")
    for name in result:
        out.append(f"| {name} query | samples touched | seconds | error |")
        out.append("|---|---:|---:|---|")
        out.extend(
            f"| {x['where'][:90]} | {x['samples'] if x['samples'] is not None else '-'} | "
            f"{x['seconds']:.3f} | {x['error']} |"
            for x in result[name]["rows"]
        )
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=20)
    parser.add_argument("--hours", type=float, default=6)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--designs", default="old,new", help="old,new (default), or one of them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="warpwatch-fleet-") as tmp:
        result = run(args.pods, args.hours, Path(tmp), tuple(args.designs.split(",")))
    print(report(result, args.pods, args.hours))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
