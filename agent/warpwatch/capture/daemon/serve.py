"""The daemon source's serving thread: every datagram on the daemon socket is read, parsed,
and answered only when the answer cannot harm the client (`wire`): never from an address
its libkineto would abort on, never later than it still reads replies, never blocking. Who is
registered is `clients`'; what a window hands out is `window`'s.
"""

from __future__ import annotations

import errno
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CaptureError, ConfigError
from ...logs import RepeatFilter, limited_event
from .clients import Client, ClientRegistry
from .sockets import DaemonSocket, Received
from .window import Served, Window
from .wire import (
    CONTEXT_REPLY,
    HEADER,
    REPLY_DEADLINE_S,
    SOCKET_DIR_ENV,
    Address,
    Context,
    MalformedDatagram,
    Request,
    build_config,
    encode_message,
    parse_context,
    parse_datagram,
    parse_request,
    printable,
    reply_is_safe,
)

log = logging.getLogger("warpwatch.capture.daemon")
"""The source's logger: one name for every line the daemon source writes."""

CLIENT_LOG_INTERVAL_S = 60.0
"""Per-client lines (a new client, a forgotten one) are logged once, then at most once a minute
with the number left out: a flood of fake senders is a few lines, not one per sender."""
BATCH = 256
"""Datagrams handled per wake-up before housekeeping (pruning, renewing the socket)."""


@dataclass
class Counters:
    malformed: int = 0
    configs_sent: int = 0
    socket_renewals: int = 0
    replies_dropped: dict[str, int] = field(default_factory=lambda: {"stale": 0, "send_failed": 0, "unsafe_address": 0})


