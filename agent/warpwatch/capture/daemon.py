"""Zero-code attach: answer Kineto's daemon protocol in place of dynolog.

A PyTorch process started with ``KINETO_USE_DAEMON=1`` registers with a local daemon at
``import torch`` and then asks it for work every ``ON_DEMAND_CONFIG_UPDATE_INTERVAL_SECS``
(5 s by default; settable only in the base config file named by ``KINETO_CONFIG``).
`KinetoDaemonSource` binds the daemon's socket, keeps a registry of those clients and, when
the service asks for a window, answers each ready client's next poll with an on-demand trace
config. Kineto then writes the trace into ``trace_dir`` by itself; nothing in the traced
process has to change.

Wire format (little-endian, as the C structs are laid out on x86-64 and aarch64)::

    header   uint64 size; char type[32]          # type NUL-padded: "req" or "ctxt"
    "req"    int32 type; int32 n; int64 jobid; int32 pids[n]
             # type bit 0x2: the client can take an activity trace now;
             # pids: the client's own pid first, then its ancestors
    "ctxt"   int32 gpu; int32 pid; int64 jobid   # answered with one int32

The reply goes to the datagram's sender with the same header type: for "req" a config text
of ``KEY=VALUE`` lines, or size 0 for "nothing to do". The client waits about 90 ms for it.

Kineto names the file it writes after the configured ``ACTIVITIES_LOG_FILE`` with the pid
inserted before ``.json`` (``warpwatch_<id>.json`` becomes ``warpwatch_<id>_<pid>.json``),
and writes ``<name>.tmp`` first, renaming it when complete (verified with torch 2.13).

Paths: ``trace_dir`` is written by the *traced* process, so it must be the same path in both
containers (a shared volume mounted at one path). Kineto from June 2026 on accepts an
on-demand output path only under ``/tmp/`` or ``$KINETO_ONDEMAND_TRACE_DIR`` of the traced
process and otherwise writes ``/tmp/libkineto_activities_<pid>.json`` there, where warpwatch
cannot see it; torch 2.13's bundled Kineto does not enforce this (verified: a trace dir
outside ``/tmp`` worked). Mount the shared volume under ``/tmp/`` (or set
``KINETO_ONDEMAND_TRACE_DIR`` to it in the traced container) to work with both.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import select
import socket
import stat
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CaptureError, ConfigError
from ..logs import RepeatFilter, limited_event
from . import CapturedWindow, SourceStats

log = logging.getLogger(__name__)

HEADER = struct.Struct("<Q32s")
"""Every datagram starts with this: payload size, NUL-padded message type."""
REQUEST = struct.Struct("<iiq")
"""Fixed part of a "req" payload: config type bitmask, pid count, job id; int32 pids follow."""
CONTEXT = struct.Struct("<iiq")
"""A "ctxt" payload: gpu, pid, job id."""
CONTEXT_REPLY = struct.Struct("<i")

TRACE_BIT = 0x2
"""Bit of the request type saying the client can start an activity trace now."""
MAX_PIDS = 1024
"""More pids than this in one request is not a process's ancestry: the datagram is dropped."""
MAX_DATAGRAM = 65536
KINETO_FINISH_S = 2.0
"""Kineto's profiler loop ticks once a second: a trace file appears up to ~2 s after its window
ends (1-1.5 s seen with torch 2.13), so a window never waits less than this for its file."""

SOCKET_NAME = "dynolog"
ABSTRACT_ADDRESS = b"\0dynolog\0"
"""Kineto's default daemon address; the trailing NUL is part of the abstract name."""
SOCKET_DIR_ENV = "KINETO_IPC_SOCKET_DIR"

