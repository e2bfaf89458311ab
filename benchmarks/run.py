"""Trace readers side by side: `python benchmarks/run.py` (one command; writes benchmarks/README.md).

Each reader runs in its own process, `--repeat` times per trace; for each we keep the wall time
(best and median) and the peak PSS summed over the reader's whole process tree, sampled every
20 ms from /proc (what a cgroup is charged for the processes, shared pages counted once: warpwatch
decodes in worker processes, which a parent's ru_maxrss does not see). The peak RSS of the
largest single process (`wait4` rusage, as /usr/bin/time -v reports it) is shown beside it.

Readers (see readers.py):
- `warpwatch analyze --format json TRACE`: the CLI as a user runs it (all spec fields, window
  corrections), decoding on every core;
- the same through `read_trace` + `analyze` without the CLI, and in one process;
- msgspec typed decode + a loop that sums warps per SM per kernel (the plain-Python floor);
- orjson.loads + the same loop;
- HolisticTraceAnalysis's trace parser (json backend, its default).

HTA and orjson are not project dependencies: they are installed into benchmarks/.venv-hta,
which this script creates (`pip install holistictraceanalysis orjson`). Traces come from
gen_traces.py (run on demand): the reference file (HTA's df_index_resolver trace x 10) in both
layouts (one event per line, as Kineto writes it, and its one-line twin, as `json.dump` writes
it), each plain and gzip-compressed; with `--sizes`, also the 50 MB / 500 MB / 1 GB files.

The runs are interleaved: round after round, every reader once on every trace, so that a change
in the machine's load between rounds (it is shared) falls on all of them alike; ratios against
the msgspec floor of the same trace are the figure. A summary table puts the layouts side by
side. `--baseline DIR` adds `warpwatch analyze` from another checkout (built in place:
`python setup.py build_ext --inplace` there) as readers of their own, for before/after figures.

    python benchmarks/run.py                   # the reference file x 2 layouts x plain/gzip, 5 runs each (HTA: 1)
    python benchmarks/run.py --sizes           # also 50 MB, 500 MB and 1 GB
    python benchmarks/run.py --no-readme TRACE...
    python benchmarks/run.py --baseline ../old-checkout --only warpwatch base msgspec
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROJECT_PY = ROOT / ".venv" / "bin" / "python"
BENCH_VENV = HERE / ".venv-hta"
BENCH_PY = BENCH_VENV / "bin" / "python"
HTA_REQUIREMENTS = ["holistictraceanalysis==0.5.0", "orjson"]
README = HERE / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"

sys.path.insert(0, str(HERE))
import gen_traces  # noqa: E402 (benchmarks/ is not a package)
import proctree  # noqa: E402


@dataclass
class Reader:
    key: str
    label: str
    python: Path
    argv: list[str]
    repeat_cap: int | None = None
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    reader: Reader
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    rss_kb: int = 0
    pss_kb: int = 0
    output: str = ""
    error: str = ""


def readers(python: Path, cli_ok: bool, baseline: Path | None = None) -> list[Reader]:
    script = str(HERE / "readers.py")
    cli = ["-m", "warpwatch", "analyze", "--format", "json"] if cli_ok else [script, "warpwatch-report"]
    base: list[Reader] = []
    if baseline is not None:
        agent = {"PYTHONPATH": str(baseline.resolve() / "agent")}
        base = [
            Reader("base", f"warpwatch analyze --format json at {baseline.name}", python, cli, env=agent),
            Reader(
                "base-pure",
                f"the same at {baseline.name}, pure Python",
                python,
                cli,
                env={**agent, "WARPWATCH_PURE_PYTHON": "1"},
            ),
        ]
    return [
        *base,
        Reader("warpwatch", "warpwatch analyze --format json", python, cli),
        Reader(
            "warpwatch-pure",
            "warpwatch analyze --format json, pure Python (no compiled module)",
            python,
            cli,
            env={"WARPWATCH_PURE_PYTHON": "1"},
        ),
        Reader("warpwatch-api", "warpwatch via read_trace + analyze", python, [script, "warpwatch-api"]),
        Reader(
            "warpwatch-1proc",
            "warpwatch via read_trace + analyze, one process (the agent's path)",
            python,
            [script, "warpwatch-1proc"],
        ),
        Reader("msgspec", "msgspec typed decode + loop", python, [script, "msgspec-loop"]),
        Reader("orjson", "orjson.loads + loop", BENCH_PY, [script, "orjson-loop"]),
        Reader("hta", "HTA 0.5.0 trace parser (json backend)", BENCH_PY, [script, "hta"], repeat_cap=1),
    ]


def ensure_bench_venv() -> str:
    """Create benchmarks/.venv-hta with HTA and orjson; '' when ready, else why not."""
    if BENCH_PY.exists():
        probe = subprocess.run([str(BENCH_PY), "-c", "import hta, orjson"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
        subprocess.run(
            [str(BENCH_PY), "-m", "pip", "install", "-q", *HTA_REQUIREMENTS], check=True, capture_output=True, text=True
        )
    except subprocess.CalledProcessError as exc:
        return f"pip install {' '.join(HTA_REQUIREMENTS)} failed: {(exc.stderr or '').strip()[-400:]}"
    return ""


def run_once(reader: Reader, trace: Path, *, memory: bool) -> tuple[float, float, int, int, str, str]:
    """`reader` on `trace` in a process of its own, measured (`proctree.measure`): (wall s, CPU s of
    the process tree, peak RSS of the largest process in kB, peak tree PSS in kB -- 0 unless
    `memory` --, stdout, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "agent"), **reader.env}
    return proctree.measure([str(reader.python), *reader.argv, str(trace)], env, memory=memory)


