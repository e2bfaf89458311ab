"""The kineto-daemon `Source`: a registry of Kineto clients, and a window as one on-demand trace
config sent to each ready client in reply to its next poll (the package doc says how)."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ...config.units import check_count, check_seconds
from ...errors import CaptureError, ConfigError
from ...sourcestats import SourceStats
from .. import CapturedWindow, Source
from . import window as daemon_window
from .clients import MAX_CLIENTS, ClientRegistry, DaemonClient
from .files import TraceFiles
from .finish import work_seconds
from .serve import Responder
from .sockets import DaemonSocket
from .window import Served, Window, closed_result, served_result
from .wire import (
    DEFAULT_ACTIVITY_TYPES,
    MAX_WINDOW_MS,
    SOCKET_DIR_ENV,
    Address,
    validate_activity_types,
    validate_trace_dir,
)

log = logging.getLogger(__name__)


class KinetoDaemonSource(Source):
    """A `Source` that triggers on-demand traces in unmodified PyTorch processes.

    Parameters:
        trace_dir: absolute folder the traced processes write to and warpwatch reads from; the
            same path in both (see the module docstring for the ``/tmp/`` rule of new Kineto).
        socket_dir: None uses ``$KINETO_IPC_SOCKET_DIR`` when set, else the abstract name
            ``\\0dynolog\\0``; a path binds ``<socket_dir>/dynolog``, spelled exactly as
            libkineto does (``"/x/"`` binds ``"/x//dynolog"``); "" forces the abstract name.
            Must match what the traced processes see, spelling included.
        activity_types: Kineto activity types to record, from `ALLOWED_ACTIVITY_TYPES`.
        start_lead_s: how far ahead of the reply the trace starts. Kineto applies a config up
            to about a second after receiving it and refuses start times already past
            (1 s was refused, 2 s and 3 s worked on torch 2.13). The start time is computed
            when the config is sent, so the poll interval needs no extra slack here.
        client_ttl_s: clients silent this long are forgotten.
        poll_interval_hint_s: the clients' poll interval until one is observed (Kineto's
            default is 5 s); bounds how long a window waits for clients to collect configs.
        delete_processed: delete each trace file once the window is done (the agent owns them).
        max_clients: clients remembered at once (`clients` says who makes room).
        name: the spec as the user wrote it, for logs and metrics.
        clock: the monotonic clock that datagrams' arrivals, windows and every wait of the
            source are timed on (`time.monotonic`; a test gives one that moves as it plans).
    """

    windows_timed_by = "agent"  # each window is a trace config of the duration the agent asks for

    def __init__(
        self,
        trace_dir: Path,
        socket_dir: str | None = None,
        activity_types: tuple[str, ...] | list[str] = DEFAULT_ACTIVITY_TYPES,
        start_lead_s: float = 3.0,
        client_ttl_s: float = 60.0,
        poll_interval_hint_s: float = 5.0,
        delete_processed: bool = True,
        max_clients: int = MAX_CLIENTS,
        name: str = "kineto-daemon",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._clock = clock
        self.trace_dir = validate_trace_dir(Path(trace_dir))
        if socket_dir is None:
            socket_dir = os.environ.get(SOCKET_DIR_ENV) or ""
        self.socket_dir = socket_dir
        self.activity_types = validate_activity_types(activity_types)
        for setting, value in (
            ("start_lead_s", start_lead_s),
            ("client_ttl_s", client_ttl_s),
            ("poll_interval_hint_s", poll_interval_hint_s),
        ):
            check_seconds(value, setting)
        check_count(max_clients, "max_clients")
        self.start_lead_s = start_lead_s
        self.client_ttl_s = client_ttl_s
        self.poll_interval_hint_s = poll_interval_hint_s
        self.delete_processed = delete_processed

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._clients = ClientRegistry(poll_interval_hint_s, max_clients)
        self._files = TraceFiles(self.trace_dir, delete_processed, clock)
        self._window_seq = 0
        self._stop_seconds: list[float] = []
        self._cost_seconds: list[float] = []
        self._exit_watch: dict[Address, float] = {}
        """Clients whose window ended without their trace, with when it was given up: each is counted
        in `exits_in_window` once it is seen silent since (gone), or forgotten once it polls again."""
        self._exits_in_window = 0
        self._socket = DaemonSocket(socket_dir, name, clock)
        self._responder = Responder(
            name,
            self.trace_dir,
            self.activity_types,
            start_lead_s,
            client_ttl_s,
            self._socket,
            self._clients,
            self._changed,
            clock,
        )
        self._counters = self._responder.counters
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        """The daemon address as a human reads it: a path, or "@dynolog" for the abstract name."""
        return self._socket.address

    def start(self) -> None:
        """Bind the daemon socket and start answering; raise CaptureError if it is taken."""
        if self._thread is not None:
            return
        try:
            self.trace_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CaptureError(f"{self.name}: cannot create trace dir {self.trace_dir}: {exc}") from exc
        self._socket.bind()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop.clear()
        self._responder.broken = None
        with self._lock:
            self._clients.clear()
        self._thread = threading.Thread(
            target=self._responder.serve, args=(self._wake_r, self._stop), name=f"warpwatch-{self.name}", daemon=True
        )
        self._thread.start()
        log.info("%s: answering Kineto clients at %s", self.name, self.address)

    def close(self) -> None:
        """Stop answering, release the socket, delete files of abandoned windows. Idempotent."""
        self._stop.set()
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        with self._changed:
            self._clients.clear()  # a closed source answers nobody; clients re-register later
            self._changed.notify_all()
        for sock in (self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._wake_r = self._wake_w = None
        self._socket.close()
        self._files.sweep(everything=True)

    def _restart(self, broken: str) -> CapturedWindow:
        """The serving thread has ended (`Responder.serve`): this window fails with the reason,
        and the socket is bound afresh for the next one (clients register again with their next
        poll), so that one failure does not end the source for good."""
        self.close()
        try:
            self.start()
        except CaptureError as exc:
            return CapturedWindow(self.name, None, {}, None, f"{broken}; binding the socket again: {exc}", "failed")
        log.warning("%s: answering again after: %s", self.name, broken)
        return CapturedWindow(self.name, None, {}, None, broken, "failed")

    # ------------------------------------------------------------------ registry

    def clients(self) -> list[DaemonClient]:
        """Snapshots of the clients heard from within `client_ttl_s`, oldest first."""
        with self._lock:
            return [c.snapshot() for c in sorted(self._clients.values(), key=lambda c: c.first_seen)]

    def stats(self) -> SourceStats:
        """Clients now, clients seen, what was dropped or evicted by reason (exported as metrics)."""
        c = self._counters
        with self._lock:
            self._watch_exits(self._clock())
            return SourceStats(
                clients=len(self._clients),
                clients_seen=self._clients.seen,
                exits_in_window=self._exits_in_window,
                dropped={"malformed": c.malformed},
                replies_dropped=dict(c.replies_dropped),
                evicted=dict(self._clients.evicted),
            )

    def _watch_exits(self, now: float) -> None:
        """Count the watched clients that have gone silent since their config (exited, or hung, with
        a window open: Kineto may crash at exit then, docs/overhead.md); forget those that polled."""
        for key, given_up in list(self._exit_watch.items()):
            client = self._clients.get(key)
            if client is not None and client.last_poll > given_up:
                del self._exit_watch[key]  # alive: its trace failed for another reason
            elif client is None or not client.is_live(now, self.poll_interval_hint_s):
                del self._exit_watch[key]
                self._exits_in_window += 1

    def take_stop_seconds(self) -> list[float]:
        """Per client trace since the last call: seconds from its window's end until its file was
        there (Kineto ends its profile and writes the trace; its loop ticks once a second)."""
        with self._lock:
            out, self._stop_seconds = self._stop_seconds, []
        return out

    def take_cost_seconds(self) -> list[float]:
        """Per client trace since the last call: what finishing it cost the traced process, the
        work from its recording's end to its file's last write (`finish.work_seconds`); its stop
        where the file does not say."""
        with self._lock:
            out, self._cost_seconds = self._cost_seconds, []
        return out

    @property
    def malformed_datagrams(self) -> int:
        """Datagrams dropped because they were not well-formed Kineto messages."""
        return self._counters.malformed

    @property
    def configs_sent(self) -> int:
        return self._counters.configs_sent

    @property
    def socket_renewals(self) -> int:
        """Times the socket was bound afresh because unread replies had used up its send buffer."""
        return self._counters.socket_renewals

    @property
    def capture_overhead_s(self) -> float:
        """How long `capture` may take beyond window + timeout (the service bounds rounds with it):
        the longest accept period (1.5 poll intervals + 1 s, twice that when the agent lost
        configs, at most `MAX_ACCEPT_S`), the start lead, and Kineto's file write."""
        with self._lock:
            interval = max(
                [c.wait_interval(self.poll_interval_hint_s) for c in self._clients.values()],
                default=self.poll_interval_hint_s,
            )
        return daemon_window.longest_accept_s(interval) + self.start_lead_s + daemon_window.KINETO_FINISH_S

    # ------------------------------------------------------------------ windows

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """Trace every ready client for `window_s` seconds; one CapturedWindow per client served.

        Each client gets its config as the reply to its next poll, so the window opens for about
        one poll interval; a client that starts polling during that time is served too. Each
        ready client is waited for 1.5 of its own poll intervals + 1 s (at most `MAX_ACCEPT_S`),
        counted again from each config the agent lost (answered too late or not sent), up to twice
        that from opening.
        When no client is known, waits that long for one and returns [] if none comes. Blocks until
        every served client has delivered its file or given up: at most about one poll
        interval + `start_lead_s` + `window_s` + `timeout_s` (at least `KINETO_FINISH_S`).
        Clients that were ready but did not collect their config come back as "timed_out"
        windows without a file. If the serving thread has ended, one "failed" window says why
        and the socket is bound afresh (`_restart`).
        """
        if not (math.isfinite(window_s) and 0 < window_s * 1000 <= MAX_WINDOW_MS):
            raise ConfigError(f"window: {window_s!r} s must be positive and at most {MAX_WINDOW_MS // 1000} s")
        if self._thread is None:
            raise CaptureError(f"{self.name}: capture() before start()")
        if (broken := self._responder.broken) is not None:
            return [self._restart(broken)]
        self._files.sweep()
        with self._lock:
            self._watch_exits(self._clock())
            self._window_seq += 1
            window = Window.open(
                f"{int(time.time() * 1000)}-{self._window_seq}",
                max(1, round(window_s * 1000)),
                self._clients.values(),
                self.poll_interval_hint_s,
                timeout_s,
                self._clock(),
                max_newcomers=self._clients.max_clients,
            )
            self._responder.window = window
        limit = self.start_lead_s + window_s + max(timeout_s, daemon_window.KINETO_FINISH_S)
        results: dict[Address, CapturedWindow] = {}
        try:
            self._await_results(window, limit, results)
        finally:
            with self._lock:
                window.accepting = False
                if self._responder.window is window:
                    self._responder.window = None
                served = list(window.served.values())
            for item in served:
                if item.key not in results or results[item.key].path is None:
                    self._files.abandon(item.stem)
            self._files.sweep()
        return [results.get(item.key) or closed_result(self.name, item) for item in served] + window.missed(self.name)

    def _await_results(self, window: Window, limit: float, results: dict[Address, CapturedWindow]) -> None:
        """Fill `results` as each served client of `window` delivers its file or gives up, until
        every one has (or the source stops)."""
        while True:
            with self._changed:
                self._changed.wait(timeout=0.1)
            now = self._clock()
            with self._lock:
                window.settle(now)
                served = list(window.served.values())
            for item in served:
                if item.key not in results:
                    result = served_result(self.name, self._files, item, now - item.sent_at, limit)
                    if result is not None:
                        results[item.key] = result
                        self._note_result(item, result, now)
            if self._stop.is_set() or (not window.accepting and len(results) == len(served)):
                return

    def _note_result(self, item: Served, result: CapturedWindow, now: float) -> None:
        """A client without a file is watched for its exit; one with its trace written took this
        long to stop (from the window's end to the file)."""
        if result.path is None:
            with self._lock:
                self._exit_watch[item.key] = now
        else:
            stop = max(0.0, time.time() - item.requested[1] / 1e6)
            work = work_seconds(result.path)
            with self._lock:
                self._stop_seconds.append(stop)
                self._cost_seconds.append(stop if work is None else min(work, stop))
