"""`gc_paused`: no cyclic garbage collection while many acyclic objects are built.

Shared by the trace reader and the analysis (which must not import the reader for it).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while millions of acyclic objects are being built (the
    collector would walk every one of them; none of them forms a cycle)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