def summary_of(reader: Reader, out: str) -> str:
    """What the reader found (kernels...), to check that the readers agree."""
    if reader.key in ("warpwatch", "warpwatch-pure", "base", "base-pure") and out.lstrip().startswith('{"traces'):
        try:
            doc = json.loads(out)
            return f"{doc['traces'][0]['launch_count']:,} kernels"
        except (ValueError, KeyError, IndexError):
            return "?"
    try:
        doc = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return "?"
    found = f"{doc.get('kernels', 0):,} kernels"
    if "in_process_s" in doc:  # the agent's cost of one window: read + analyze, imports excluded
        found += f"; read + analyze in the process: {doc['in_process_s']:.2f} s"
    return found


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            m = re.search(r"^model name\s*:\s*(.+)$", fh.read(), re.M)
            cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as fh:
            mem_kb = int(re.search(r"MemTotal:\s+(\d+)", fh.read()).group(1))  # type: ignore[union-attr]
    except (OSError, AttributeError):
        mem_kb = 0
    versions = subprocess.run(
        [str(PROJECT_PY), "-c", "import msgspec, platform; print(platform.python_version(), msgspec.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.split()
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem_kb / 1024**2:.0f} GiB RAM, Linux {platform.release()}; "
        f"Python {versions[0] if versions else '?'}, msgspec {versions[1] if len(versions) > 1 else '?'}"
    )


def cli_works(python: Path) -> bool:
    probe = subprocess.run([str(python), "-m", "warpwatch", "analyze", "--help"], capture_output=True, text=True)
    return probe.returncode == 0


def fmt_mb(kb: int) -> str:
    return f"{kb / 1024:,.0f} MB" if kb else "-"


