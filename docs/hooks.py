"""mkdocs hooks: pages the site shows from files that live elsewhere in the repository, so that none
is copied by hand and none can drift.

- `index.md` is the repository's README.md, its links to `docs/X` made relative to the site;
- `runbooks/*.md` are the runbooks `warpwatch dashboards build` generates into dashboards/runbooks/
  (the alerts' `runbook_url` points there); mkdocs.yml lists each in the navigation, so a new alert's
  runbook that is left out fails `mkdocs build --strict`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RUNBOOKS = ROOT / "dashboards" / "runbooks"


def readme_as_index(text: str) -> str:
    """README.md with its `docs/...` links and pictures pointing inside the site."""
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files: Files, config: Any) -> Files:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    files.append(File.generated(config, "index.md", content=readme_as_index(readme)))
    for path in sorted(RUNBOOKS.glob("*.md")):
        files.append(File.generated(config, f"runbooks/{path.name}", abs_src_path=str(path)))
    return files
