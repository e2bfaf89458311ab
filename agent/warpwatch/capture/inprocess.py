"""In-process capture: profile this process's GPU activity in short periodic windows.

    import warpwatch.inprocess

    handle = warpwatch.inprocess.attach(period_s=60, window_s=2, trace_dir="/tmp/warpwatch")
    ...
    handle.stop()

A background thread starts ``torch.profiler.profile(activities=[ProfilerActivity.CUDA])``
every `period_s`, lets it record for `window_s`, stops it on the same thread (Kineto wants
start and stop on one thread; CUPTI records the whole process's GPU activity regardless), and
exports the Chrome trace. Files are written as ``<name>.tmp`` and renamed when complete, so a
warpwatch sidecar watching `trace_dir` with a ``dir:`` source never reads half a file.

Costs and conflicts: only one Kineto trace runs per process at a time (a window that finds
the profiler busy is skipped and counted in `errors`), CUPTI allows one subscriber per
process (Nsight tools in the same process conflict), and the first session can stall the
process for seconds.

Never harming the process: a window still recording at interpreter exit is stopped before the
interpreter finalizes (tearing it down under Kineto crashed the process with SIGSEGV), and no
window is recorded while `max_pending` of this process's traces wait unread in `trace_dir` (a
sidecar that is down must not fill the served process's disk; counted in `skipped`).

torch is imported only when `attach` is called; ``import warpwatch`` never imports it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ..config.units import check_count, check_seconds
from ..errors import ConfigError

log = logging.getLogger(__name__)

TraceCallback = Callable[[Path], None]


class Attachment:
    """A running in-process capture; `stop()` it, or use it as a context manager.

    Counters (read them any time): `windows` traces produced, `skipped` windows not recorded
    because `max_pending` traces wait unread, `errors` windows that failed or
    were skipped, `last_error` the latest failure's text, `last_path` the latest trace file.
    """

    def __init__(
        self,
        *,
        torch: Any,
        period_s: float,
        window_s: float,
        trace_dir: Path,
        owns_trace_dir: bool,
        on_trace: TraceCallback | None,
        record_cpu: bool,
        first_delay_s: float,
        max_pending: int,
    ) -> None:
        self._torch = torch
        self.period_s = period_s
        self.window_s = window_s
        self.trace_dir = trace_dir
        self._owns_trace_dir = owns_trace_dir
        self._on_trace = on_trace
        self._record_cpu = record_cpu
        self._first_delay_s = first_delay_s
        self.max_pending = max_pending
        self.skipped = 0
        self._waiting = False
        self._stop = threading.Event()
        self.windows = 0
        self.errors = 0
        self.last_error: str | None = None
        self.last_path: Path | None = None
        self._host = socket.gethostname().replace("/", "_") or "host"
        self._thread = threading.Thread(target=self._run, name="warpwatch-inprocess", daemon=True)

    def _start(self) -> None:
        # A window still recording when the interpreter exits would be torn down under Kineto's
        # feet: the served process then dies of SIGSEGV at exit (seen with torch 2.13 recording
        # CPU operators). Stop it cleanly before the interpreter finalizes.
        atexit.register(self._stop_at_exit)
        self._thread.start()

    def _stop_at_exit(self) -> None:
        self.stop(timeout_s=self.window_s + 30.0)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop capturing; a window in progress is stopped and discarded. Idempotent.

        Waits up to `timeout_s` (default: one window plus 30 s for the export) for the thread.
        """
        self._stop.set()
        atexit.unregister(self._stop_at_exit)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(self.window_s + 30.0 if timeout_s is None else timeout_s)
        if self._owns_trace_dir and not self._thread.is_alive():
            shutil.rmtree(self.trace_dir, ignore_errors=True)

    def __enter__(self) -> Attachment:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------ thread

    def _run(self) -> None:
        next_start = time.monotonic() + self._first_delay_s
        while not self._stop.wait(max(0.0, next_start - time.monotonic())):
            # Keep the grid of start times; after a slow window, skip to the next slot.
            next_start += self.period_s
            if next_start < time.monotonic():
                next_start = time.monotonic() + self.period_s
            if self._waiting_for_reader():
                self.skipped += 1
                continue
            try:
                path = self._one_window()
            except Exception as exc:  # a bad window is counted, never fatal
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("warpwatch in-process window failed: %s", self.last_error)
                continue
            if path is not None:
                self._deliver(path)

    def _waiting_for_reader(self) -> bool:
        """True while `max_pending` traces wait unread; logs when that starts and ends."""
        waiting = self._pending() >= self.max_pending
        if waiting and not self._waiting:
            log.warning(
                "warpwatch in-process: %d traces wait unread in %s; no window until they are read "
                "(is the sidecar running?)",
                self.max_pending,
                self.trace_dir,
            )
        elif self._waiting and not waiting:
            log.info("warpwatch in-process: the traces were read; windows resume")
        self._waiting = waiting
        return waiting

    def _pending(self) -> int:
        """This process's finished traces still in `trace_dir` (a private folder holds none)."""
        if self._owns_trace_dir:
            return 0
        prefix = f"{self._host}_{os.getpid()}."
        try:
            with os.scandir(self.trace_dir) as entries:
                return sum(1 for e in entries if e.name.startswith(prefix) and e.name.endswith(".pt.trace.json"))
        except OSError:
            return 0

    def _activities(self) -> list[Any]:
        profiler = self._torch.profiler
        supported = set(profiler.supported_activities())
        wanted = [profiler.ProfilerActivity.CUDA]
        if self._record_cpu:
            wanted.append(profiler.ProfilerActivity.CPU)
        return [a for a in wanted if a in supported]

    def _one_window(self) -> Path | None:
        """Record one window and write its trace; None when stopped during the window."""
        final = self.trace_dir / f"{self._host}_{os.getpid()}.{time.time_ns()}.pt.trace.json"
        tmp = final.with_name(final.name + ".tmp")
        activities = self._activities()
        start_ns = time.time_ns()
        if activities:
            prof = self._torch.profiler.profile(activities=activities)
            prof.start()
            try:
                stopped = self._stop.wait(self.window_s)
            finally:
                prof.stop()
            if stopped:
                return None
            try:
                prof.export_chrome_trace(str(tmp))
                os.replace(tmp, final)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
        else:
            # This torch has no CUDA profiler (a CPU-only build): nothing can be recorded, but
            # the window still happened, so write a trace with only its span.
            if self._stop.wait(self.window_s):
                return None
            _write_atomically(final, self._empty_trace(final, start_ns, time.time_ns()))
        self.windows += 1
        self.last_path = final
        return final

    def _empty_trace(self, final: Path, start_ns: int, end_ns: int) -> dict[str, Any]:
        base_ns = start_ns - start_ns % 1_000_000_000
        trace: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [],
            "displayTimeUnit": "ms",
            "baseTimeNanoseconds": base_ns,
            "traceEvents": [
                {
                    "ph": "X",
                    "cat": "Trace",
                    "name": "PyTorch Profiler (0)",
                    "pid": "Spans",
                    "tid": "PyTorch Profiler",
                    "ts": (start_ns - base_ns) / 1000.0,
                    "dur": (end_ns - start_ns) / 1000.0,
                    "args": {"Op count": 0},
                }
            ],
            "traceName": str(final),
            "warpwatch": {"synthetic": True, "reason": "this torch build cannot profile CUDA activity"},
        }
        distributed = _distributed_info(self._torch)
        if distributed is not None:
            trace["distributedInfo"] = distributed
        return trace

    def _deliver(self, path: Path) -> None:
        if self._on_trace is None:
            return
        try:
            self._on_trace(path)
        except Exception as exc:  # the callback's failure must not stop capturing
            self.errors += 1
            self.last_error = f"on_trace: {type(exc).__name__}: {exc}"
            log.warning("warpwatch in-process callback failed: %s", self.last_error)
        finally:
            if self._owns_trace_dir:
                # Nobody else knows this private folder: the callback had its chance.
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def _write_atomically(final: Path, content: dict[str, Any]) -> None:
    tmp = final.with_name(final.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(content, fh)
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _distributed_info(torch: Any) -> dict[str, Any] | None:
    try:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return None
        return {
            "backend": str(dist.get_backend()),
            "rank": int(dist.get_rank()),
            "world_size": int(dist.get_world_size()),
        }
    except Exception:
        return None


def attach(
    *,
    period_s: float,
    window_s: float,
    trace_dir: str | os.PathLike[str] | None = None,
    serve_port: int | None = None,
    on_trace: TraceCallback | None = None,
    record_cpu: bool = False,
    first_delay_s: float = 0.0,
    max_pending: int = 8,
) -> Attachment:
    """Start profiling this process: one `window_s` window every `period_s` seconds.

    Parameters:
        trace_dir: folder for the traces, created if missing; files stay there for a sidecar's
            ``dir:`` source to pick up and delete. None: a private temporary folder, each file
            deleted once `on_trace` returned (so `on_trace` is then required).
        serve_port: reserved for serving metrics from inside the process; not available yet.
        on_trace: called on the capture thread with each finished trace file.
        record_cpu: also record CPU operators (much larger traces).
        first_delay_s: wait this long before the first window.
        max_pending: record no window while this many of this process's traces wait unread
            in `trace_dir` (counted in `skipped`): nobody reading must not fill the disk.

    Raises ConfigError for invalid settings and ImportError when torch is missing.
    """
    _check_settings(period_s, window_s, first_delay_s, max_pending, serve_port, trace_dir is None and on_trace is None)
    import torch  # lazily: warpwatch itself never needs torch

    folder = _trace_folder(trace_dir)
    handle = Attachment(
        torch=torch,
        period_s=period_s,
        window_s=window_s,
        trace_dir=folder,
        owns_trace_dir=trace_dir is None,
        on_trace=on_trace,
        record_cpu=record_cpu,
        first_delay_s=first_delay_s,
        max_pending=max_pending,
    )
    handle._start()
    return handle


def _check_settings(
    period_s: float, window_s: float, first_delay_s: float, max_pending: int, serve_port: int | None, nowhere: bool
) -> None:
    """ConfigError for the first of `attach`'s settings that is invalid."""
    for setting, value in (("period_s", period_s), ("window_s", window_s)):
        check_seconds(value, setting)
    if window_s > period_s:
        raise ConfigError(f"window_s: {window_s!r} s is longer than period_s {period_s!r} s")
    check_seconds(first_delay_s, "first_delay_s", zero=True)
    check_count(max_pending, "max_pending")
    if serve_port is not None:
        raise ConfigError(
            f"serve_port: {serve_port!r}: serving metrics from inside the process is not available yet; "
            "write to trace_dir and run the warpwatch sidecar with a dir: source on it"
        )
    if nowhere:
        raise ConfigError("attach: give trace_dir, on_trace or both, or the traces would go nowhere")


def _trace_folder(trace_dir: str | os.PathLike[str] | None) -> Path:
    """`trace_dir`, created if missing; None: a private temporary folder."""
    if trace_dir is None:
        return Path(tempfile.mkdtemp(prefix="warpwatch-inprocess-"))
    folder = Path(trace_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"trace_dir: cannot create {str(folder)!r}: {exc}") from exc
    return folder
