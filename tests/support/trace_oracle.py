"""The fuzzing oracle of the trace readers: any bytes, read by each reader, must give the pure-Python
reader's answer, or a clean TraceError, and nothing else.

`check(data)` takes the bytes as the events of a trace and asserts, for each of two targets:

- the compiled scanner (`_gpuscan.scan`) on them as one piece answers None or exactly the strict
  reading (msgspec on the whole piece, then `schema.scan`); where that is an error (invalid JSON
  outside the GPU events, which skimming does not notice), the Python skim's answer;
- the whole read path (`parse_trace`, in pieces small enough that the middle ones are skimmed) of
  a document holding them gives the same Trace, or a TraceError of the same kind, with the
  compiled scanner and without it (WARPWATCH_PURE_PYTHON's path); never another exception. The
  document is read in both layouts, Kineto's (one event per line) and one line (`json.dump`'s,
  cut by structure); where both give a Trace, it is the same.

benchmarks/fuzz_trace.py runs it coverage-guided (atheris); tests/trace/test_trace_fuzzing.py runs that
briefly and replays the kept findings. `SEEDS` are pieces of the real traces in ../shared/traces
and the hand-made edits of tests/trace/test_gpuscan.py.
"""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterator
from typing import Any

import msgspec

from support.paths import SHARED_TRACES
from warpwatch.errors import TraceError
from warpwatch.model import KernelLaunch
from warpwatch.runtime import native
from warpwatch.runtime.membudget import ReadLimits
from warpwatch.trace import parallel, parse_trace, pieces, skim, streams
from warpwatch.trace.schema import PART, PART_FAST, Interned, scan

SHARED = SHARED_TRACES
PIECE = 1_500
"""Piece size of the whole-path reads: a seed of a few KB is a first piece, skimmed ones, a tail."""
MAX_INPUT = 64 * 1024

_native: Any = native.load("warpwatch.trace._gpuscan")
"""The compiled scanner as the reader loads it (`skim`), or None (not built, or WARPWATCH_PURE_PYTHON=1)."""


@contextlib.contextmanager
def small_pieces() -> Iterator[None]:
    """The piece reader's sizes shrunk (as tests/trace/test_trace_pieces.py does), restored after."""
    saved = pieces.SEARCH_BYTES, streams.READ_BYTES, parallel.PARALLEL_MIN_BYTES
    pieces.SEARCH_BYTES, streams.READ_BYTES, parallel.PARALLEL_MIN_BYTES = 500, 700, 1 << 62
    try:
        yield
    finally:
        pieces.SEARCH_BYTES, streams.READ_BYTES, parallel.PARALLEL_MIN_BYTES = saved


def fields(launches: Any, correlations: Any, span: Any, lo: float, hi: float) -> str:
    """A reading, by `repr`: 1 and 1.0, or 0.0 and -0.0, differ."""
    return repr((launches, correlations, span, lo, hi))


def strict_piece(text: bytes) -> str | None:
    """The strict reading of a piece (None: an error there, or what skimming never answers)."""
    data = b"[" + text + b"]"
    try:
        try:
            events, fast = PART_FAST.decode(data), True
        except msgspec.ValidationError:
            events, fast = PART.decode(data), False
    except (msgspec.DecodeError, RecursionError):
        return None
    s = scan(events, fast, Interned())
    if s.bad is not None or s.span_bad is not None or s.hip_calls:
        return None
    return fields(s.launches, s.correlations, s.span, s.gpu_lo, s.gpu_hi)


def compiled(text: bytes) -> str | None:
    """The compiled scanner's reading of the piece (None: it sends the piece to Python)."""
    interned = Interned()
    got = _native.scan(text, len(text), KernelLaunch, interned.names, interned.dims)
    return None if got is None else fields(*got)


def python_skim(text: bytes) -> str | None:
    """What the Python reader makes of the piece when it skims it (None: it reads it whole)."""
    saved = skim.NATIVE
    skim.NATIVE = False
    try:
        s = skim.skim_scan(text, len(text), Interned())
    finally:
        skim.NATIVE = saved
    if s is None or s.bad is not None or s.span_bad is not None:
        return None
    return fields(s.launches, s.correlations, s.span, s.gpu_lo, s.gpu_hi)


