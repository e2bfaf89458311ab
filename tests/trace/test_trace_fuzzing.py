"""Coverage-guided fuzzing of the trace readers against the pure-Python reader (tests/support/trace_oracle.py),
briefly here and for as long as one likes with benchmarks/fuzz_trace.py; and every input it found
that the readers disagreed on, replayed (tests/trace/trace_fuzz_findings/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import trace_oracle
from support.paths import ROOT

FINDINGS = Path(__file__).resolve().parent / "trace_fuzz_findings"
RUNS = 2000
"""Executions of the coverage-guided run here (about 20 s on an idle CI machine)."""


@pytest.mark.parametrize("path", sorted(FINDINGS.iterdir()), ids=lambda p: p.name)
def test_each_input_the_fuzzer_found_now_reads_alike_in_both_builds(path: Path) -> None:
    trace_oracle.check(path.read_bytes())


@pytest.mark.slow
def test_the_seeds_read_alike_in_both_builds_and_some_are_errors() -> None:
    """The fuzzer's seed corpus through the oracle: real pieces read, the hand-made edits that are
    errors are errors (so the oracle compares answers, not only successes)."""
    outcomes = [trace_oracle.check(seed) for seed in trace_oracle.seeds()]
    errors = sum(o.startswith("TraceError") for o in outcomes)
    assert len(outcomes) > 100 and 10 < errors < len(outcomes) - 50, errors


@pytest.mark.slow
def test_coverage_guided_fuzzing_for_2000_executions_finds_nothing(tmp_path: Path) -> None:
    """atheris (libFuzzer) from the seeds, a fixed seed, a fixed number of executions (the same
    work however busy the machine): no disagreement, no exception but TraceError, no input over
    10 s, the process under 2 GiB; and it really ran and explored."""
    try:
        import atheris  # noqa: F401
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("atheris is missing (pyproject's dev extra installs it)")
        pytest.skip("atheris is not installed")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "fuzz_trace.py"),
            "atheris",
            "--runs",
            str(RUNS),
            "--seed",
            "1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report[-6000:]
    assert "findings: 0" in report, report[-6000:]
    executions = int(report.split("executions: ")[1].split()[0])
    coverage = int(report.split("coverage: cov ")[1].split(",")[0])
    assert executions >= RUNS and coverage > 300, report
