"""The fenced blocks of the README and of docs/*.md, with the mark each shell block carries.

A shell block (```bash, ```sh, ```console) runs in tests/docs/test_commands.py unless the line just
above its fence marks it `<!-- illustrative: WHY -->` (it cannot run here: a cluster, a GPU, a
server) or `<!-- tested-by: TEST FILE (how) -->` (another test runs it).
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from support.paths import ROOT
from support.patience import hang_guard

PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SHELL = ("bash", "sh", "console")
FENCE = re.compile(r"^\s*```(\S*)\s*$")
MARK = re.compile(r"^\s*<!--\s*(illustrative|tested-by):\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The fence's line number (1-based)."""
    lang: str
    text: str
    mark: tuple[str, str] | None
    """(kind, reason) from the comment just above the fence, if any."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of `page`, in order."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        above = MARK.match(lines[i - 1]) if i > 0 else None
        mark = (above.group(1), above.group(2)) if above else None
        out.append(Block(page, i + 1, m.group(1), "\n".join(lines[i + 1 : end]) + "\n", mark))
        i = end + 1
    return out


def shell_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.lang in SHELL]


def console_commands(text: str) -> list[tuple[str, str]]:
    """A console block as (command, expected output): each `$ ` line and the lines under it."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        else:
            assert out, f"a console block's first line is not a `$ ` command: {line!r}"
            out[-1][1].append(line)
    return [(command, "\n".join(lines)) for command, lines in out]


def curl_until_served(curl: str, port: int, agent: subprocess.Popen[str], timeout: float) -> str:
    """Run the README's `curl` (its default port 9946 replaced by `port`) until the agent serves the
    quick start's artefact gauge; its output. Fails if the agent exits, or after `timeout` (a hang
    guard: `patience.hang_guard`)."""
    command = curl.replace("localhost:9946", f"localhost:{port}")
    assert command != curl, "the README's curl no longer names the default port"
    deadline = time.monotonic() + hang_guard(timeout)
    while True:
        out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30).stdout
        if "warpwatch_kernel_reported_warps_per_sm_min" in out:
            return out
        assert agent.poll() is None, agent.communicate()[0]
        assert time.monotonic() < deadline, out
        time.sleep(0.3)
