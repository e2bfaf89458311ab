"""Where things are: the checkout, and the real traces recorded by others (../shared/traces)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED_TRACES = Path(os.environ.get("WARPWATCH_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
HTA = SHARED_TRACES / "facebookresearch__HolisticTraceAnalysis" / "tests" / "data"
