"""warpwatch: per-kernel GPU occupancy from Kineto traces, corrected for profiler artefacts.

Pipeline: capture (where windows come from) -> trace (bytes to typed kernel launches)
-> analysis (pure math) -> export (Prometheus) / report (CLI tables).
"""

from __future__ import annotations

# The one place the version is written: pyproject.toml reads it ([tool.setuptools.dynamic]), and the
# image label and tag, the chart's version and appVersion follow it (tests/deploy/test_release.py).
__version__ = "0.1.0"

__all__ = ["__version__"]
