"""The daemon's datagram socket: binding the name Kineto clients send to, receiving with the
kernel's arrival time, sending without ever blocking, and renewing a clogged socket.

Why renewal: a datagram sent on a Unix socket is charged to the *sender's* send buffer until
the receiver reads it. Replies to senders that never read stay charged (up to the receiver's
``net.unix.max_dgram_qlen`` each), so about fifteen such senders exhaust the default 208 KiB and
every later send fails with EAGAIN: nobody gets replies. Dropping those senders does not free
the buffer; closing the socket and binding the same name afresh does (the unread replies stay
with the old socket, which the kernel frees when their receivers close).

Closing a socket discards the datagrams queued on it, so a renewal first stops the old socket
receiving and reads what it holds; `renew` hands those datagrams back to be answered through the
new one. Every datagram the kernel accepted is read; a sender that comes at the wrong moment is
told so by its send (see `DaemonSocket.renew`) and polls again, as Kineto clients do.
"""

from __future__ import annotations

import array
import contextlib
import errno
import fcntl
import os
import socket
import stat
import struct
import termios
import time
from collections.abc import Callable

from ...errors import CaptureError
from .wire import ABSTRACT_ADDRESS, MAX_DATAGRAM, SOCKET_DIR_ENV, Address, daemon_path

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
"""Linux's value on every architecture warpwatch runs on; Python does not export it."""
_TIMESPEC = struct.Struct("@qq")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size)
_MAX_QUEUE_AGE_S = 60.0
"""A kernel timestamp further back than this is a clock step, not a queued datagram."""

Received = tuple[bytes, int, Address | None, float]
"""A datagram as `DaemonSocket.receive` returns it: (data, flags, sender, arrival as a
time on the socket's clock, `time.monotonic` unless a test gives another)."""


