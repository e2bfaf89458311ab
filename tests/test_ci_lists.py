"""Every test .ci/under-load names exists: a renamed or moved test would make that step collect
nothing ("not found", exit 4) on CI, after 20 minutes of set-up (seen when test_agent.py was split)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def named_tests() -> list[str]:
    text = (ROOT / ".ci" / "under-load").read_text(encoding="utf-8")
    block = text.split("TIMING_SENSITIVE=(", 1)[1].split("\n)", 1)[0]
    return [line.strip() for line in block.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_every_test_under_load_names_exists() -> None:
    names = named_tests()
    assert len(names) > 10
    for name in names:
        path, _, func = name.partition("::")
        assert (ROOT / path).is_file(), name
        if func:
            assert re.search(rf"^(async )?def {re.escape(func)}\(", (ROOT / path).read_text(), re.M), name