ALLOWED_ACTIVITY_TYPES = frozenset(
    {
        "kernel",
        "gpu_memcpy",
        "gpu_memset",
        "gpu_user_annotation",
        "cuda_runtime",
        "cuda_driver",
        "cpu_op",
        "user_annotation",
        "external_correlation",
        "overhead",
    }
)
"""Activity type names every Kineto of the last years knows; an unknown name could abort an
old Kineto's config thread, so only these are ever sent."""
DEFAULT_ACTIVITY_TYPES = ("kernel", "gpu_memcpy", "gpu_memset")

_SAFE_PATH = re.compile(r"/[A-Za-z0-9._/+@:,~-]*")
"""What a trace dir may look like: it is pasted into a KEY=VALUE config text."""
_MAX_PATH = 1024
_MAX_WINDOW_MS = 10 * 60 * 1000
MAX_ACCEPT_S = 15.0
"""Longest a window waits for ready clients to collect their configs (three polls at Kineto's
default 5 s interval): a client that missed its poll is not waited for beyond this."""
MAX_CLIENTS = 1024
"""Clients (sender addresses) remembered at once; datagrams from new senders beyond are dropped
and counted (`too_many_clients`): fake senders cannot grow the registry without bound."""
POLL_GAPS = 4
"""A client's poll interval is the shortest of its last this many gaps between polls: a missed or
late poll lengthens one gap, never the estimate."""
CLIENT_LOG_INTERVAL_S = 60.0
"""Per-client lines (a new client, a forgotten one) are logged once, then at most once a minute
with the number left out: a flood of fake senders is a few lines, not one per sender."""

Address = str | bytes
"""A datagram sender: a filesystem path, or bytes starting with NUL for an abstract name."""


class MalformedDatagram(ValueError):
    """A datagram that is not a well-formed Kineto daemon message."""


@dataclass(frozen=True)
class Request:
    """A parsed "req" payload."""

    type: int
    job_id: int
    pids: tuple[int, ...]

    @property
    def can_trace(self) -> bool:
        return bool(self.type & TRACE_BIT)


@dataclass(frozen=True)
class Context:
    """A parsed "ctxt" payload: a process announcing the GPU it uses."""

    gpu: int
    pid: int
    job_id: int


@dataclass(frozen=True)
class DaemonClient:
    """A snapshot of one registered Kineto client (one traced process).

    `address` is printable (abstract names start with "@"); times are `time.monotonic()`
    seconds; `poll_interval_s` is the shortest of the last `POLL_GAPS` gaps between two polls.
    """

    address: str
    pids: tuple[int, ...]
    job_id: int
    can_trace: bool
    first_seen: float
    last_poll: float
    polls: int
    poll_interval_s: float | None
    gpu: int | None

    @property
    def pid(self) -> int:
        """The client's own pid, as seen in its pid namespace (first of `pids`)."""
        return self.pids[0] if self.pids else 0


def parse_datagram(data: bytes) -> tuple[str, bytes]:
    """Split a datagram into (message type, payload); raise MalformedDatagram if it is not one."""
    if len(data) < HEADER.size:
        raise MalformedDatagram(f"{len(data)} bytes, shorter than the {HEADER.size}-byte header")
    size, raw_type = HEADER.unpack_from(data)
    if size != len(data) - HEADER.size:
        raise MalformedDatagram(f"header says {size} payload bytes, datagram has {len(data) - HEADER.size}")
    name, nul, padding = raw_type.partition(b"\0")
    if not nul or padding.strip(b"\0") or not name or not name.isascii() or not name.isalnum():
        raise MalformedDatagram(f"bad message type {raw_type!r}")
    return name.decode("ascii"), data[HEADER.size :]


def parse_request(payload: bytes) -> Request:
    """Parse a "req" payload, strictly: the size must match the pid count exactly."""
    if len(payload) < REQUEST.size:
        raise MalformedDatagram(f"req payload of {len(payload)} bytes, need at least {REQUEST.size}")
    req_type, n, job_id = REQUEST.unpack_from(payload)
    if not 1 <= n <= MAX_PIDS:
        raise MalformedDatagram(f"req with {n} pids")
    if len(payload) != REQUEST.size + 4 * n:
        raise MalformedDatagram(f"req payload of {len(payload)} bytes for {n} pids")
    pids = struct.unpack_from(f"<{n}i", payload, REQUEST.size)
    if any(pid <= 0 for pid in pids):
        raise MalformedDatagram(f"req with a non-positive pid in {pids}")
    return Request(type=req_type, job_id=job_id, pids=pids)


