"""The docs site (mkdocs.yml, docs/; docs/development.md, "The docs") builds with `--strict`, and
every page, runbook and picture is in it.

mkdocs comes with the `dev` extra (it includes `docs`), so this test needs no skip: without mkdocs
the environment is not the one the README's test command builds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.paths import ROOT

CONFIG = ROOT / "mkdocs.yml"


def _config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    return loaded


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for v in nav.values() for p in _nav_pages(v)]
    return [p for item in nav for p in _nav_pages(item)]


def test_every_page_and_runbook_is_in_the_navigation_once() -> None:
    pages = _nav_pages(_config()["nav"])
    assert len(pages) == len(set(pages))
    docs = {p.name for p in (ROOT / "docs").glob("*.md")}
    runbooks = {f"runbooks/{p.name}" for p in (ROOT / "dashboards" / "runbooks").glob("*.md")}
    assert set(pages) == docs | runbooks | {"index.md"}, "index.md is the README (docs/hooks.py)"
    assert not (ROOT / "docs" / "index.md").exists()


def test_strict_fails_on_what_the_issue_names() -> None:
    config = _config()
    assert config["strict"] is True
    validation = config["validation"]
    assert validation["nav"]["omitted_files"] == "warn" and validation["nav"]["not_found"] == "warn"
    assert validation["links"]["not_found"] == "warn" and validation["links"]["anchors"] == "warn"


@pytest.mark.slow
def test_mkdocs_build_strict_passes_and_holds_every_page(tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site), "-f", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in _nav_pages(_config()["nav"]):
        built = site / ("index.html" if page == "index.md" else page.removesuffix(".md") + "/index.html")
        assert built.is_file(), page
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "volta_sgemm_64x64_nn" in index and 'href="analyze/"' in index  # the README, its links made local
    for picture in (ROOT / "docs" / "pictures").glob("*.svg"):
        assert (site / "pictures" / picture.name).read_bytes() == picture.read_bytes()
    assert not list(site.rglob("*.py")), "the hooks and the picture script are not published"


@pytest.mark.slow
def test_a_page_left_out_of_the_navigation_fails_the_build(tmp_path: Path) -> None:
    """The same configuration over a copy of docs/ with one page more, not in the navigation."""
    import shutil

    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    config = CONFIG.read_text(encoding="utf-8").replace("docs_dir: docs", f"docs_dir: {tmp_path / 'docs'}")
    (tmp_path / "mkdocs.yml").write_text(config.replace("- docs/hooks.py", f"- {ROOT / 'docs' / 'hooks.py'}"))
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode != 0
    assert "orphan.md" in proc.stdout + proc.stderr
