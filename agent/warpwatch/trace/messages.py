"""The wording of `TraceError` messages that more than one reader gives: the one-process piece
reader (`pieces`, with its streams and collector) and the parallel one (`parallel`) say the same
thing in the same words, so a document fails alike whichever path read it.
"""

from __future__ import annotations


def too_large(max_bytes: int) -> str:
    return f"larger than the {max_bytes:,}-byte limit once decompressed (raise max_trace_bytes to read it)"


def over_budget(cap: int, budget: str) -> str:
    return f"keeps more than {cap:,} kernel launches, more than the memory budget allows ({budget})"


def not_json(head: bytes) -> str:
    return f"not JSON (starts with {head!r})"