class DaemonSocket:
    """The socket bound at the daemon's name: ``<socket_dir>/dynolog``, or the abstract name.

    `own` is the bound address as a receiver sees it (a str path, or bytes for an abstract name),
    which is what `reply_is_safe` compares with each client's.
    """

    def __init__(self, socket_dir: str, source_name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.socket_dir = socket_dir
        self.clock = clock
        """The clock arrival times are given on."""
        self.source_name = source_name
        self.own: Address = daemon_path(socket_dir) if socket_dir else ABSTRACT_ADDRESS
        self.sock: socket.socket | None = None
        self._bound_inode: tuple[int, int] | None = None

    @property
    def address(self) -> str:
        """The daemon address as a human reads it: a path, or "@dynolog" for the abstract name."""
        return self.own if isinstance(self.own, str) else "@dynolog"

    def taken_message(self) -> str:
        return (
            f"{self.source_name}: the Kineto daemon socket {self.address} is already taken: a dynolog daemon "
            "or another warpwatch is answering it. Stop dynolog, or give this pair its own socket by "
            f"setting {SOCKET_DIR_ENV} to the same directory (e.g. on a shared volume) in both the "
            "traced container and warpwatch's."
        )

    def bind(self) -> None:
        """Bind the daemon's name; raise CaptureError (with advice) when it cannot be had."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._bind(sock)
            # The kernel's arrival time of each datagram tells how old a request is (see receive).
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError as exc:  # the bound file vanished before its stat, or the option was refused
            sock.close()
            self._unlink_own()
            raise CaptureError(f"{self.source_name}: cannot bind {self.address}: {exc}") from exc
        except BaseException:
            sock.close()
            raise
        self.sock = sock

    def _bind(self, sock: socket.socket) -> None:
        if isinstance(self.own, bytes):
            try:
                sock.bind(self.own)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise CaptureError(self.taken_message()) from exc
                raise CaptureError(f"{self.source_name}: cannot bind {self.address}: {exc}") from exc
            return
        path = self.own
        if len(os.fsencode(path)) > 107:
            raise CaptureError(
                f"{self.source_name}: socket path {path!r} is longer than the 107 bytes a Unix socket allows; "
                f"choose a shorter {SOCKET_DIR_ENV}"
            )
        try:
            os.makedirs(self.socket_dir, exist_ok=True)
        except OSError as exc:
            raise CaptureError(f"{self.source_name}: cannot create socket dir {self.socket_dir}: {exc}") from exc
        try:
            sock.bind(path)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise CaptureError(f"{self.source_name}: cannot bind {path}: {exc}") from exc
            if not _is_socket(path):
                raise CaptureError(
                    f"{self.source_name}: {path} exists and is not a socket; "
                    f"remove it or choose another {SOCKET_DIR_ENV}"
                ) from exc
            if not _remove_stale_socket(path):
                raise CaptureError(self.taken_message()) from exc
            try:
                sock.bind(path)
            except OSError as exc2:
                raise CaptureError(self.taken_message()) from exc2
        # Traced processes in other containers may run as other users: let them send.
        with contextlib.suppress(OSError):
            os.chmod(path, 0o666)
        st = os.stat(path)
        self._bound_inode = (st.st_dev, st.st_ino)

    def receive(self) -> Received | None:
        """One queued datagram, or None when none is queued. Raises OSError for other receive errors."""
        assert self.sock is not None
        return _receive(self.sock, self.clock)

    def send(self, data: bytes, peer: Address) -> OSError | None:
        """Send without blocking; the error instead of raising it (EAGAIN: the peer's queue or our
        send buffer is full; ECONNREFUSED/ENOENT: nobody is bound there any more)."""
        assert self.sock is not None
        try:
            self.sock.sendto(data, socket.MSG_DONTWAIT, peer)
        except OSError as exc:
            return exc
        return None

    def send_buffer_clogged(self) -> bool:
        """Whether at least half of the send buffer is held by replies not yet read."""
        assert self.sock is not None
        unread = array.array("i", [0])
        try:
            fcntl.ioctl(self.sock.fileno(), termios.TIOCOUTQ, unread)
            size = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
        except OSError:
            return False
        return unread[0] * 2 >= size

    def renew(self) -> list[Received]:
        """Bind the name afresh on a new socket, releasing the send buffer the old one had used up;
        returns the datagrams that were still queued on the old socket, oldest first, for the
        caller to answer through the new one.

        A filesystem name is unlinked and bound again before the old socket stops receiving: a
        sender in between gets ENOENT; one that had already found the old socket reaches it, or
        gets EPIPE once it stops receiving. The abstract name can only be bound again once the
        old socket is closed: a sender in between gets EPIPE or ECONNREFUSED. Raises CaptureError
        when the name cannot be had again (the old socket is closed then)."""
        old, self.sock = self.sock, None
        if old is None:
            self.bind()
            return []
        try:
            if isinstance(self.own, str):
                self._unlink_own()
                self.bind()
            with contextlib.suppress(OSError):
                old.shutdown(socket.SHUT_RD)  # sends to it fail from now on (EPIPE) instead of queueing
            queued = _drain(old, self.clock)
        finally:
            old.close()
        if self.sock is None:
            self.bind()
        return queued

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self._unlink_own()

    def _unlink_own(self) -> None:
        """Remove the socket file if it is still the one bound here (never someone else's)."""
        if isinstance(self.own, str) and self._bound_inode is not None:
            with contextlib.suppress(OSError):
                st = os.lstat(self.own)
                if (st.st_dev, st.st_ino) == self._bound_inode:
                    os.unlink(self.own)
            self._bound_inode = None


def _receive(sock: socket.socket, clock: Callable[[], float]) -> Received | None:
    """One datagram queued on `sock` with its arrival time from the kernel's timestamp, or None."""
    try:
        data, ancillary, flags, sender = sock.recvmsg(MAX_DATAGRAM, _ANCILLARY, socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return None
    now, wall = clock(), time.time()
    queued = 0.0
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(value)
            age = wall - (sec + nsec / 1e9)
            queued = age if 0.0 <= age <= _MAX_QUEUE_AGE_S else 0.0
    return data, flags, sender, now - queued


def _drain(sock: socket.socket, clock: Callable[[], float]) -> list[Received]:
    """Every datagram queued on `sock`, which no longer receives new ones; a receive error ends
    the list (what is left cannot be read)."""
    queued: list[Received] = []
    while True:
        try:
            got = _receive(sock, clock)
        except OSError:
            return queued
        if got is None:
            return queued
        queued.append(got)


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
