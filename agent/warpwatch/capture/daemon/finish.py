"""How long a Kineto client took to finish a window's trace: from the end of its recording to the
last write of its file, read off the file itself.

Kineto marks where the recording ended with an instant event, `Record Window End`, the last of
`traceEvents`; its `ts` is in microseconds, since `baseTimeNanoseconds` (near the top of the file,
or at its end after the trace's log lines) where the trace has that field (Kineto 2023 and later),
else since the epoch. Kineto's profiler loop wakes once a second (`KINETO_TICK_S`): the wake that
finds the window over stops the recording (its `Record Window End`), the next one processes the
activity buffers and writes the JSON (to `<name>.tmp`, renamed when complete), so the file's mtime
is one tick after the recording's end plus that work. The work, in a thread of the traced process,
is what the daemon source charges a window (`overhead`), at most what it could cost the process's
own threads: not the tick's wait, nor the wait for the agent's next poll, which cost the process
nothing and which the stop (`warpwatch_capture_stop_seconds`) includes. Measured with torch 2.13
on the CPU (no activity to process): 0.995-0.999 s from the end to the file, so no work at all.

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
KINETO_TICK_S = 1.0
"""Kineto's profiler loop period (`ActivityProfilerController`, 1,000 ms)."""
CLOCK_SLACK_S = 1.0
"""How far the recording's end may lie after the file's last write (clock conversion) and count as 0."""
BASE = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')
WINDOW_END = re.compile(rb'"name"\s*:\s*"Record Window End"[^{}]*?"ts"\s*:\s*(\d+(?:\.\d+)?)')


def work_seconds(path: Path) -> float | None:
    """Seconds the client worked to finish the trace once recorded: `finish_seconds` less one tick
    of Kineto's loop (at least 0); None where `finish_seconds` is None."""
    finish = finish_seconds(path)
    return None if finish is None else max(0.0, finish - KINETO_TICK_S)


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
