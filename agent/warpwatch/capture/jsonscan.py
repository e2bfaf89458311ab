"""Is a text one whole JSON object yet? A streaming check over chunks, in bounded memory.

A trace written in chunks is, between two of them, a prefix of its final text, and such a prefix
can end in `}` (`{"traceEvents": [{...}`). `JsonScan` tells the whole text from its prefixes by
structure alone: the brackets outside strings balance, no string is left open, the text begins
with `{`, its last non-blank byte is `}`, and it holds no NUL byte (no JSON text does, Kineto's
included; a file preallocated or extended with zeros by its writer is not finished). For every
prefix of a JSON object text (Kineto's invalid ones included: a bare `inf`, control characters
in strings) the answer is exact, since inside the top-level object the nesting depth is at least
1 until its closing `}`. Other text may get either answer; whoever reads the file next says what
is wrong with it.

Memory stays at a few times one chunk whatever the file's size, and no byte goes through a Python
loop unless it is hostile: each chunk is reduced with bytes methods (C loops) before anything is
counted:

1. escapes are dropped: `\\\\` pairs, then `\\"` (a backslash left over at the end of a chunk is
   carried into the next one, where its escape takes effect);
2. every byte but `"{}[]` is deleted (`bytes.translate`);
3. adjacent `""`, `{}` and `[]` are deleted, a few passes. Removing two adjacent quotes leaves
   every other byte in or out of a string as it was, and an adjacent bracket pair is either
   inside a string or balanced, so the answer does not change; what is left of a real trace is a
   handful of brackets per chunk.

What is left is counted: at once when it holds no quote, else byte by byte, at most
`MAX_WALKED` bytes per text (hostile input, e.g. random bytes) before the scan gives up and the
text counts as not complete.
"""

from __future__ import annotations

__all__ = ["CHUNK", "MAX_WALKED", "JsonScan"]

CHUNK = 1 << 20
"""Bytes read and reduced at a time by callers that stream a file."""
MAX_WALKED = 1 << 20
"""Bytes per text that may be counted one at a time (module doc) before the scan gives up."""

_BLANKS = b" \t\n\r"  # JSON's whitespace
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"{}[]')
_MAX_PASSES = 16  # a real trace nests a few levels per event; what passes leave is counted anyway
_QUOTE, _OPENERS = ord('"'), frozenset(b"{[")


class JsonScan:
    """Feed a text's bytes in order with `feed`; `complete()` says whether what was fed is one
    whole JSON object (module doc). `gave_up` once the text is known not to be one (it does not
    start with `{`, it closed more than it opened) or is too hostile to judge; feeding more is then
    a no-op."""

    __slots__ = ("_carry", "_depth", "_first", "_in_string", "_last", "_walked", "gave_up")

    def __init__(self) -> None:
        self._carry = b""  # a backslash from the end of the previous chunk
        self._in_string = False
        self._depth = 0
        self._first = b""  # the first and last non-blank bytes seen
        self._last = b""
        self._walked = 0
        self.gave_up = False

    def feed(self, chunk: bytes) -> None:
        if self.gave_up or not chunk:
            return
        if b"\0" in chunk:  # in no JSON text, even Kineto's; a sparse or preallocated file is full of them
            self.gave_up = True
            return
        self._note_ends(chunk)
        if self.gave_up:
            return
        if self._carry:
            chunk, self._carry = self._carry + chunk, b""
        if b"\\" in chunk:
            chunk = chunk.replace(b"\\\\", b"")
            if chunk.endswith(b"\\"):  # it escapes the next chunk's first byte
                chunk, self._carry = chunk[:-1], b"\\"
            chunk = chunk.replace(b'\\"', b"")
        rest = chunk.translate(None, _NOT_STRUCTURE)
        for _ in range(_MAX_PASSES):
            size = len(rest)
            rest = rest.replace(b'""', b"").replace(b"{}", b"").replace(b"[]", b"")
            if len(rest) == size:
                break
        if b'"' not in rest:
            if not self._in_string:
                closers = rest.count(b"}") + rest.count(b"]")
                self._depth += len(rest) - 2 * closers
        else:
            self._walk(rest)
        if self._depth < 0:
            self.gave_up = True

    def complete(self) -> bool:
        """What was fed so far is one whole JSON object (trailing blanks allowed)."""
        return (
            not self.gave_up
            and self._first == b"{"
            and self._last == b"}"
            and self._depth == 0
            and not self._in_string
            and not self._carry
        )

    def _note_ends(self, chunk: bytes) -> None:
        if not self._first:
            head = chunk.lstrip(_BLANKS)
            if head:
                self._first = head[:1]
                if self._first != b"{":
                    self.gave_up = True
                    return
        tail = chunk[-64:].rstrip(_BLANKS) or chunk.rstrip(_BLANKS)
        if tail:
            self._last = tail[-1:]

    def _walk(self, rest: bytes) -> None:
        self._walked += len(rest)
        if self._walked > MAX_WALKED:
            self.gave_up = True
            return
        in_string, depth = self._in_string, self._depth
        for byte in rest:
            if byte == _QUOTE:
                in_string = not in_string
            elif not in_string:
                depth += 1 if byte in _OPENERS else -1
                if depth < 0:
                    break
        self._in_string, self._depth = in_string, depth
