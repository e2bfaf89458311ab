"""Kineto's daemon protocol on the wire: datagram layout, addresses, the config text sent.

Wire format (little-endian, as the C structs are laid out on x86-64 and aarch64)::

    header   uint64 size; char type[32]          # type NUL-padded: "req" or "ctxt"
    "req"    int32 type; int32 n; int64 jobid; int32 pids[n]
             # type bit 0x2: the client can take an activity trace now;
             # pids: the client's own pid first, then its ancestors
    "ctxt"   int32 gpu; int32 pid; int64 jobid   # answered with one int32

The reply goes to the datagram's sender with the same header type: for "req" a config text
of ``KEY=VALUE`` lines, or size 0 for "nothing to do".

Addresses and timing follow libkineto's client (``IpcFabricConfigClient.cpp`` and the dynolog
headers it bundles, ``ipcfabric/Endpoint.h`` and ``FabricManager.h``, kineto of August 2026):

- ``EndPoint::setAddress_`` spells a filesystem address ``$KINETO_IPC_SOCKET_DIR + "/" + name``,
  never normalised, and an abstract one ``"\\0" + name + "\\0"``. The client binds
  ``dynoconfigclient<uuid>`` that way and sends to ``dynolog``.
- ``EndPoint::getName`` reads the sender of every datagram the client receives and calls
  ``std::terminate()`` (SIGABRT, exit 134) unless, with a socket dir, the sender's path starts
  with the dir followed by "/", or, without one, the sender is abstract. A daemon bound at
  ``/x/dynolog`` therefore kills a client whose dir is spelled ``/x/``: its path is
  ``/x//dynolog`` (the kernel resolves both to one socket). `reply_is_safe` checks it.
- ``FabricManager::poll_recv(9, 10000)`` looks for the reply right after sending and then every
  10 ms, nine times: a reply that arrives later than ~80 ms after the request stays queued and
  is read as the answer to the client's *next* request, which leaves it one poll behind for
  good. `REPLY_DEADLINE_S` is the age beyond which a reply is not sent.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ...errors import ConfigError

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

CLIENT_RECV_TRIES = 9
CLIENT_RECV_SLEEP_S = 0.010
"""libkineto's ``poll_recv(maxIpcRetries=9, kSleepUs=10000)``: its last look for a reply is at
least (9 - 1) x 10 ms = 80 ms after its request was sent (sleeps only ever overshoot)."""
REPLY_DEADLINE_S = 0.05
"""A reply to a request older than this (since the kernel queued the request) is dropped: it
leaves 30 ms of the client's 80 ms for sending it, which takes microseconds."""

SOCKET_NAME = "dynolog"
ABSTRACT_ADDRESS = b"\0dynolog\0"
"""Kineto's default daemon address; the trailing NUL is part of the abstract name."""
SOCKET_DIR_ENV = "KINETO_IPC_SOCKET_DIR"

Address = str | bytes
"""A datagram sender: a filesystem path, or bytes starting with NUL for an abstract name."""

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
MAX_WINDOW_MS = 10 * 60 * 1000


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


def daemon_path(socket_dir: str) -> str:
    """The daemon's filesystem address exactly as libkineto spells it: dir + "/" + "dynolog"."""
    return socket_dir + "/" + SOCKET_NAME


def reply_is_safe(own: Address, peer: Address) -> bool:
    """Whether libkineto bound at `peer` survives a datagram sent from `own` (`EndPoint::getName`).

    A filesystem client's path is its socket dir + "/" + a name without "/", so its dir is what
    precedes the last "/"; it aborts unless `own` starts with that dir followed by "/". An
    abstract client aborts unless `own` is abstract too.
    """
    if isinstance(peer, bytes):
        return isinstance(own, bytes)
    if isinstance(own, bytes):
        return False
    peer_dir = peer.rpartition("/")[0]
    return own.startswith(peer_dir) and own[len(peer_dir) : len(peer_dir) + 1] == "/"


def printable(address: Address) -> str:
    """An address as a human reads it: a path, or "@name" for an abstract one."""
    if isinstance(address, bytes):
        text = address.decode("utf-8", "backslashreplace")
        return "@" + text.strip("\0") if text.startswith("\0") else text
    return address


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
    if not 0 < duration_ms <= MAX_WINDOW_MS or not 0 < start_ms < 2**53:
        raise ConfigError(f"window of {duration_ms} ms starting at {start_ms} ms is out of range")
    return (
        f"ACTIVITIES_LOG_FILE={log_file}\n"
        f"PROFILE_START_TIME={start_ms}\n"
        f"ACTIVITIES_DURATION_MSECS={duration_ms}\n"
        "ACTIVITIES_WARMUP_PERIOD_SECS=0\n"
        f"ACTIVITY_TYPES={','.join(activity_types)}\n"
    )