class Responder:
    """Answers the daemon socket for a `KinetoDaemonSource`, sharing its lock, registry and socket;
    `window` is the source's open window (set and cleared under `lock`)."""

    def __init__(
        self,
        name: str,
        trace_dir: Path,
        activity_types: tuple[str, ...],
        start_lead_s: float,
        client_ttl_s: float,
        sock: DaemonSocket,
        clients: ClientRegistry,
        changed: threading.Condition,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.trace_dir = trace_dir
        self.activity_types = activity_types
        self.start_lead_s = start_lead_s
        self.client_ttl_s = client_ttl_s
        self._socket = sock
        self._clients = clients
        self._changed = changed
        self._lock = changed
        self._clock = clock
        self.window: Window | None = None
        self.counters = Counters()
        self.clogged = False
        self.broken: str | None = None
        self._repeats = RepeatFilter()
        self._client_lines = RepeatFilter(CLIENT_LOG_INTERVAL_S)

    def serve(self, wake: socket.socket, stop: threading.Event) -> None:
        """The serving thread: answer datagrams until `stop` is set and `wake` is written to.

        It never ends with a traceback: whatever stops it early is kept in `broken`, which the
        source's `capture` reports as a failed window (else windows would wait for answers that
        nobody sends any more)."""
        try:
            self._serve(wake, stop)
        except Exception as exc:
            self.broken = f"{self.name}: the daemon thread stopped: {type(exc).__name__}: {exc}"
            log.error("%s", self.broken, exc_info=exc)
            return
        if not stop.is_set() and self.broken is None:
            self.broken = f"{self.name}: the daemon socket {self._socket.address} stopped answering"
            log.error("%s", self.broken)

    def _serve(self, wake: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            sock = self._socket.sock
            if sock is None:
                break
            try:
                readable, _, _ = select.select([sock, wake], [], [], 1.0)
            except (OSError, ValueError):
                break
            if wake in readable:
                break
            if sock in readable:
                self._handle_batch()
            if self.clogged and not self._renew():
                break
            self._prune()

    def _handle_batch(self) -> None:
        for _ in range(BATCH):
            try:
                got = self._socket.receive()
            except OSError as exc:
                limited_event(
                    log,
                    self._repeats,
                    ("receive", exc.errno),
                    "daemon_receive_failed",
                    logging.WARNING,
                    source=self.name,
                    error=exc.strerror or str(exc),
                )
                return
            if got is None:
                return
            self._handle_safely(got)

    def _handle_safely(self, got: Received) -> None:
        try:
            self._handle(*got)
        except Exception as exc:
            # One bad datagram must never stop the daemon thread.
            self.counters.malformed += 1
            limited_event(
                log,
                self._repeats,
                ("handle", type(exc).__name__),
                "daemon_datagram_failed",
                logging.ERROR,
                exc_info=exc,
                source=self.name,
            )

    def _renew(self) -> bool:
        """Bind a fresh socket (see `sockets`) and answer, through it, what was still queued on the
        old one; False when the name is lost."""
        self.clogged = False
        try:
            queued = self._socket.renew()
        except CaptureError as exc:
            self.broken = str(exc)
            log.error("%s: lost the daemon socket while renewing it: %s", self.name, exc)
            return False
        self.counters.socket_renewals += 1
        limited_event(
            log,
            self._repeats,
            ("renewed",),
            "daemon_socket_renewed",
            logging.WARNING,
            source=self.name,
            address=self._socket.address,
            reason="the send buffer was full of replies that senders never read",
        )
        for got in queued:
            self._handle_safely(got)
        return True

    def _prune(self) -> None:
        now = self._clock()
        with self._lock:
            gone = self._clients.prune(now, self.client_ttl_s)
        for client in gone:
            limited_event(
                log,
                self._client_lines,
                ("client_forgotten",),
                "daemon_client_forgotten",
                logging.INFO,
                source=self.name,
                client=printable(client.key),
                reason=f"silent for {self.client_ttl_s:g}s",
            )

    def _handle(self, data: bytes, flags: int, sender: Address | None, arrived: float) -> None:
        if flags & socket.MSG_TRUNC or not sender or sender in (b"", "\0"):
            self.counters.malformed += 1
            return
        try:
            kind, payload = parse_datagram(data)
            if kind not in ("req", "ctxt"):
                raise MalformedDatagram(f"unknown message type {kind!r}")
            message = parse_request(payload) if kind == "req" else parse_context(payload)
        except MalformedDatagram as exc:
            self.counters.malformed += 1
            log.debug("%s: ignored datagram from %s: %s", self.name, printable(sender), exc)
            return
        if not reply_is_safe(self._socket.own, sender):
            # libkineto at `sender` would abort on a datagram from our address (`wire`).
            self.counters.replies_dropped["unsafe_address"] += 1
            limited_event(
                log,
                self._repeats,
                ("unsafe_address",),
                "daemon_client_unanswered",
                logging.WARNING,
                source=self.name,
                client=printable(sender),
                address=self._socket.address,
                reason=f"the client's {SOCKET_DIR_ENV} is spelled differently from the agent's "
                "and its Kineto would abort on a reply; set both to the same text",
            )
            return
        if isinstance(message, Request):
            reply = self._on_request(sender, message, arrived)
        else:
            reply = self._on_context(sender, message, arrived)
        self._reply(reply, sender, arrived, is_config=isinstance(message, Request) and len(reply) > HEADER.size)

    def _reply(self, reply: bytes, sender: Address, arrived: float, is_config: bool) -> None:
        # A reply the client no longer waits for would be read as the answer to its next
        # request, and every later one too: better no answer (`wire`, REPLY_DEADLINE_S).
        if self._clock() - arrived > REPLY_DEADLINE_S:
            self.counters.replies_dropped["stale"] += 1
            limited_event(
                log,
                self._repeats,
                ("stale",),
                "daemon_reply_dropped",
                logging.WARNING,
                source=self.name,
                client=printable(sender),
                reason=f"request older than {REPLY_DEADLINE_S * 1000:g} ms (the agent was stalled)",
            )
            if is_config:
                self._undeliver(sender)
            return
        error = self._socket.send(reply, sender)
        with self._lock:
            if error is None:
                self._clients.delivered(sender)
                return
            self.counters.replies_dropped["send_failed"] += 1
            gone = self._clients.undeliverable(sender)
        log.debug("%s: reply to %s failed: %s", self.name, printable(sender), error)
        if is_config:
            self._undeliver(sender)
        if gone is not None:
            limited_event(
                log,
                self._client_lines,
                ("client_undeliverable",),
                "daemon_client_evicted",
                logging.INFO,
                source=self.name,
                client=printable(sender),
                reason=f"replies could not be sent: {error.strerror or error}",
            )
        if error.errno in (errno.EAGAIN, errno.ENOBUFS) and self._socket.send_buffer_clogged():
            self.clogged = True

    def _touch(self, sender: Address, pids: tuple[int, ...], job_id: int, now: float) -> Client:
        """The sender's registry entry (new if need be), with the lines a newcomer is worth."""
        known = sender in self._clients
        client, evicted = self._clients.touch(sender, pids, job_id, now)
        if evicted is not None:
            limited_event(
                log,
                self._client_lines,
                ("registry_full",),
                "daemon_client_evicted",
                logging.WARNING,
                source=self.name,
                client=printable(evicted.key),
                reason=f"{self._clients.max_clients} clients registered; made room for a new one",
            )
        if not known:
            limited_event(
                log,
                self._client_lines,
                ("new_client",),
                "daemon_client",
                logging.INFO,
                source=self.name,
                client=printable(sender),
                pid=pids[0] if pids else None,
            )
        return client

    def _on_request(self, sender: Address, req: Request, arrived: float) -> bytes:
        with self._lock:
            client = self._touch(sender, req.pids, req.job_id, arrived)
            self._clients.poll(client, arrived)
            client.pids, client.job_id, client.can_trace = req.pids, req.job_id, req.can_trace
            window = self.window
            stem = None if window is None else window.offer(sender, req.can_trace, self._clock())
            if window is None or stem is None:
                return encode_message("req")
            # The start time is fixed now, at sending, so the poll interval needs no slack.
            start_ms = int(time.time() * 1000) + round(self.start_lead_s * 1000)
            try:
                config = build_config(
                    self.trace_dir / f"{stem}.json", start_ms, window.duration_ms, self.activity_types
                )
            except ConfigError as exc:  # cannot happen with validated settings; never send junk
                log.error("%s: not sending an invalid config: %s", self.name, exc)
                return encode_message("req")
            requested = (start_ms * 1000.0, (start_ms + window.duration_ms) * 1000.0)
            window.served[sender] = Served(sender, req.pids[0], stem, requested, self._clock())
            self.counters.configs_sent += 1
            self._changed.notify_all()
        return encode_message("req", config.encode("ascii"))

    def _undeliver(self, sender: Address) -> None:
        """The config never reached the client: its next poll in this window gets one again, and
        the window waits for that poll (`Window.retry`)."""
        with self._lock:
            window = self.window
            client = self._clients.get(sender)
            interval = (
                self._clients.default_interval_s
                if client is None
                else client.wait_interval(self._clients.default_interval_s)
            )
            if window is not None and window.retry(sender, self._clock(), interval):
                self.counters.configs_sent -= 1

    def _on_context(self, sender: Address, ctxt: Context, arrived: float) -> bytes:
        with self._lock:
            client = self._touch(sender, (ctxt.pid,), ctxt.job_id, arrived)
            client.gpu = ctxt.gpu
            count = sum(1 for c in self._clients.values() if c.gpu == ctxt.gpu)
        return encode_message("ctxt", CONTEXT_REPLY.pack(count))