def table(trace: Path, results: list[Result]) -> str:
    floor = next((r for r in results if r.reader.key == "msgspec" and r.walls), None)
    size = trace.stat().st_size
    lines = [
        f"**{trace.name}** ({size / 1e6:,.0f} MB)",
        "",
        "| reader | wall, best | wall, median | CPU, best (process tree) | runs | peak PSS, process tree "
        "| peak RSS, largest process | wall vs msgspec floor | CPU vs msgspec floor | PSS vs msgspec floor | found |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for r in results:
        if not r.walls:
            lines.append(f"| {r.reader.label} | failed | | | | | | | | | {r.error} |")
            continue
        best, median = min(r.walls), statistics.median(r.walls)
        ratio = f"{best / min(floor.walls):.2f}x" if floor else "-"
        cpu_ratio = f"{min(r.cpus) / min(floor.cpus):.2f}x" if floor and min(floor.cpus) > 0 else "-"
        mem_ratio = f"{r.pss_kb / floor.pss_kb:.2f}x" if floor and floor.pss_kb else "-"
        lines.append(
            f"| {r.reader.label} | {best:.2f} s | {median:.2f} s | {min(r.cpus):.2f} s | {len(r.walls)} "
            f"| {fmt_mb(r.pss_kb)} | {fmt_mb(r.rss_kb)} | {ratio} | {cpu_ratio} | {mem_ratio} | {r.output} |"
        )
    return "\n".join(lines)


def layout_of(trace: Path) -> str:
    """'one event per line' or 'one line': is there a newline between the first two events?"""
    import gzip

    opener = gzip.open if trace.name.endswith(".gz") else open
    with opener(trace, "rb") as fh:
        start = fh.read(4 * 1024**2)
    key = start.find(b'"traceEvents"')
    cut = re.search(rb"\}\s*,\s*\{", start[max(key, 0) :])
    return "one event per line" if cut and b"\n" in cut.group() else "one line"


SUMMARY_KEYS = ("warpwatch", "warpwatch-pure", "base", "base-pure", "hta")


def summary(traces: list[Path], sections: list[list[Result]]) -> str:
    """The layouts side by side: per trace, warpwatch (and the others) against the floor of that trace."""
    present = [k for k in SUMMARY_KEYS if any(r.reader.key == k and r.walls for rs in sections for r in rs)]
    labels = {r.reader.key: r.reader.label for rs in sections for r in rs}
    head = (
        "| trace | layout | gzip | msgspec floor, best | "
        + " | ".join(f"{labels[k]}: best, vs floor, peak PSS" for k in present)
        + " |"
    )
    lines = [head, "|---|---|---|--:|" + "--:|" * len(present)]
    for trace, results in zip(traces, sections, strict=True):
        by_key = {r.reader.key: r for r in results}
        floor = by_key.get("msgspec")
        base = min(floor.walls) if floor and floor.walls else None
        cells = [
            trace.name,
            layout_of(trace),
            "yes" if trace.name.endswith(".gz") else "no",
            f"{base:.2f} s" if base else "-",
        ]
        for k in present:
            r = by_key.get(k)
            if r is None or not r.walls:
                cells.append("-" if r is None else "failed")
                continue
            ratio = f"**{min(r.walls) / base:.2f}x**" if base else "-"
            cells.append(f"{min(r.walls):.2f} s, {ratio}, {fmt_mb(r.pss_kb)}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="*", type=Path, help="trace files (default: the reference file, both layouts)")
    p.add_argument("--sizes", action="store_true", help="also the 50 MB, 500 MB and 1 GB traces (built if missing)")
    p.add_argument("--repeat", type=int, default=5, help="runs per reader and trace (HTA: 1)")
    p.add_argument(
        "--only",
        nargs="*",
        help="reader keys (warpwatch warpwatch-pure warpwatch-api warpwatch-1proc "
        "msgspec orjson hta; base base-pure with --baseline); trace files go before it",
    )
    p.add_argument("--baseline", type=Path, help="another checkout whose warpwatch runs beside this one")
    p.add_argument("--no-readme", action="store_true", help="print the tables, leave README.md alone")
    args = p.parse_args(argv)

    traces: list[Path] = list(args.traces)
    if not traces:
        gen_traces.main(["--reference-only", "--one-line", "--gzip"])
        ref = gen_traces.DATA / gen_traces.REFERENCE_NAME
        twin = gen_traces.one_line_name(ref)
        traces = [ref, twin, ref.with_name(ref.name + ".gz"), twin.with_name(twin.name + ".gz")]
        if args.sizes:
            gen_traces.main([])
            traces += sorted(
                (q for q in gen_traces.DATA.glob("*_*B.json") if q.name != gen_traces.REFERENCE_NAME),
                key=lambda q: q.stat().st_size,
            )
    venv_problem = ensure_bench_venv()
    if venv_problem:
        print(f"HTA/orjson unavailable: {venv_problem}", file=sys.stderr)
    cli_ok = cli_works(PROJECT_PY)
    chosen = [r for r in readers(PROJECT_PY, cli_ok, args.baseline) if not args.only or r.key in args.only]
    sections = [[Result(reader) for reader in chosen] for _ in traces]
    for trace in traces:
        os.system(f"cat {trace} > /dev/null")  # page cache: every reader starts from the same warm file
    # Round 0 measures memory only (see proctree.measure); then each round runs every reader once on every trace.
    for i in range(args.repeat + 1):
        for trace, results in zip(traces, sections, strict=True):
            for result in results:
                reader = result.reader
                if reader.python == BENCH_PY and venv_problem:
                    result.error = venv_problem
                if result.error or i > max(1, min(args.repeat, reader.repeat_cap or args.repeat)):
                    continue
                wall, cpu, rss, pss, out, err = run_once(reader, trace, memory=i == 0)
                if err:
                    result.error = err
                    continue
                if i > 0:
                    result.walls.append(wall)
                    result.cpus.append(cpu)
                result.rss_kb = max(result.rss_kb, rss)
                result.pss_kb = max(result.pss_kb, pss)
                result.output = summary_of(reader, out)
                print(f"round {i}: {trace.name}: {reader.label}: {wall:.2f} s", flush=True)

    command = "python benchmarks/run.py" + (" --sizes" if args.sizes else "")
    if not args.traces and args.repeat != 5:
        command += f" --repeat {args.repeat}"
    if args.baseline is not None:
        command += f" --baseline {args.baseline.name}"
    if args.only:
        command += f" --only {' '.join(args.only)}"
    header = f"Measured {datetime.date.today().isoformat()} with `{command}` on {machine()}, the runs interleaved." + (
        "" if cli_ok else " (`python -m warpwatch` did not start: the CLI row ran the analyze module directly.)"
    )
    body = "\n\n".join(
        [
            header,
            "**The layouts side by side** (each reader against the msgspec floor of the same "
            "file, best wall times; peak PSS of the process tree):",
            summary(traces, sections),
            *(table(t, rs) for t, rs in zip(traces, sections, strict=True)),
        ]
    )
    print(body)
    if not args.no_readme:
        text = README.read_text() if README.exists() else f"# Benchmarks\n\n{START}\n{END}\n"
        if START in text and END in text:
            text = text[: text.index(START) + len(START)] + "\n" + body + "\n" + text[text.index(END) :]
        else:
            text += f"\n{START}\n{body}\n{END}\n"
        README.write_text(text)
        print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
