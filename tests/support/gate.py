"""A gated writer for the evidence store (`EvidenceStore(opener=Gate())`): a copy waits until the
test opens the gate, so what happens before the copy ends is seen without timing anything."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import IO

WAIT_S = 30.0
"""Only an upper bound on a wait that ends when something else happens; nothing asserts on time."""


class Gate:
    """Opens the files the store writes traces to; each write waits until `open` is set. `entered`
    is set at the first write: a copy is then in progress."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()

    def __call__(self, path: Path) -> Gated:
        return Gated(path.open("wb"), self)


class Gated:
    def __init__(self, raw: IO[bytes], gate: Gate) -> None:
        self.raw, self.gate = raw, gate

    def write(self, data: bytes) -> int:
        self.gate.entered.set()
        self.gate.open.wait(WAIT_S)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()

    def fileno(self) -> int:
        return self.raw.fileno()

    def __enter__(self) -> Gated:
        return self

    def __exit__(self, *exc: object) -> None:
        self.raw.close()
