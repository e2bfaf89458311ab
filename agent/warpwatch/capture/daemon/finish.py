"""How long a Kineto client took to finish a window's trace: from the end of its recording to the
last write of its file, read off the file itself.

Kineto marks where the recording ended with an instant event, `Record Window End`, the last of
`traceEvents`; its `ts` is in microseconds, since `baseTimeNanoseconds` (near the top of the file,
or at its end after the trace's log lines) where the trace has that field (Kineto 2023 and later), else since the epoch. After the
recording ends, the client's profiler thread processes the activity buffers and writes the JSON
(to `<name>.tmp`, renamed when complete): the file's mtime is when that ended. What lies between
is the work a window costs the traced process beyond the recording itself, and what the daemon
source charges a window (`overhead`): not the wait for Kineto's next poll before it, which costs
the process nothing, and which the stop (`warpwatch_capture_stop_seconds`) includes.

Only the file's first and last `EDGE_BYTES` are read, through a descriptor that follows no link
and blocks on nothing (a FIFO in its place is refused by its type); a trace without the markers
gives None, and the stop is charged instead.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

EDGE_BYTES = 8192
"""Bytes read at each end of the file: the markers sit in the first and last few hundred."""
CLOCK_SLACK_S = 1.0
"""How far the recording's end may lie after the file's last write (clock conversion) and count as 0."""
BASE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
WINDOW_END = re.compile(rb'"name"\s*:\s*"Record Window End"[^{}]*?"ts"\s*:\s*(\d+(?:\.\d+)?)')


def finish_seconds(path: Path) -> float | None:
    """Seconds from the recording's end to the file's last write; None when the file is not a
    plain file, cannot be read, or lacks the markers."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        head = os.pread(fd, EDGE_BYTES, 0)
        tail = os.pread(fd, EDGE_BYTES, max(0, st.st_size - EDGE_BYTES))
    except OSError:
        return None
    finally:
        os.close(fd)
    ends = WINDOW_END.findall(tail)
    if not ends:
        return None
    base = BASE.search(head) or BASE.search(tail)
    ended = (int(base[1]) / 1e9 if base else 0.0) + float(ends[-1]) / 1e6
    seconds = st.st_mtime - ended
    # Kineto converts its steady clock to wall time: a trace written at once can end a few
    # milliseconds after its file's mtime. A clock far off: no figure rather than a wrong one.
    return max(0.0, seconds) if -CLOCK_SLACK_S <= seconds < 3600.0 else None