def parse_context(payload: bytes) -> Context:
    """Parse a "ctxt" payload."""
    if len(payload) != CONTEXT.size:
        raise MalformedDatagram(f"ctxt payload of {len(payload)} bytes, need {CONTEXT.size}")
    gpu, pid, job_id = CONTEXT.unpack(payload)
    if pid <= 0:
        raise MalformedDatagram(f"ctxt with pid {pid}")
    return Context(gpu=gpu, pid=pid, job_id=job_id)


def encode_message(message_type: str, payload: bytes = b"") -> bytes:
    """Header plus payload, as Kineto's IPC fabric reads it."""
    return HEADER.pack(len(payload), message_type.encode("ascii")) + payload


def validate_trace_dir(trace_dir: Path) -> Path:
    """Return `trace_dir` if it can be pasted into a Kineto config line; raise ConfigError if not."""
    text = str(trace_dir)
    if not trace_dir.is_absolute():
        raise ConfigError(f"trace dir {text!r} must be an absolute path (the traced process resolves it)")
    if len(text) > _MAX_PATH or not _SAFE_PATH.fullmatch(text):
        raise ConfigError(
            f"trace dir {text!r} may contain only letters, digits and ._/+@:,~- "
            "(it is written into Kineto's KEY=VALUE config)"
        )
    return trace_dir


