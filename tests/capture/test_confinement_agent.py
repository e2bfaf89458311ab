"""Untrusted input through the real agent: hostile file names and contents stay on one log line and
leave the exposition valid (confine and the sources: test_confinement.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import CONTROL, Agent, parse, run_cli, sample, series
from support.confinement import ERRORS, FAST, FOREIGN_UID, OpenWatch, listening_socket, make_device
from support.tracebuild import H100, kernel, span, trace_doc, write
from warpwatch.export import metricdefs as md
from warpwatch.logs import JsonFormatter, TextFormatter
from warpwatch.model import FAULTS
from warpwatch.names.labels import MAX_LABEL_LENGTH, name_hash

# --------------------------------------------------------------------------------------------- the agent


def failed_lines(agent: Agent) -> dict[str, str]:
    records = [json.loads(line) for line in agent.lines]
    return {r["file"]: r["error"] for r in records if r["event"] == "window" and r["outcome"] == "failed"}


@pytest.mark.slow
def test_the_agent_refuses_counts_and_names_each_entry_once_and_opens_none(
    folder: Path, outside: Path, tmp_path: Path
) -> None:
    (folder / "sub").mkdir()
    shutil.copy(CONTROL, folder / "sub" / "real.json.gz")
    shutil.copy(CONTROL, folder / "good.json.gz")
    (folder / "alias.json.gz").symlink_to("sub/real.json.gz")
    (folder / "escape.json.gz").symlink_to(outside / "secret.json.gz")
    os.mkfifo(folder / "pipe.json")
    sock = listening_socket(folder / "sock.json")
    expected = {
        "escape.json.gz": f"refused: a symbolic link to {outside / 'secret.json.gz'}, outside the folder {folder}",
        "pipe.json": "refused: a FIFO, not a regular file",
        "sock.json": "refused: a socket, not a regular file",
    }
    reasons = {"refused_symlink": 1.0, "refused_not_regular_file": 2.0, "refused_foreign_owner": 0.0}
    if make_device(folder / "dev.json"):
        expected["dev.json"] = "refused: a character device, not a regular file"
        reasons["refused_not_regular_file"] += 1
    if os.geteuid() == 0:
        shutil.copy(CONTROL, folder / "foreign.json.gz")
        os.chown(folder / "foreign.json.gz", FOREIGN_UID, FOREIGN_UID)
        expected["foreign.json.gz"] = (
            f"refused: owned by uid {FOREIGN_UID}; only files of warpwatch's uid (0), "
            "root (0) or the folder's owner (0) are read"
        )
        reasons["refused_foreign_owner"] = 1.0
    watch = OpenWatch(folder, outside)
    agent = Agent("--source", f"dir:{folder}", *FAST, "--log-format", "json")
    try:
        done = agent.wait_for(
            lambda s: (
                sample(s, "warpwatch_windows_total", outcome="failed") == len(expected)
                and sample(s, "warpwatch_windows_total", outcome="ok") == 2
            )
        )
        for reason, count in reasons.items():
            assert sample(done, ERRORS, stage="read", reason=reason) == count, reason
        time.sleep(1.0)  # more rounds: nothing is refused (or counted, or logged) twice
        again = agent.scrape()
        for reason, count in reasons.items():
            assert sample(again, ERRORS, stage="read", reason=reason) == count, reason
        assert sample(again, "warpwatch_windows_total", outcome="ok") == 2
    finally:
        rc, _ = agent.stop()
        sock.close()
        opened = watch.opened()
        watch.close()
    assert rc == 0
    assert failed_lines(agent) == expected
    # Only the good file and the folder on the inside link's way were opened (sub/ is not watched).
    assert opened == {folder / "good.json.gz", folder / "sub"}, opened


# --------------------------------------------------------------------------------------------- strings

HOSTILE_NAMES = [
    'evil"} 1\nfake_metric{job="x"} 1',
    "ctl\x00\x01\x1b[31mred\x07\r\nend",
    'back\\slash"quote\\',
    "x" * (1 << 20),  # 1 MiB
    "[bold]markup[/]",
    "line\u2028sep\u0085nel\u2029",
    "zero\u200bwidth\u202eRTL\ufeff",
    "tab\tkernel<float>",
    "_ZN" + "3abc" * 50_000,  # a long mangled name
    "ok_kernel",
]
UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\ufeff]")


def hostile_trace(path: Path) -> Path:
    events = [span(0, 1000)] + [kernel(n, ts=10 + i * 50, dur=5) for i, n in enumerate(HOSTILE_NAMES)]
    gpu = dict(H100, name='H100"} 1\nfake_gpu 1\x1b[31m\u2028' + "y" * 500)
    return write(path, trace_doc(events, devices=[gpu]))


def invalid_utf8_trace(path: Path) -> Path:
    data = json.dumps(trace_doc([span(0, 1000), kernel("BAD_NAME", ts=10, dur=5)])).encode()
    path.write_bytes(data.replace(b"BAD_NAME", b"bad\xff\xfe\xc3(name"))
    return path


@pytest.fixture(scope="module")
def hostile_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    d = tmp_path_factory.mktemp("hostile")
    hostile_trace(d / "a_hostile.json")
    invalid_utf8_trace(d / "b_invalid_utf8.json")
    agent = Agent("--source", f"replay:{d}", *FAST, "--log-format", "json", startup_timeout=30)
    try:
        agent.wait_for(lambda s: (sample(s, "warpwatch_windows_total", outcome="ok") or 0) >= 2, timeout=40)
        yield agent, d
    finally:
        agent.stop()


@pytest.mark.slow
def test_hostile_names_leave_the_exposition_valid_for_promtool(hostile_agent: tuple[Agent, Path]) -> None:
    agent, _ = hostile_agent
    status, _, body = agent.get("/metrics")
    assert status == 200
    if shutil.which("promtool"):
        proc = subprocess.run(
            ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60, check=False
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    text = body.decode("utf-8")  # valid UTF-8, or this raises
    samples = parse(text)
    known = {md.exposed_name(m) for m in (*md.ALL, *md.AGENT)} | {m.name for m in (*md.ALL, *md.AGENT)}
    names = {name for name, _ in samples}
    ours = {n for n in names if n.startswith("warpwatch_")}
    assert {n.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for n in ours} <= known
    assert not any("fake" in n for n in names)
    assert not {n for n in names if not n.startswith(("warpwatch_", "process_", "python_"))}
    kernels = {dict(labels)["kernel"] for labels in series(samples, md.KERNEL_TIME_SHARE.name)}
    assert len(kernels) == len(HOSTILE_NAMES)
    for label in kernels:
        assert len(label) <= MAX_LABEL_LENGTH and not UNPRINTABLE.search(label) and "\n" not in label, repr(label)
    [info] = series(samples, md.GPU_INFO.name)
    gpu_name = dict(info)["name"]
    assert len(gpu_name) <= MAX_LABEL_LENGTH and not UNPRINTABLE.search(gpu_name), repr(gpu_name)
    # Everything our exposition says about a kernel is in a label value: each line is one sample.
    for line in text.splitlines():
        assert line.startswith(("# HELP ", "# TYPE ", "warpwatch_", "process_", "python_")), line


@pytest.mark.slow
def test_a_trace_with_invalid_utf8_fails_only_its_own_window(hostile_agent: tuple[Agent, Path]) -> None:
    agent, _ = hostile_agent
    samples = agent.wait_for(lambda s: (sample(s, ERRORS, stage="read", reason="invalid_trace") or 0) >= 1)
    assert (sample(samples, "warpwatch_windows_total", outcome="ok") or 0) >= 1
    assert series(samples, md.KERNEL_TIME_SHARE.name)  # the last good snapshot is still served
    # Replayed every other window, the same failure is logged once (repeats go to debug level).
    agent.wait_for(lambda s: (sample(s, ERRORS, stage="read", reason="invalid_trace") or 0) >= 3)
    logged = [line for line in agent.lines if '"b_invalid_utf8.json"' in line and '"event": "window"' in line]
    assert len(logged) == 1, logged


def test_every_log_line_of_the_hostile_run_is_one_json_object(hostile_agent: tuple[Agent, Path]) -> None:
    agent, _ = hostile_agent
    for line in list(agent.lines):
        record = json.loads(line)
        assert isinstance(record, dict) and "event" in record
        assert not UNPRINTABLE.search(line), repr(line)


HOSTILE_FILE_NAMES = [
    'new\nline"quoted=x.json',
    "esc\x1b[31mred\x07.json",
    "sep\u2028arator.json",
    os.fsdecode(b"bad\xff\xfeutf8.json"),  # not UTF-8: Python holds it as lone surrogates
]


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_hostile_file_names_stay_on_one_log_line(log_format: str, folder: Path) -> None:
    for name in HOSTILE_FILE_NAMES:
        shutil.copy(CONTROL, folder / name)
    agent = Agent("--source", f"dir:{folder}", *FAST, "--log-format", log_format)
    try:
        agent.wait_for(lambda s: sample(s, "warpwatch_windows_total", outcome="ok") == len(HOSTILE_FILE_NAMES))
    finally:
        rc, _ = agent.stop()
    assert rc == 0
    window_lines = [line for line in agent.lines if "window" in line and "outcome" in line]
    assert len(window_lines) == len(HOSTILE_FILE_NAMES)
    for line in agent.lines:
        assert not UNPRINTABLE.search(line), repr(line)
        if log_format == "json":
            json.loads(line)
        else:
            assert re.match(r'^ts=\S+ level=[a-z]+ event=[a-z_]+( [a-z_]+=("([^"\\]|\\.)*"|\S+))*$', line), line
    files = set()
    for line in window_lines:
        if log_format == "json":
            files.add(json.loads(line)["file"])
        else:
            quoted = re.search(r' file=("([^"\\]|\\.)*")', line)
            assert quoted, line
            files.add(json.loads(quoted.group(1)))
    assert files == set(HOSTILE_FILE_NAMES)  # escaped, not lost: each decodes back to the name


@pytest.mark.parametrize("formatter", [TextFormatter(), JsonFormatter()])
def test_a_log_record_is_one_line_whatever_its_values(formatter: Any) -> None:
    import logging

    record = logging.LogRecord("warpwatch.test", logging.WARNING, __file__, 1, "window", None, None)
    record.warpwatch_fields = {"file": HOSTILE_FILE_NAMES[0], "error": "\ud800\x00\u2028\U0001f600", "n": 1}
    line = formatter.format(record)
    assert "\n" not in line and not UNPRINTABLE.search(line)
    line.encode("utf-8")  # no lone surrogate left
    if isinstance(formatter, JsonFormatter):
        assert json.loads(line)["file"] == HOSTILE_FILE_NAMES[0]


def test_the_analyze_table_prints_no_raw_control_character(tmp_path: Path) -> None:
    path = hostile_trace(tmp_path / "hostile.json")
    result = run_cli("analyze", str(path), timeout=60)
    assert result.returncode == 0, result.stderr
    assert not UNPRINTABLE.search(result.stdout), [m.group() for m in UNPRINTABLE.finditer(result.stdout)][:10]
    assert "[bold]markup[/]" in result.stdout  # shown as written, not read as rich markup
    # The table shows kernel labels: control characters dropped, and so a hash of the full name.
    assert "ctl[31mredend~" + name_hash(HOSTILE_NAMES[1]) in result.stdout
    lines = result.stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("  ─"))
    rows = lines[rule + 1 : rule + 1 + len(HOSTILE_NAMES)]
    assert all(re.search(r"  \d+\.\d\d$", line) for line in rows)  # one row per kernel: no name broke a row
    after = lines[rule + 1 + len(HOSTILE_NAMES) :]
    assert not re.search(r"  \d+\.\d\d$", after[0])  # the rows end where the kernels do
    assert any(line.startswith("  Kernel:") for line in after[:3]), after[:3]  # then the table's notes


def test_fault_labels_are_public_and_bounded() -> None:
    """Every (stage, reason) exported is documented in docs/metrics.md."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    for stage, reason in FAULTS:
        assert f"| `{stage}` | `{reason}` |" in doc
