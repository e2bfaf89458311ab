"""Names in the tree say what a thing is, not how it came to be: no file or folder is named after
an issue, and the renamed attack modules are what `python benchmarks/attacks` runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import ROOT

HISTORY = re.compile(r"issue[ _-]?\d+", re.IGNORECASE)
NOT_THE_TREE = {".git", ".venv", ".tools", "build", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def tree(folder: Path) -> list[Path]:
    """Every file and folder of the checkout, without what git ignores here (built, installed, cached)."""
    out = []
    for path in folder.iterdir():
        if path.name in NOT_THE_TREE or path.name.endswith(".egg-info"):
            continue
        out.append(path)
        if path.is_dir() and not path.is_symlink():
            out += tree(path)
    return out


def test_no_file_or_folder_is_named_after_an_issue() -> None:
    named = sorted(str(p.relative_to(ROOT)) for p in tree(ROOT) if HISTORY.search(p.name))
    assert named == [], "name these by what they hold: " + ", ".join(named)


@pytest.mark.slow  # a Python of its own that imports the attack modules
def test_the_attacks_command_runs_the_renamed_modules() -> None:
    proc = subprocess.run(
        [sys.executable, "benchmarks/attacks", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "1000"},
    )  # help unwrapped
    assert proc.returncode == 0, proc.stderr
    groups = "comma-separated: idle,slowloris,headers,vanish,auth,daemon,misc, hostile (all of daemon_slash,"
    assert groups in proc.stdout
    assert "python benchmarks/attacks --only hostile" in proc.stdout
