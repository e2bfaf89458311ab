"""Untrusted text for a terminal: every character that is not printable shown as an escape.

Kernel names, GPU names and file names come from trace files anyone may have written; printed
as they are, control characters and bidirectional formatting could rewrite what a terminal shows.
"""

from __future__ import annotations

import re

_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def printable(text: str) -> str:
    """`text` for a terminal: every character that is not printable (controls, line separators,
    bidirectional and zero-width formatting, lone surrogates) shown as a `\\xNN`/`\\uNNNN` escape."""
    return _UNPRINTABLE.sub(_escape_char, text)


def _escape_char(m: re.Match[str]) -> str:
    c = m.group(0)
    if c.isprintable():
        return c
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