def validate_activity_types(activity_types: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Return the activity types as a tuple if all are allowed; raise ConfigError if not."""
    types = tuple(activity_types)
    if not types:
        raise ConfigError("activity types: at least one is needed, e.g. kernel")
    unknown = [t for t in types if t not in ALLOWED_ACTIVITY_TYPES]
    if unknown:
        raise ConfigError(
            f"activity types: {', '.join(map(repr, unknown))} not allowed; "
            f"choose from {', '.join(sorted(ALLOWED_ACTIVITY_TYPES))}"
        )
    return tuple(dict.fromkeys(types))


def build_config(log_file: Path, start_ms: int, duration_ms: int, activity_types: tuple[str, ...]) -> str:
    """The on-demand config text sent to one client; every value is validated first."""
    validate_trace_dir(log_file)
    validate_activity_types(activity_types)
    if not 0 < duration_ms <= _MAX_WINDOW_MS or not 0 < start_ms < 2**53:
        raise ConfigError(f"window of {duration_ms} ms starting at {start_ms} ms is out of range")
    return (
        f"ACTIVITIES_LOG_FILE={log_file}\n"
        f"PROFILE_START_TIME={start_ms}\n"
        f"ACTIVITIES_DURATION_MSECS={duration_ms}\n"
        "ACTIVITIES_WARMUP_PERIOD_SECS=0\n"
        f"ACTIVITY_TYPES={','.join(activity_types)}\n"
    )


def _printable(address: Address) -> str:
    if isinstance(address, bytes):
        text = address.decode("utf-8", "backslashreplace")
        return "@" + text.strip("\0") if text.startswith("\0") else text
    return address


@dataclass
class _Client:
    key: Address
    pids: tuple[int, ...]
    job_id: int
    can_trace: bool
    first_seen: float
    last_poll: float
    polls: int = 0
    poll_interval_s: float | None = None
    gpu: int | None = None
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=POLL_GAPS))

    def snapshot(self) -> DaemonClient:
        return DaemonClient(
            address=_printable(self.key),
            pids=self.pids,
            job_id=self.job_id,
            can_trace=self.can_trace,
            first_seen=self.first_seen,
            last_poll=self.last_poll,
            polls=self.polls,
            poll_interval_s=self.poll_interval_s,
            gpu=self.gpu,
        )


@dataclass(frozen=True)
class _Served:
    """One client's part of a window: the config it was sent; its file is `<stem>_<pid>.json`."""

    key: Address
    pid: int
    stem: str
    requested: tuple[float, float]
    sent_at: float


@dataclass
class _Window:
    """The window being captured. While `accepting`, each poll of a client that can trace and
    was not served yet is answered with a config; `expected` are the clients ready at opening."""

    window_id: str
    duration_ms: int
    accept_until: float
    expected: dict[Address, int]
    served: dict[Address, _Served] = field(default_factory=dict)
    busy: set[Address] = field(default_factory=set)
    accepting: bool = True


@dataclass
class _Counters:
    datagrams: int = 0
    malformed: int = 0
    too_many_clients: int = 0
    clients_seen: int = 0
    configs_sent: int = 0
    send_errors: int = 0


@dataclass
class _Abandoned:
    stem: str
    until: float


class KinetoDaemonSource:
    """A `Source` that triggers on-demand traces in unmodified PyTorch processes.

    Parameters:
        trace_dir: absolute folder the traced processes write to and warpwatch reads from; the
            same path in both (see the module docstring for the ``/tmp/`` rule of new Kineto).
        socket_dir: None uses ``$KINETO_IPC_SOCKET_DIR`` when set, else the abstract name
            ``\\0dynolog\\0``; a path binds ``<socket_dir>/dynolog``; "" forces the abstract name.
            Must match what the traced processes see.
        activity_types: Kineto activity types to record, from `ALLOWED_ACTIVITY_TYPES`.
        start_lead_s: how far ahead of the reply the trace starts. Kineto applies a config up
            to about a second after receiving it and refuses start times already past
            (1 s was refused, 2 s and 3 s worked on torch 2.13). The start time is computed
            when the config is sent, so the poll interval needs no extra slack here.
        client_ttl_s: clients silent this long are forgotten.
        poll_interval_hint_s: the clients' poll interval until one is observed (Kineto's
            default is 5 s); bounds how long a window waits for clients to collect configs.
        delete_processed: delete each trace file once the window is done (the agent owns them).
        name: the spec as the user wrote it, for logs and metrics.
    """

    def __init__(
        self,
        trace_dir: Path,
        socket_dir: str | None = None,
        activity_types: tuple[str, ...] | list[str] = DEFAULT_ACTIVITY_TYPES,
        start_lead_s: float = 3.0,
        client_ttl_s: float = 60.0,
        poll_interval_hint_s: float = 5.0,
        delete_processed: bool = True,
        name: str = "kineto-daemon",
    ) -> None:
        self.name = name
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
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"{setting}: {value!r} must be a positive number of seconds")
        self.start_lead_s = start_lead_s
        self.client_ttl_s = client_ttl_s
        self.poll_interval_hint_s = poll_interval_hint_s
        self.delete_processed = delete_processed

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._clients: dict[Address, _Client] = {}
        self._window: _Window | None = None
        self._abandoned: list[_Abandoned] = []
        self._counters = _Counters()
        self._window_seq = 0
        self._sock: socket.socket | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._bound_path: str | None = None
        self._bound_inode: tuple[int, int] | None = None
        self._repeats = RepeatFilter()
        self._client_lines = RepeatFilter(CLIENT_LOG_INTERVAL_S)

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        """The daemon address as a human reads it: a path, or "@dynolog" for the abstract name."""
        if self.socket_dir:
            return os.path.join(self.socket_dir, SOCKET_NAME)
        return "@dynolog"

    def start(self) -> None:
        """Bind the daemon socket and start answering; raise CaptureError if it is taken."""
        if self._thread is not None:
            return
        try:
            self.trace_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CaptureError(f"{self.name}: cannot create trace dir {self.trace_dir}: {exc}") from exc
        sock = self._bind()
        self._sock = sock
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop.clear()
        with self._lock:
            self._clients.clear()
        self._thread = threading.Thread(target=self._serve, name=f"warpwatch-{self.name}", daemon=True)
        self._thread.start()
        log.info("%s: answering Kineto clients at %s", self.name, self.address)

    def _bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            if not self.socket_dir:
                try:
                    sock.bind(ABSTRACT_ADDRESS)
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise CaptureError(self._taken_message()) from exc
                    raise CaptureError(f"{self.name}: cannot bind {self.address}: {exc}") from exc
                return sock
            path = self.address
            if len(os.fsencode(path)) > 107:
                raise CaptureError(
                    f"{self.name}: socket path {path!r} is longer than the 107 bytes a Unix socket allows; "
                    f"choose a shorter {SOCKET_DIR_ENV}"
                )
            try:
                os.makedirs(self.socket_dir, exist_ok=True)
            except OSError as exc:
                raise CaptureError(f"{self.name}: cannot create socket dir {self.socket_dir}: {exc}") from exc
            try:
                sock.bind(path)
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE:
                    raise CaptureError(f"{self.name}: cannot bind {path}: {exc}") from exc
                if not _is_socket(path):
                    raise CaptureError(
                        f"{self.name}: {path} exists and is not a socket; remove it or choose another {SOCKET_DIR_ENV}"
                    ) from exc
                if not _remove_stale_socket(path):
                    raise CaptureError(self._taken_message()) from exc
                try:
                    sock.bind(path)
                except OSError as exc2:
                    raise CaptureError(self._taken_message()) from exc2
            # Traced processes in other containers may run as other users: let them send.
            with contextlib.suppress(OSError):
                os.chmod(path, 0o666)
            st = os.stat(path)
            self._bound_path = path
            self._bound_inode = (st.st_dev, st.st_ino)
            return sock
        except BaseException:
            sock.close()
            raise

    def _taken_message(self) -> str:
        return (
            f"{self.name}: the Kineto daemon socket {self.address} is already taken: a dynolog daemon "
            "or another warpwatch is answering it. Stop dynolog, or give this pair its own socket by "
            f"setting {SOCKET_DIR_ENV} to the same directory (e.g. on a shared volume) in both the "
            "traced container and warpwatch's."
        )

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
        for sock in (self._sock, self._wake_r, self._wake_w):
            if sock is not None:
                sock.close()
        self._sock = self._wake_r = self._wake_w = None
        if self._bound_path is not None:
            with contextlib.suppress(OSError):
                st = os.lstat(self._bound_path)
                if (st.st_dev, st.st_ino) == self._bound_inode:
                    os.unlink(self._bound_path)
            self._bound_path = self._bound_inode = None
        self._sweep(everything=True)

    # ------------------------------------------------------------------ registry

    def clients(self) -> list[DaemonClient]:
        """Snapshots of the clients heard from within `client_ttl_s`, oldest first."""
        with self._lock:
            return [c.snapshot() for c in sorted(self._clients.values(), key=lambda c: c.first_seen)]

    def stats(self) -> SourceStats:
        """Clients now, clients seen, datagrams dropped by reason (exported as metrics)."""
        with self._lock:
            clients = len(self._clients)
        c = self._counters
        return SourceStats(clients=clients, clients_seen=c.clients_seen,
                           dropped={"malformed": c.malformed, "too_many_clients": c.too_many_clients})

    @property
    def malformed_datagrams(self) -> int:
        """Datagrams dropped because they were not well-formed Kineto messages."""
        return self._counters.malformed

    @property
    def configs_sent(self) -> int:
        return self._counters.configs_sent

    @property
    def capture_overhead_s(self) -> float:
        """How long `capture` may take beyond window + timeout (the service bounds rounds with it):
        one accept period (1.5 poll intervals + 1 s, at most `MAX_ACCEPT_S`), the start lead, and
        Kineto's file write."""
        with self._lock:
            interval = max([self._interval(c) for c in self._clients.values()], default=self.poll_interval_hint_s)
        return min(1.5 * interval + 1.0, MAX_ACCEPT_S) + self.start_lead_s + KINETO_FINISH_S

    def _interval(self, client: _Client) -> float:
        return client.poll_interval_s if client.poll_interval_s is not None else self.poll_interval_hint_s

    def _is_ready(self, client: _Client, now: float) -> bool:
        return client.can_trace and now - client.last_poll <= 2 * self._interval(client) + 1.0

    # ------------------------------------------------------------------ serving thread

    def _serve(self) -> None:
        sock, wake = self._sock, self._wake_r
        assert sock is not None and wake is not None
        while not self._stop.is_set():
            try:
                readable, _, _ = select.select([sock, wake], [], [], 1.0)
            except (OSError, ValueError):
                break
            if wake in readable:
                break
            if sock in readable:
                for _ in range(256):
                    try:
                        data, _anc, flags, sender = sock.recvmsg(MAX_DATAGRAM, 0, socket.MSG_DONTWAIT)
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError as exc:
                        limited_event(log, self._repeats, ("receive", exc.errno), "daemon_receive_failed",
                                      logging.WARNING, source=self.name, error=exc.strerror or str(exc))
                        break
                    try:
                        self._handle(data, flags, sender, sock)
                    except Exception as exc:
                        # One bad datagram must never stop the daemon thread.
                        self._counters.malformed += 1
                        limited_event(log, self._repeats, ("handle", type(exc).__name__), "daemon_datagram_failed",
                                      logging.ERROR, exc_info=exc, source=self.name)
            self._prune()

    def _prune(self) -> None:
        now = time.monotonic()
        with self._lock:
            for key in [k for k, c in self._clients.items() if now - c.last_poll > self.client_ttl_s]:
                limited_event(log, self._client_lines, ("client_forgotten",), "daemon_client_forgotten",
                              logging.INFO, source=self.name, client=_printable(key),
                              reason=f"silent for {self.client_ttl_s:g}s")
                del self._clients[key]

    def _handle(self, data: bytes, flags: int, sender: Address | None, sock: socket.socket) -> None:
        self._counters.datagrams += 1
        if flags & socket.MSG_TRUNC or not sender or sender in (b"", "\0"):
            self._counters.malformed += 1
            return
        try:
            kind, payload = parse_datagram(data)
            if kind == "req":
                reply = self._on_request(sender, parse_request(payload))
            elif kind == "ctxt":
                reply = self._on_context(sender, parse_context(payload))
            else:
                raise MalformedDatagram(f"unknown message type {kind!r}")
        except MalformedDatagram as exc:
            self._counters.malformed += 1
            log.debug("%s: ignored datagram from %s: %s", self.name, _printable(sender), exc)
            return
        if not reply:  # dropped (registry full): no answer
            return
        try:
            sock.sendto(reply, socket.MSG_DONTWAIT, sender)
        except OSError as exc:
            self._counters.send_errors += 1
            log.debug("%s: reply to %s failed: %s", self.name, _printable(sender), exc)
            if len(reply) > HEADER.size and kind == "req":
                self._undeliver(sender)

    def _touch(self, sender: Address, pids: tuple[int, ...], job_id: int, now: float) -> _Client | None:
        """The sender's registry entry, new if need be; None (dropped, counted) when the registry is full."""
        client = self._clients.get(sender)
        if client is None:
            if len(self._clients) >= MAX_CLIENTS:
                self._counters.too_many_clients += 1
                limited_event(log, self._client_lines, ("too_many_clients",), "daemon_client_refused",
                              logging.WARNING, source=self.name, client=_printable(sender),
                              reason=f"{MAX_CLIENTS} clients registered already")
                return None
            client = _Client(key=sender, pids=pids, job_id=job_id, can_trace=False, first_seen=now, last_poll=now)
            self._clients[sender] = client
            self._counters.clients_seen += 1
            limited_event(log, self._client_lines, ("new_client",), "daemon_client", logging.INFO,
                          source=self.name, client=_printable(sender), pid=pids[0] if pids else None)
        return client

    def _on_request(self, sender: Address, req: Request) -> bytes:
        now = time.monotonic()
        with self._lock:
            client = self._touch(sender, req.pids, req.job_id, now)
            if client is None:
                return b""
            if client.polls:
                client.gaps.append(now - client.last_poll)
                client.poll_interval_s = min(client.gaps)
            client.polls += 1
            client.last_poll = now
            client.pids, client.job_id, client.can_trace = req.pids, req.job_id, req.can_trace
            window = self._window
            if window is None or not window.accepting or sender in window.served:
                return encode_message("req")
            if not req.can_trace:
                if sender in window.expected:
                    window.busy.add(sender)
                return encode_message("req")
            if now > window.accept_until:
                return encode_message("req")
            stem = f"warpwatch_{window.window_id}-{len(window.served)}"
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
            window.served[sender] = _Served(sender, req.pids[0], stem, requested, now)
            self._counters.configs_sent += 1
            self._changed.notify_all()
        return encode_message("req", config.encode("ascii"))

    def _undeliver(self, sender: Address) -> None:
        """The config never reached the client: let a later poll of this window try again."""
        with self._lock:
            window = self._window
            if window is not None and window.served.pop(sender, None) is not None:
                self._counters.configs_sent -= 1

    def _on_context(self, sender: Address, ctxt: Context) -> bytes:
        now = time.monotonic()
        with self._lock:
            client = self._touch(sender, (ctxt.pid,), ctxt.job_id, now)
            if client is None:
                return b""
            client.gpu = ctxt.gpu
            count = sum(1 for c in self._clients.values() if c.gpu == ctxt.gpu)
        return encode_message("ctxt", CONTEXT_REPLY.pack(count))

    # ------------------------------------------------------------------ windows

    def capture(self, window_s: float, timeout_s: float) -> list[CapturedWindow]:
        """Trace every ready client for `window_s` seconds; one CapturedWindow per client served.

        Each client gets its config as the reply to its next poll, so the window opens for about
        one poll interval; a client that starts polling during that time is served too. When no
        client is known, waits that long for one and returns [] if none comes. Blocks until
        every served client has delivered its file or given up: at most about one poll
        interval + `start_lead_s` + `window_s` + `timeout_s` (at least `KINETO_FINISH_S`).
        Clients that were ready but did not collect their config come back as "timed_out"
        windows without a file.
        """
        if not (math.isfinite(window_s) and 0 < window_s * 1000 <= _MAX_WINDOW_MS):
            raise ConfigError(f"window: {window_s!r} s must be positive and at most {_MAX_WINDOW_MS // 1000} s")
        if self._thread is None:
            raise CaptureError(f"{self.name}: capture() before start()")
        self._sweep()
        now = time.monotonic()
        with self._lock:
            ready = [c for c in self._clients.values() if self._is_ready(c, now)]
            accept_for = min(1.5 * max([self._interval(c) for c in ready], default=self.poll_interval_hint_s) + 1.0,
                             MAX_ACCEPT_S)
            if not ready:
                accept_for = min(accept_for, max(timeout_s, 0.5))
            self._window_seq += 1
            window = _Window(
                window_id=f"{int(time.time() * 1000)}-{self._window_seq}",
                duration_ms=max(1, round(window_s * 1000)),
                accept_until=now + accept_for,
                expected={c.key: c.pids[0] for c in ready},
            )
            self._window = window
        results: dict[Address, CapturedWindow] = {}
        try:
            while True:
                with self._changed:
                    self._changed.wait(timeout=0.1)
                now = time.monotonic()
                with self._lock:
                    if window.accepting and (
                        now > window.accept_until
                        or (window.expected and window.expected.keys() <= window.served.keys())
                    ):
                        window.accepting = False
                    served = list(window.served.values())
                for item in served:
                    if item.key not in results:
                        result = self._check(item, now, window_s, timeout_s)
                        if result is not None:
                            results[item.key] = result
                if self._stop.is_set() or (not window.accepting and len(results) == len(served)):
                    break
        finally:
            with self._lock:
                window.accepting = False
                if self._window is window:
                    self._window = None
                served = list(window.served.values())
                for item in served:
                    if item.key not in results or results[item.key].path is None:
                        # A late file from a slow or refused trace must not stay behind.
                        self._abandoned.append(_Abandoned(item.stem, time.monotonic() + 600.0))
            self._sweep()
        out = [results.get(item.key) or self._closed_window(item) for item in served]
        for key, pid in window.expected.items():
            if key not in window.served:
                reason = (
                    "was busy with another trace"
                    if key in window.busy
                    else "did not poll for it (process gone or hung?)"
                )
                out.append(
                    CapturedWindow(
                        self.name,
                        None,
                        {"process": str(pid)},
                        None,
                        f"pid {pid}: no trace config delivered within {accept_for:.1f} s: the client {reason}",
                        "timed_out",
                    )
                )
        return out

    def _closed_window(self, item: _Served) -> CapturedWindow:
        return CapturedWindow(
            self.name,
            None,
            {"process": str(item.pid)},
            item.requested,
            f"pid {item.pid}: source closed before the trace file came",
            "failed",
        )

    def _check(self, item: _Served, now: float, window_s: float, timeout_s: float) -> CapturedWindow | None:
        path = self._find_file(item)
        labels = {"process": str(item.pid)}
        if path is not None:
            return CapturedWindow(self.name, path, labels, item.requested, on_done=self._make_on_done(item.stem))
        limit = self.start_lead_s + window_s + max(timeout_s, KINETO_FINISH_S)
        if now - item.sent_at <= limit:
            return None
        return CapturedWindow(
            self.name,
            None,
            labels,
            item.requested,
            f"pid {item.pid}: no trace file {item.stem}_{item.pid}.json in {self.trace_dir} "
            f"{limit:.1f} s after sending the config (process gone, start refused, or Kineto wrote "
            "elsewhere: new Kineto writes on-demand traces only under /tmp/ or $KINETO_ONDEMAND_TRACE_DIR)",
            "timed_out",
        )

    def _find_file(self, item: _Served) -> Path | None:
        """The window's file: any entry but a directory (links and FIFOs too, never followed or
        opened here), so that the reader's `confine` refuses what is not a plain file, by name."""
        expected = self.trace_dir / f"{item.stem}_{item.pid}.json"
        if _is_entry(expected):
            return expected
        # The pid Kineto uses could differ from the one it reported (another pid namespace).
        for candidate in sorted(self.trace_dir.glob(f"{item.stem}_*.json")):
            if _is_entry(candidate):
                return candidate
        return None

    def _make_on_done(self, stem: str) -> Callable[[bool], None]:
        def on_done(processed: bool) -> None:
            # Nothing else will ever read these files: delete them whether or not analysed.
            if self.delete_processed:
                _delete_stem(self.trace_dir, stem)

        return on_done

    def _sweep(self, everything: bool = False) -> None:
        """Delete files of abandoned windows; keep retrying for a while, as Kineto may be late."""
        now = time.monotonic()
        with self._lock:
            items = self._abandoned
            self._abandoned = [] if everything else [a for a in items if now < a.until]
        for item in items:
            _delete_stem(self.trace_dir, item.stem)


def _is_entry(path: Path) -> bool:
    try:
        return not stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _delete_stem(trace_dir: Path, stem: str) -> None:
    for leftover in trace_dir.glob(f"{stem}_*"):
        with contextlib.suppress(OSError):
            leftover.unlink()


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True  # gone meanwhile: binding again will tell
    except OSError:
        return False


def _remove_stale_socket(path: str) -> bool:
    """Unlink the socket file `path` if nobody listens on it; False if someone does."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False
