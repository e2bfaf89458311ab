"""Kineto's invalid JSON, made valid: bare `inf`/`nan` (and `Infinity`/`NaN`) written as numbers,
and raw control characters inside strings.

The reader never repairs a whole document (over a 1.5 GiB document such a pass held the GIL for
30 s): the piece reader (`pieces`) decodes strictly first, and only when the decoder stopped at one
of these tokens (`repairable`) does it `sanitize` that piece, and only that piece, then decode it
again. `warpwatch fix`, which holds its (already read) document whole, repairs it the same way.
"""

from __future__ import annotations

import re

_NON_FINITE = re.compile(rb"-?(?:Infinity|inf|NaN|nan)")

# A JSON string, or a bare non-finite token outside strings. Strings are matched first so
# that `"inf"` inside a string is left alone.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|-?(?:Infinity|inf|NaN|nan)\b', re.DOTALL)
_CONTROL = re.compile(rb"[\x00-\x1f]")


def repairable(data: bytes, at: int) -> bool:
    """Did the decoder stop at a token Kineto writes invalidly? (`at`: the byte it stopped at)"""
    return at < len(data) and (data[at] < 0x20 or _NON_FINITE.match(data, at) is not None)


def sanitize(data: bytes) -> bytes:
    """Make Kineto's known invalid JSON valid: quote bare inf/nan, escape raw control characters.

    Applied to one piece (at most `pieces.MAX_PIECES` x `piece_bytes`), never to a whole document."""

    def fix(m: re.Match[bytes]) -> bytes:
        tok = m.group(0)
        if tok[:1] == b'"':
            return _CONTROL.sub(lambda c: b"\\u%04x" % c.group(0)[0], tok)
        low = tok.lower()
        if b"nan" in low:
            return b'"nan"'
        return b'"-inf"' if tok.startswith(b"-") else b'"inf"'

    return _TOKENS.sub(fix, data)