def check_piece(text: bytes) -> bool:
    """The compiled scanner's contract on one piece; True when it answered.

    Its answer is the strict reading's. Where the piece is invalid JSON outside the GPU events
    (an edit that makes a kernel's category `"kernel, `, say), neither skimming reader decodes it
    (skim.py's documented price): then its answer is the Python skim's, never one of its own."""
    if _native is None:
        return False
    got = compiled(text)
    if got is None:
        return False
    expected = strict_piece(text)
    if expected is None:
        expected = python_skim(text)
    assert got == expected, ("the compiled scanner's answer is not Python's", text[:2000])
    return True


def document(text: bytes) -> bytes:
    """A trace whose events are `text`, laid out as Kineto does (one event after `\\n  `)."""
    return b'{"schemaVersion": 1, "traceEvents": [\n  ' + text + b"\n]}"


def document_one_line(text: bytes) -> bytes:
    """The same trace on one line, as `json.dump` writes it: `}, {` between the events (the
    other newlines of an edited input stay where they are; the reader cuts by structure)."""
    return b'{"schemaVersion": 1, "traceEvents": [' + text.replace(b"},\n  {", b"}, {") + b"]}"


def read_outcome(doc: bytes) -> str:
    """The Trace read from `doc` (its repr), or the kind of its TraceError."""
    try:
        trace = parse_trace(doc, "fuzz.json", limits=ReadLimits(piece_bytes=PIECE, workers=1))
    except TraceError as exc:
        assert exc.path == "fuzz.json" and exc.reason, exc
        return f"TraceError {exc.kind}"
    return repr(trace)


def check_document(text: bytes) -> str:
    """Both builds read the document of `text` alike, in both layouts (Kineto's, one event per
    line, and one line); a Trace read from both layouts is the same Trace. Returns the outcome
    of Kineto's layout."""
    outcomes = [_both_builds(layout(text)) for layout in (document, document_one_line)]
    line, one_line = outcomes
    if not line.startswith("TraceError") and not one_line.startswith("TraceError"):
        assert line == one_line, ("the two layouts read differently", line[:300], one_line[:300])
    return line


def _both_builds(doc: bytes) -> str:
    with small_pieces():
        compiled = read_outcome(doc) if _native is not None else None
        saved = skim.NATIVE
        skim.NATIVE = False
        try:
            python = read_outcome(doc)
        finally:
            skim.NATIVE = saved
    if compiled is not None:
        assert compiled == python, ("the two builds read the document differently", compiled[:300], python[:300])
    return python


def check(data: bytes) -> str:
    """Both targets on one input; the outcome of the whole read ('TraceError ...' or a Trace)."""
    data = data[:MAX_INPUT]
    check_piece(data)
    return check_document(data)


def _events(data: bytes) -> list[bytes]:
    """The events of a Kineto trace as written (`{` ... `}`, one after `},\\n  {`)."""
    parts = data.split(b"},\n  {")
    return [b"{" + e + b"}" for e in parts[1:-1]]


def seeds(max_bytes: int = 6_000) -> list[bytes]:
    """Runs of real events (each trace's first GPU events among their neighbours, and its start),
    and the hand-made edits of a real kernel event from tests/trace/test_gpuscan.py."""
    out: list[bytes] = []
    for path in sorted(SHARED.rglob("*.json*")):
        if not path.is_file() or not path.name.endswith((".json", ".json.gz")) or path.stat().st_size > 4_000_000:
            continue
        data = path.read_bytes()
        with contextlib.suppress(OSError, EOFError):
            data = gzip.decompress(data) if path.name.endswith(".gz") else data
        events = _events(data)
        for at in {0, next((i for i, e in enumerate(events) if b'"cat": "kernel"' in e), 0)}:
            run, size = [], 0
            for e in events[max(0, at - 3) :]:
                if size + len(e) > max_bytes:
                    break
                run.append(e)
                size += len(e) + 4
            if run:
                out.append(b",\n  ".join(run))
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "trace"))  # where test_gpuscan is
    import test_gpuscan as edits  # (its module-level cases: imported here, after this module)

    out += [edits.piece(e) for e in edits.ANSWERED + edits.REFUSED + edits.NESTED]
    return out
