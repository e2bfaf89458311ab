"""Every fenced shell block of README.md and docs/*.md runs here, or is marked (support/docblocks.py).

A block runs with `bash -euo pipefail` in a fresh temporary folder that holds a link to `agent/`
(the bundled samples), a link `.venv` to this environment and a copy of `dashboards/` (so that no
command can write into the checkout), with this environment's `warpwatch` first on the PATH and
`COLUMNS=110`. A `console` block's `$ ` lines run one by one, and the lines under each must be
exactly what it prints.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.docblocks import PAGES, Block, blocks, console_commands, shell_blocks
from support.paths import ROOT

BIN = Path(sys.executable).parent
RUN = [b for b in shell_blocks() if b.mark is None]


def _workdir(tmp: Path) -> Path:
    (tmp / "agent").symlink_to(ROOT / "agent")
    (tmp / ".venv").symlink_to(BIN.parent)
    shutil.copytree(ROOT / "dashboards", tmp / "dashboards")
    return tmp


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARPWATCH_")}
    env.update(PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}", COLUMNS="110", NO_COLOR="1")
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )


def test_the_pages_have_shell_blocks_to_run_and_each_mark_says_why() -> None:
    found = shell_blocks()
    assert len(RUN) >= 5, [b.where for b in found]
    for b in found:
        if b.mark is None:
            continue
        kind, reason = b.mark
        assert len(reason) >= 10, f"{b.where}: say why the block is {kind}"
        if kind == "tested-by":
            test = reason.split()[0]
            assert (ROOT / test).is_file(), f"{b.where}: {test} is not a file"
            text = (ROOT / test).read_text(encoding="utf-8")
            name = b.page.name if b.page.parent.name == "docs" else "README"
            assert name in text, f"{b.where}: {test} never names {name}"


def test_a_mark_is_only_taken_just_above_a_fence(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- illustrative: needs a cluster -->\n\n```bash\nfalse\n```\n"
        "<!-- tested-by: tests/test_readme.py (runs it) -->\n```sh\ntrue\n```\n"
        "```console\n$ echo a\na\n```\n",
        encoding="utf-8",
    )
    got = [(b.line, b.lang, b.mark) for b in blocks(page)]
    assert got == [(3, "bash", None), (7, "sh", ("tested-by", "tests/test_readme.py (runs it)")), (10, "console", None)]
    assert console_commands("$ echo a\na\n$ true\n") == [("echo a", "a"), ("true", "")]


def test_every_page_is_read() -> None:
    assert ROOT / "README.md" in PAGES and ROOT / "docs" / "agent.md" in PAGES
    assert {p.name for p in PAGES} >= {"README.md", "analyze.md", "troubleshooting.md", "development.md"}


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=[b.where for b in RUN])
def test_the_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    cwd = _workdir(tmp_path)
    if block.lang != "console":
        proc = _run(block.text, cwd)
        assert proc.returncode == 0, f"{block.where} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        return
    for command, expected in console_commands(block.text):
        proc = _run(command, cwd)
        assert proc.returncode == 0, f"{block.where}: `{command}` exited {proc.returncode}:\n{proc.stderr}"
        printed = "\n".join(line.rstrip() for line in proc.stdout.rstrip("\n").splitlines())
        assert printed == expected.rstrip("\n"), f"{block.where}: `{command}` printed\n{printed}"


@pytest.mark.slow
def test_a_block_that_fails_fails_its_test(tmp_path: Path) -> None:
    """The runner's own check: a failing line anywhere in a block, or a piped failure, is an error."""
    cwd = _workdir(tmp_path)
    assert _run("warpwatch analyze no-such-trace.json\necho after", cwd).returncode != 0
    assert _run("warpwatch analyze no-such-trace.json | cat", cwd).returncode != 0
    assert _run("warpwatch --version", cwd).stdout.startswith("warpwatch ")
    assert re.match(r"\d", _run("ls agent/warpwatch/samples | wc -l", cwd).stdout.strip())
