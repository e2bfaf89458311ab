"""Every picture of the docs is drawn by docs/pictures/make.py from real data, and the committed
SVGs are what it draws now (docs/development.md, "The docs").

What the window-edge picture claims is checked on its numbers: the traces hold well under the truth
of the kernels that straddle the windows' edges most, and warpwatch's corrected shares come back to
the truth computed from the whole stream.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from support.paths import ROOT

PICTURES = ROOT / "docs" / "pictures"
MAKE = PICTURES / "make.py"


def test_every_picture_has_its_drawing_and_every_page_shows_pictures_that_exist() -> None:
    script = MAKE.read_text(encoding="utf-8")
    svgs = {p.name for p in PICTURES.glob("*.svg")}
    assert svgs == {"window-edges.svg", "reported-vs-computed.svg"}
    for name in svgs:
        assert f'"{name}": ' in script, f"{name} has no drawing in make.py"
    shown = set()
    for page in (ROOT / "docs").glob("*.md"):
        shown |= set(re.findall(r"\]\(pictures/([^)]+)\)", page.read_text(encoding="utf-8")))
    assert shown == svgs


@pytest.mark.slow
def test_the_committed_pictures_are_what_the_script_draws_now() -> None:
    proc = subprocess.run([sys.executable, str(MAKE), "--check"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_window_edge_picture_shows_the_drop_and_the_correction() -> None:
    svg = (PICTURES / "window-edges.svg").read_text(encoding="utf-8")
    values = [float(v) for v in re.findall(r"font-size='10' text-anchor='middle'[^>]*>([0-9.]+)</text>", svg)]
    assert len(values) == 15  # five kernels x (truth, kept, corrected), shortest kernels first
    triples = [values[i : i + 3] for i in range(0, 15, 3)]
    truth, kept, corrected = zip(*triples, strict=True)
    assert kept[-1] < 0.35 * truth[-1]  # 15 ms launches in 20 ms windows: kept one time in four
    assert abs(kept[0] - truth[0]) < 0.05 * truth[0]  # 20 us launches: nearly always kept
    for t, c in zip(truth, corrected, strict=True):
        assert abs(c - t) < 0.15 * t
