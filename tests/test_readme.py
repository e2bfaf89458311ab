"""The README's quick start, run as written (only the port moves, so that tests never collide).

The install part (`python3 -m venv .venv && .venv/bin/pip install -q -e .`) is what `.ci/run`
does itself; the agent, the `curl` and the `analyze` commands run here with this environment's
`warpwatch`, the numbers the prose quotes are checked against the bundled traces, and the metric
lines the README shows ("What it shows") against what the quick start's agent serves. How to run
the tests lives in docs/development.md ("Running the tests"). The README's other blocks and every
page's run in tests/docs/test_commands.py.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support.docblocks import curl_until_served
from support.paths import ROOT

README = ROOT / "README.md"
DEVELOPMENT = ROOT / "docs" / "development.md"
SAMPLES = ROOT / "agent" / "warpwatch" / "samples"
BIN = Path(sys.executable).parent


def _section(title: str, page: Path = README) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _bash_blocks(section: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, re.S)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local(command: str) -> list[str]:
    """A README command line with `.venv/bin/` pointing at this environment's scripts."""
    argv = shlex.split(command)
    if argv[0].startswith(".venv/bin/"):
        argv[0] = str(BIN / argv[0].removeprefix(".venv/bin/"))
    return argv


def test_quick_start_has_the_two_commands_a_fresh_machine_needs() -> None:
    blocks = _bash_blocks(_section("Quick start"))
    install, *_ = blocks
    assert install.startswith("python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/warpwatch run ")
    assert blocks[-1] == "bash .ci/run"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed (.ci/run installs it)")
def test_quick_start_agent_and_curl_show_a_negative_reported_value_beside_the_corrected_one() -> None:
    install, curl, *_ = _bash_blocks(_section("Quick start"))
    run = install.split(" && ")[-1]
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
    agent = subprocess.Popen(
        [*_local(run), "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        out = curl_until_served(curl, port, agent, 30)  # the agent's first window
    finally:
        agent.terminate()
        agent.communicate(timeout=30)
    # The ReLU's label: its elementwise kernel with the threshold op, hashed (lambdas were dropped).
    relu = 'kernel="at::native::vectorized_elementwise_kernel<4, threshold_kernel_impl<float>, Array<char*, 3>>~'
    lines = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in out.splitlines()}

    def relu_value(metric: str) -> float:
        (value,) = [v for k, v in lines.items() if k.startswith(f'{metric}{{gpu="0",{relu}')]
        return value

    assert relu_value("warpwatch_kernel_reported_warps_per_sm_min") == -396
    (shown,) = re.findall(r"```text\n(.*?)```", _section("What it shows"), re.S)
    for line in shown.strip().splitlines():
        assert line in out.splitlines(), f"the README shows a line the quick start's agent does not serve: {line}"
    assert relu_value("warpwatch_kernel_warps_per_sm") == pytest.approx(99 * 4 / 68)
    assert lines['warpwatch_gpu_busy_ratio{gpu="0"}'] == pytest.approx(0.4055, abs=5e-5)
    assert not [k for k in lines if "_total" in k], "the grep shows the gauges, not the counters at 0"
    assert agent.returncode == 0


def test_quick_start_says_why_counters_are_left_out_and_the_docs_say_what_the_test_corpus_is() -> None:
    section = _section("Quick start")
    assert "_seconds_total" in section and "read 0 after the first window" in section
    tests = _section("Running the tests", DEVELOPMENT)
    assert "../shared/traces" in tests and "WARPWATCH_SHARED_TRACES" in tests and "SOURCES.md" in tests
    assert "holistictraceanalysis==0.5.0" in tests


def test_quick_start_analyze_shows_the_reproduction() -> None:
    *_, analyze, _ci = _bash_blocks(_section("Quick start"))
    proc = subprocess.run(
        _local(analyze), capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "COLUMNS": "200"}
    )
    assert proc.returncode == 0, proc.stderr
    assert "-396" in proc.stdout and "5.82" in proc.stdout and "busy 40.6%" in proc.stdout
    assert "sm_count_invalid (9 launches)" in proc.stdout


def test_the_numbers_the_quick_start_quotes_are_the_samples() -> None:
    prose = _section("Quick start")
    for quoted in ("`-396`", "`5.82`", "40.6 %", "43.5 s", "10.7 ms", "busy 0.0 %"):
        assert quoted in prose, quoted
    with gzip.open(SAMPLES / "a100_alexnet.json.gz", "rt", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    (span,) = [e for e in events if e.get("cat") == "Trace"]
    kernel_us = sum(e["dur"] for e in events if e.get("cat") == "kernel")
    assert round(span["dur"] / 1e6, 1) == 43.5
    assert round(kernel_us / 1e3, 1) == 10.7
    assert round(100 * kernel_us / span["dur"], 1) == 0.0
    assert round(99 * 4 / 68, 2) == 5.82


def test_the_license_file_is_the_apache_2_0_text_pyproject_declares() -> None:
    import hashlib

    import tomllib

    text = (ROOT / "LICENSE").read_bytes()
    # The MD5 of https://www.apache.org/licenses/LICENSE-2.0.txt, the text as the ASF publishes it.
    assert hashlib.md5(text).hexdigest() == "3b83ef96387f14655fc854ddc3c6bd57"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
