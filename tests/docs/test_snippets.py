"""Text shown on several pages has one source under docs/snippets/, and every copy is that source.

A page shows a snippet in a fenced block just under `<!-- snippet: docs/snippets/NAME (...) -->`;
the block must be the source rendered (a list item's indentation aside). GitHub shows README.md
as it is, so the copies are written out rather than included; this test is what keeps them equal.

docs/snippets/vllm-profiler-config.json is the vLLM `--profiler-config` warpwatch recommends for its
`vllm:` source (docs/attach.md, docs/overhead.md): no stacks, no API-server profile, GPU activities
only, traces in the agent's trace folder. Rendered as the one-line flag a shell takes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.docblocks import PAGES
from support.paths import ROOT
from warpwatch.config.table import SETTINGS_BY_NAME

PROFILER_CONFIG = ROOT / "docs" / "snippets" / "vllm-profiler-config.json"
MARK = re.compile(r"^\s*<!--\s*snippet:\s*(\S+)(?:\s.*)?-->\s*$")
FENCE = re.compile(r"^(\s*)```")
# The pages that tell a reader how to start vLLM for the `vllm:` source.
SHOWN_ON = ("README.md", "docs/attach.md", "docs/kubernetes.md")
# A `--profiler-config '{...}'` written out anywhere in the pages.
WRITTEN = re.compile(r"--profiler-config '(\{.*?\})'", re.S)


def render_profiler_config(path: Path = PROFILER_CONFIG) -> str:
    """The snippet as the one-line flag the pages show."""
    config = json.loads(path.read_text(encoding="utf-8"))
    return f"--profiler-config '{json.dumps(config, separators=(', ', ': '))}'"


def copies(page: Path) -> list[tuple[int, str, str]]:
    """(line of the mark, source named, the block's text without its indentation) for each marked block."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        mark = MARK.match(line)
        if not mark:
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        assert fence, f"{page.relative_to(ROOT)}:{i + 1}: a snippet mark must stand just above a fence"
        indent = len(fence.group(1))
        end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
        found.append((i + 1, mark.group(1), "\n".join(x[indent:] for x in lines[i + 2 : end])))
    return found


def test_the_profiler_config_is_the_lean_one_and_writes_where_the_agent_reads() -> None:
    config = json.loads(PROFILER_CONFIG.read_text(encoding="utf-8"))
    assert config == {
        "profiler": "torch",
        "torch_profiler_dir": str(SETTINGS_BY_NAME["trace_dir"].default),
        "torch_profiler_with_stack": False,  # a stop with stacks on stalled the server 66 s (docs/overhead.md)
        "ignore_frontend": True,  # the API server's own profiler stalls the process that streams tokens
        "torch_profiler_activities": ["CUDA"],  # no CPU op: the worker's table has nothing to walk
    }
    assert render_profiler_config() == (
        '--profiler-config \'{"profiler": "torch", "torch_profiler_dir": "/tmp/warpwatch", '
        '"torch_profiler_with_stack": false, "ignore_frontend": true, "torch_profiler_activities": ["CUDA"]}\''
    )


@pytest.mark.parametrize("page", SHOWN_ON)
def test_each_page_that_tells_how_to_start_vllm_shows_the_snippet(page: str) -> None:
    marked = [c for c in copies(ROOT / page) if c[1] == "docs/snippets/vllm-profiler-config.json"]
    assert len(marked) == 1, f"{page}: {len(marked)} copies of the profiler config"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_copy_is_its_source(page: Path) -> None:
    for line, source, text in copies(page):
        assert (ROOT / source).is_file(), f"{page.relative_to(ROOT)}:{line}: no snippet {source}"
        assert source == "docs/snippets/vllm-profiler-config.json", f"{source}: say here how it renders"
        assert text == render_profiler_config(), f"{page.relative_to(ROOT)}:{line} differs from {source}"


def _written_by_hand(page: Path) -> list[str]:
    """The recommended config (the one that turns stacks off) written out outside a marked copy.
    The bare `{"profiler":"torch","torch_profiler_dir":DIR}` of attach.md's version table says how a
    version enables profiling at all: not a recommendation, not counted."""
    text = page.read_text(encoding="utf-8")
    for _, _, copy in copies(page):
        text = text.replace(copy, "")
    return [m.group(0) for m in WRITTEN.finditer(text) if "torch_profiler_with_stack" in m.group(1)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_no_page_writes_the_recommended_config_by_hand(page: Path) -> None:
    assert _written_by_hand(page) == []


def test_the_chart_values_comment_shows_the_snippet() -> None:
    values = (ROOT / "helm" / "warpwatch" / "values.yaml").read_text(encoding="utf-8")
    comments = [line.strip() for line in values.splitlines() if line.strip().startswith("#")]
    comment = " ".join(line.removeprefix("#").strip() for line in comments)
    assert render_profiler_config() in comment
