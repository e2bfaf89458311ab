"""One captured window: its file opened (confined to its folder), read and analysed into a `WindowResult`.

Counts nothing (the service records the result); logs one `window` line per window, the same
failure every round rate-limited."""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ..analysis.window import analyze
from ..capture import CapturedWindow
from ..capture.confine import RefusedFile, open_confined
from ..errors import TraceError
from ..export.builder import WindowResult
from ..logs import RepeatFilter, event, limited_event
from ..model import DeviceProperties, Fault, Outcome
from ..runtime.membudget import MemoryBudget
from ..trace import read_trace

log = logging.getLogger("warpwatch.service")

_NUMBERS = re.compile(r"\d+")


def repeat_key(*parts: str) -> tuple[str, ...]:
    """Errors that differ only in numbers (pids, window ids, sizes) repeat each other."""
    return tuple(_NUMBERS.sub("#", p) for p in parts)


def _first(items: Iterable[str], n: int = 16) -> str:
    """At most `n` items, comma-separated, then how many more: a trace may name 100,000 GPUs."""
    it = iter(items)
    shown = list(itertools.islice(it, n + 1))
    more = sum(1 for _ in it) + 1 if len(shown) > n else 0
    return ",".join(shown[:n]) + (f",+{more} more" if more else "")


def process_identity(cw: CapturedWindow, rank: int | None) -> str:
    """Which traced process a window came from: windows of one process are pooled over time."""
    labels = ",".join(f"{k}={v}" for k, v in sorted(cw.labels.items()))
    return f"{cw.source}|{labels}|rank={'' if rank is None else rank}"


@dataclass(frozen=True)
class WindowReading:
    """What reading a window needs from the service."""

    max_trace_bytes: int
    memory: MemoryBudget
    gpu_properties: dict[int, DeviceProperties] | None
    cancelled: Callable[[], bool]
    repeats: RepeatFilter


def read_window(cw: CapturedWindow, how: WindowReading) -> WindowResult:
    """Open (confined to its folder), read and analyse one window; count nothing here (the
    caller records the result)."""
    process = process_identity(cw, None)
    if cw.path is None or cw.error is not None:
        outcome: Outcome = "timed_out" if cw.outcome == "timed_out" else "failed"
        _log_failure(how, cw, outcome, cw.error or "no trace file")
        cw.done(True)
        return WindowResult(cw.source, process, outcome, fault=("capture", cw.failure_kind))
    t0 = time.perf_counter()
    try:
        with open_confined(cw.path) as opened:
            trace = read_trace(
                opened.reader_path,
                gpu_properties=how.gpu_properties,
                limits=how.memory.read_limits(how.max_trace_bytes, cancel=how.cancelled),
            )
        analysis = analyze(trace, requested=cw.requested)
    except RefusedFile as exc:
        fault: Fault = ("read", "io_error" if exc.reason == "unreadable" else f"refused_{exc.reason}")
        return _failed(how, cw, process, t0, fault, f"refused: {exc.detail}")
    except TraceError as exc:
        return _failed(how, cw, process, t0, ("read", exc.kind), exc.reason)
    except OSError as exc:  # a reader letting an I/O error through
        return _failed(how, cw, process, t0, ("read", "io_error"), f"cannot read: {exc.strerror or exc}")
    except Exception as exc:
        return _failed(how, cw, process, t0, ("analysis", "unexpected"), f"unexpected {type(exc).__name__}: {exc}", exc)
    seconds = time.perf_counter() - t0
    outcome = "ok" if analysis.launch_count > 0 else "empty"
    event(
        log,
        "window",
        source=cw.source,
        file=cw.path.name,
        outcome=outcome,
        seconds=round(seconds, 4),
        launches=analysis.launch_count,
        kernels=len(analysis.kernels),
        gpus=_first(str(d.device) for d in analysis.devices) or "none",
        window_ms=round(analysis.window.duration / 1000.0, 3),
        bounds=analysis.window.bounds,
        rank=analysis.rank,
    )
    cw.done(True)
    return WindowResult(cw.source, process_identity(cw, analysis.rank), outcome, seconds, analysis)


def _failed(
    how: WindowReading,
    cw: CapturedWindow,
    process: str,
    t0: float,
    fault: Fault,
    error: str,
    exc: BaseException | None = None,
) -> WindowResult:
    seconds = time.perf_counter() - t0
    _log_failure(how, cw, "failed", error, seconds, exc)
    cw.done(True)
    return WindowResult(cw.source, process, "failed", seconds, fault=fault)


def _log_failure(
    how: WindowReading,
    cw: CapturedWindow,
    outcome: Outcome,
    error: str,
    seconds: float | None = None,
    exc: BaseException | None = None,
) -> None:
    """One `window` line; the same failure every round (a bad file replayed, a process that
    never answers) is rate-limited."""
    file = cw.path.name if cw.path is not None else None
    # The file name is kept as it is: distinct files are distinct faults (only numbers in the
    # error, sizes or pids, are folded).
    limited_event(
        log,
        how.repeats,
        (*repeat_key(cw.source, outcome, error), file),
        "window",
        logging.ERROR if exc is not None else logging.WARNING,
        exc_info=exc,
        source=cw.source,
        file=file,
        outcome=outcome,
        seconds=None if seconds is None else round(seconds, 4),
        error=error,
    )
