"""Bytes that are not JSON in the middle of a real trace: a clean `invalid_trace` naming the byte, in
bounded memory and time, in both builds (the compiled scanner and WARPWATCH_PURE_PYTHON=1).

Each read runs in a subprocess under RLIMIT_AS, so a reader that grows without bound (issue 20: one
invalid UTF-8 byte in a middle piece grew to 24 GB) fails here at once with a MemoryError instead of
eating the machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from support.paths import HTA, ROOT

pytestmark = pytest.mark.slow  # (a 54 MB real trace read twice in a fresh process: 2-7 s each)

LIMIT_AS = 1536 * 1024**2
"""Address space for the reading process: the 54 MB trace, its copy and the reader fit in it
with room to spare (about 600 MB are used); a leak of one piece per retried cut does not."""

_READ = r"""
import gzip, json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from warpwatch.errors import TraceError
from warpwatch.runtime.membudget import ReadLimits
from warpwatch.trace import parse_trace
data = gzip.decompress(open(sys.argv[2], "rb").read())
if sys.argv[4] == "compact":
    data = json.dumps(json.loads(data)).encode()
# the first kernel after the middle of the document (a middle piece: not the first, not the
# tail), with the edit inserted at the first byte of its name, or before the event
kernel = data.index(b'"cat": "kernel"', len(data) // 2)
if sys.argv[5] == "name":
    at = data.index(b'"name": "', kernel) + len(b'"name": "')
else:
    at = data.rindex(b'{"ph"' if sys.argv[4] == "compact" else b"\n  {", 0, kernel) + (sys.argv[4] != "compact") * 3
data = data[:at] + sys.argv[3].encode("latin-1") + data[at:]
out = {"at": at, "results": []}
for workers in (1, 2):
    try:
        parse_trace(data, "doc.json", limits=ReadLimits(piece_bytes=1024**2, workers=workers))
        out["results"].append({"ok": True})
    except TraceError as exc:
        out["results"].append({"kind": exc.kind, "reason": exc.reason})
print(json.dumps(out))
"""


def _read_edited(edit: str, layout: str, pure: bool, where: str = "name") -> tuple[int, list[dict[str, Any]]]:
    """(where the edit is, each read's outcome: workers 1 and 2)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "agent"), "WARPWATCH_PURE_PYTHON": "1" if pure else "0"}
    trace = HTA / "df_index_resolver" / "df_index_resolver.json.gz"
    proc = subprocess.run(
        [sys.executable, "-c", _READ, str(LIMIT_AS), str(trace), edit, layout, where],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    return got["at"], got["results"]


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "python"])
@pytest.mark.parametrize("layout", ["kineto", "compact"])
def test_an_invalid_utf8_byte_in_a_middle_piece_is_invalid_trace_naming_its_byte(layout: str, pure: bool) -> None:
    at, results = _read_edited("\xff", layout, pure)
    assert at > 20_000_000
    for result in results:
        reason = f"invalid JSON (Invalid UTF-8 encoded string (byte {at:,}))"
        assert result == {"kind": "invalid_trace", "reason": reason}


@pytest.mark.parametrize("pure", [False, True], ids=["compiled", "python"])
def test_an_event_that_never_closes_is_invalid_trace_after_a_few_cuts_not_every_one(pure: bool) -> None:
    """`{"a": [` before an event of a one-line document: every cut after it ends inside that
    object, and msgspec says "truncated" as for a wrong cut. Retried at each of the 16,000 cuts
    of 4 MiB (and, before, leaking a copy of the piece at each), it ran out of memory; now a few
    retries, then the error names where the events stop decoding."""
    at, results = _read_edited('{"a": [', "compact", pure, where="event")
    for result in results:
        assert result["kind"] == "invalid_trace", result
        reason = result["reason"]
        assert reason.startswith("invalid JSON (the events from byte ") and "truncated" in reason, reason
        start = int(reason.split("byte ")[1].split(" ")[0].replace(",", ""))
        assert at - 1024**2 - 256 * 1024 <= start <= at  # the piece that holds the edit
