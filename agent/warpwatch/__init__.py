"""warpwatch: per-kernel GPU occupancy from Kineto traces, corrected for profiler artefacts.

Pipeline: capture (where windows come from) -> trace (bytes to typed kernel launches)
-> analysis (pure math) -> export (Prometheus) / report (CLI tables).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
