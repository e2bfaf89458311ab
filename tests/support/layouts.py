"""The two layouts of a Kineto trace file, and the shared traces' documents.

One event per line is Kineto's writer's layout (most of ../shared/traces); the whole document on one
line is `json.dump`'s (HTA's sampled_rank-0 and base traces, TraceLens's published traces, and
`warpwatch fix`'s output).
"""

from __future__ import annotations

import json
from typing import Any


def is_one_line(text: bytes) -> bool:
    """No newline before the first event nor between it and the next (`pieces.head` looks before it)."""
    at = text.find(b'"traceEvents"')
    start = text.index(b"[", at if at >= 0 else 0) + 1
    first = text.find(b"{", start)
    return b"\n" not in text[start:first] and b"\n" not in text[first : text.find(b"}, {", first) + 4]


def one_line(doc: Any) -> bytes:
    """As json.dump writes it."""
    return json.dumps(doc).encode()


def event_per_line(doc: Any) -> bytes:
    """As Kineto writes it: the top-level keys, then each event on a line of its own."""
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    body = b"[\n  " + b",\n  ".join(json.dumps(e).encode() for e in events) + b"\n]"
    if isinstance(doc, list):
        return body
    head = b"".join(json.dumps({k: v}).encode()[1:-1] + b",\n  " for k, v in doc.items() if k != "traceEvents")
    return b"{\n  " + head + b'"traceEvents": ' + body + b"\n}"


def other_layout(text: bytes) -> bytes:
    """The same document in the layout `text` is not in."""
    doc = json.loads(text)
    return event_per_line(doc) if is_one_line(text) else one_line(doc)
