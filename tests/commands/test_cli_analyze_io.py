"""`warpwatch analyze` in pipelines: a trace read from standard input (`-`), and a `--format json`
document that carries its schema version and says which traces failed."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT
from warpwatch.commands.analyze_json import SCHEMA_VERSION
from warpwatch.commands.cli import main

SAMPLE = ROOT / "agent" / "warpwatch" / "samples" / "a100_alexnet.json.gz"


def analyze(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "warpwatch", "analyze", *args],
        input=stdin,
        capture_output=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_a_dash_reads_the_trace_from_standard_input_plain_or_gzip_compressed() -> None:
    by_file = json.loads(analyze("--format", "json", str(SAMPLE)).stdout)["traces"][0]
    for piped in (SAMPLE.read_bytes(), gzip.decompress(SAMPLE.read_bytes())):
        result = analyze("--format", "json", "-", stdin=piped)
        assert result.returncode == 0, result.stderr
        (trace,) = json.loads(result.stdout)["traces"]
        assert trace["path"] == "<stdin>"
        assert trace["kernels"] == by_file["kernels"]
    table = analyze("-", stdin=SAMPLE.read_bytes())
    assert table.returncode == 0 and b"Trace: <stdin>" in table.stdout


def test_what_stdin_cannot_give_is_an_error_naming_stdin() -> None:
    result = analyze("-", stdin=b"")
    assert result.returncode == 1
    assert result.stderr.decode() == "warpwatch: error: <stdin>: empty file\n"
    small = analyze("--max-trace-bytes", "1KiB", "-", stdin=gzip.decompress(SAMPLE.read_bytes()))
    assert small.returncode == 1
    assert small.stderr.decode().startswith("warpwatch: error: <stdin>: larger than the 1,024-byte limit")


def test_json_carries_its_schema_version_and_one_error_per_failed_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [')
    missing = tmp_path / "missing.json"
    assert main(["analyze", "--format", "json", str(broken), str(SAMPLE), str(missing)]) == 1
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert list(doc) == ["schema_version", "traces", "errors"]
    assert doc["schema_version"] == SCHEMA_VERSION == 1
    assert [t["path"] for t in doc["traces"]] == [str(SAMPLE)]
    kinds = [(e["path"], e["kind"]) for e in doc["errors"]]
    assert kinds == [(str(broken), "invalid_trace"), (str(missing), "io_error")]
    assert doc["errors"][1]["error"] == f"{missing}: no such file"
    # stderr says the same, one line per failed trace
    assert [line.split(": ")[2] for line in out.err.splitlines()] == [str(broken), str(missing)]


def test_json_of_traces_that_all_read_has_no_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--format", "json", str(SAMPLE)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["schema_version"], len(doc["traces"]), doc["errors"]) == (1, 1, [])
