"""Fuzz the trace reader and analysis: every input must analyse or raise TraceError.

Two engines (tests/trace/test_fuzz_trace.py holds a short deterministic slice of the first;
tests/trace/test_trace_fuzzing.py runs the second for 2,000 executions in CI):

    python benchmarks/fuzz_trace.py mutate --inputs 100000   # structured mutations of real traces
    python benchmarks/fuzz_trace.py atheris --seconds 3600   # coverage-guided, against an oracle

`atheris` (libFuzzer, a dev dependency) mutates pieces of the real traces and the hand-made edits
of tests/trace/test_gpuscan.py, guided by the coverage of warpwatch's Python code (instrumented at
import), and checks each input against the pure-Python reader (tests/support/trace_oracle.py): the
compiled scanner answers None or exactly the strict reading, and the whole read gives the same
Trace or the same TraceError kind in both builds, never another exception; libFuzzer bounds each
input's time (-timeout) and the process's memory (-rss_limit_mb). The C scanner is a target, not
instrumented: atheris instruments C with clang's -fsanitize=fuzzer-no-link, and the build here is
gcc's (tests/trace/test_native_sanitizers.py runs it under ASan/UBSan instead). It prints the executions,
the coverage (libFuzzer's `cov` and `ft`), the corpus, and the findings, each saved under --out
(crash-*, timeout-*, oom-* files: replay one with `fuzz_trace.py replay FILE`).

Seeds are the real traces in ../shared/traces (small ones, decompressed). Mutations: truncation at
random positions, byte flips, byte-class-aware splices, wrong types in every field the reader uses,
huge numbers, bare NaN/inf tokens in every numeric field, deep nesting, enormous strings, gzip
members (empty, lying size trailers, bombs). Prints counts by outcome and by error reason, and the
slowest input; exits 1 on the first unexpected exception (after printing it and saving the input).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import random
import re
import struct
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "agent"))

from warpwatch.analysis.window import analyze  # noqa: E402
from warpwatch.errors import TraceError  # noqa: E402
from warpwatch.trace import parse_trace, read_trace  # noqa: E402

SHARED = ROOT.parent / "shared" / "traces"
MAX_SEED_BYTES = 400_000
CAP = 8 * 1024 * 1024


def seeds() -> list[bytes]:
    out = []
    for p in sorted(SHARED.rglob("*")):
        if p.name.endswith((".json", ".json.gz")):
            data = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
            if len(data) <= MAX_SEED_BYTES:
                out.append(data)
    return out


WRONG: list[Any] = [None, "x", [], {}, True, -1, 0, 2**70, 1e308, -1e308, "inf", [2**40] * 3, [-1, 1, 1], "\x00"]
FIELDS = [
    b'"ts"',
    b'"dur"',
    b'"cat"',
    b'"ph"',
    b'"name"',
    b'"args"',
    b'"grid"',
    b'"block"',
    b'"device"',
    b'"registers per thread"',
    b'"shared memory"',
    b'"warps per SM"',
    b'"numSms"',
    b'"warpSize"',
    b'"deviceProperties"',
    b'"traceEvents"',
    b'"est. achieved occupancy %"',
]
TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"inf", b"-inf", b"nan", b"1e999", b"-0", b"99999999999999999999999"]


def mutate(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    kind = rng.choice(["truncate", "flip", "field", "token", "nest", "string", "splice", "gzip"])
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data) + 1)]
    if kind == "flip":
        b = bytearray(data)
        for _ in range(rng.randint(1, 16)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return kind, bytes(b)
    if kind in ("field", "token"):
        field = rng.choice(FIELDS)
        hits = [m.end() for m in re.finditer(re.escape(field) + rb"\s*:\s*", data)]
        if not hits:
            return kind, data
        pos = rng.choice(hits)
        end = pos
        depth = 0
        while end < len(data):  # skip one JSON value (roughly)
            c = data[end : end + 1]
            if c in b"[{":
                depth += 1
            elif c in b"]}":
                if depth == 0:
                    break
                depth -= 1
            elif c == b"," and depth == 0:
                break
            end += 1
        value = json.dumps(rng.choice(WRONG)).encode() if kind == "field" else rng.choice(TOKENS)
        return kind, data[:pos] + value + data[end:]
    if kind == "nest":
        depth = rng.choice([100, 1000, 10_000, 200_000])
        pos = rng.randrange(len(data))
        return kind, data[:pos] + b"[" * depth + b"]" * depth + data[pos:]
    if kind == "string":
        pos = data.find(b'"name": "')
        if pos < 0:
            return kind, data
        pos += 9
        return kind, data[:pos] + b"A" * rng.choice([10**4, 10**6, 5 * 10**6]) + data[pos:]
    if kind == "splice":
        a, b = sorted(rng.randrange(len(data)) for _ in range(2))
        return kind, data[:a] + data[b:]
    # gzip edge cases go through read_trace from a file
    return kind, data


def run_one(data: bytes, reasons: collections.Counter[str], tmp: Path | None = None, gz: bool = False) -> str:
    try:
        if gz and tmp is not None:
            body = gzip.compress(data)
            choice = random.random()
            if choice < 0.3:
                body = body[:-4] + struct.pack("<I", 0xFFFFFFFF)
            elif choice < 0.5:
                body = gzip.compress(b"")
            elif choice < 0.6:
                body = gzip.compress(b" " * (16 * 1024 * 1024))
            tmp.write_bytes(body)
            analyze(read_trace(tmp, max_bytes=CAP))
            return "ok"
        analyze(parse_trace(data, "fuzz.json"))
        return "ok"
    except TraceError as exc:
        reasons[re.sub(r"[0-9]+", "N", exc.reason)[:70]] += 1
        return "error"


def cmd_mutate(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)
    pool = seeds()
    outcomes: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    slowest = (0.0, "")
    tmp = Path(args.tmp) / "fuzz-input.json.gz"
    started = time.monotonic()
    for i in range(args.inputs):
        kind, data = mutate(rng, rng.choice(pool))
        kinds[kind] += 1
        t = time.monotonic()
        try:
            outcomes[run_one(data, reasons, tmp, gz=kind == "gzip")] += 1
        except BaseException as exc:  # the point of a fuzzer: report anything
            crash = Path(args.tmp) / f"crash-{i}.bin"
            crash.write_bytes(data)
            print(f"UNEXPECTED {type(exc).__name__}: {exc!s:.300} (input saved to {crash}, mutation {kind})")
            return 1
        dt = time.monotonic() - t
        if dt > slowest[0]:
            slowest = (dt, kind)
        if args.progress and i % 10_000 == 0:
            print(f"{i} inputs, {time.monotonic() - started:.0f} s", file=sys.stderr)
    total = time.monotonic() - started
    print(f"inputs: {args.inputs} in {total:.0f} s; outcomes: {dict(outcomes)}; mutations: {dict(kinds)}")
    print(f"slowest input: {slowest[0]:.2f} s ({slowest[1]})")
    print("failures by reason:")
    for reason, n in reasons.most_common(25):
        print(f"  {n:7d}  {reason}")
    return 0


def cmd_atheris(args: argparse.Namespace) -> int:
    """Run libFuzzer (atheris) in a child for --seconds, or for --runs executions; print what it did
    and what it found."""
    import subprocess
    import tempfile

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="warpwatch-fuzz-") as work:
        corpus = Path(args.corpus) if args.corpus else Path(work) / "corpus"
        corpus.mkdir(parents=True, exist_ok=True)
        sys.path.insert(0, str(ROOT / "tests"))
        from support import trace_oracle

        for i, seed in enumerate(trace_oracle.seeds()):
            (corpus / f"seed-{i:03d}").write_bytes(seed)
        budget = f"-runs={args.runs}" if args.runs else f"-max_total_time={args.seconds}"
        flags = [
            budget,
            f"-seed={args.seed}",
            f"-timeout={args.timeout}",
            f"-rss_limit_mb={args.rss_mb}",
            f"-max_len={trace_oracle.MAX_INPUT}",
            "-print_final_stats=1",
            f"-artifact_prefix={out}/",
            "-close_fd_mask=1",
        ]
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, __file__, "atheris-child", *flags, str(corpus)],
            capture_output=True,
            text=True,
            timeout=None if args.runs else args.seconds + 300,
        )
        elapsed = time.monotonic() - started
    log = proc.stderr
    stats = dict(re.findall(r"^stat::(\w+):\s*(\d+)", log, re.M))
    last = re.findall(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)", log, re.M)
    findings = sorted(str(p) for p in out.glob("*") if p.name.startswith(("crash-", "timeout-", "oom-", "leak-")))
    execs = stats.get("number_of_executed_units", last[-1][0] if last else "0")
    cov, ft, corp = last[-1][1:] if last else ("?", "?", "?")
    print(
        f"executions: {execs} in {elapsed:.0f} s; coverage: cov {cov}, ft {ft} (Python edges and features); "
        f"corpus: {corp} inputs; peak RSS: {stats.get('peak_rss_mb', '?')} MB"
    )
    print(f"findings: {len(findings)}" + "".join(f"\n  {f}" for f in findings))
    if proc.returncode != 0 or findings:
        print(log[-4000:])
        return 1
    return 0


def cmd_atheris_child(argv: list[str]) -> int:
    """The libFuzzer process: the oracle over warpwatch's instrumented Python code."""
    import atheris

    sys.path.insert(0, str(ROOT / "tests"))
    from support import trace_oracle

    # Every function loaded (warpwatch was imported by this script already, so instrument_imports
    # would miss it): the coverage that guides the mutations is that of the Python readers.
    atheris.instrument_all()
    atheris.Setup([sys.argv[0], *argv], trace_oracle.check)
    atheris.Fuzz()  # (libFuzzer exits the process)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """One saved input through the oracle: its outcome, or the assertion it fails."""
    sys.path.insert(0, str(ROOT / "tests"))
    from support import trace_oracle

    for name in args.files:
        print(f"{name}: {trace_oracle.check(Path(name).read_bytes())[:200]}")
    return 0


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "atheris-child":
        return cmd_atheris_child(sys.argv[2:])
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("mutate")
    m.add_argument("--inputs", type=int, default=100_000)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--tmp", default="/tmp")
    m.add_argument("--progress", action="store_true")
    a = sub.add_parser("atheris")
    a.add_argument("--seconds", type=int, default=600)
    a.add_argument(
        "--runs",
        type=int,
        default=0,
        help="stop after this many executions instead of --seconds (the same work on any machine)",
    )
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    a.add_argument("--rss-mb", type=int, default=2048, help="memory the fuzzing process may use")
    a.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "fuzz-trace"), help="where findings go")
    a.add_argument("--corpus", default=None, help="a corpus directory to keep (default: a temporary one)")
    r = sub.add_parser("replay")
    r.add_argument("files", nargs="+")
    args = p.parse_args()
    if args.cmd == "atheris":
        return cmd_atheris(args)
    if args.cmd == "replay":
        return cmd_replay(args)
    return cmd_mutate(args)


if __name__ == "__main__":
    sys.exit(main())
