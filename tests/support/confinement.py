"""Helpers of tests/capture/test_confinement.py and test_confinement_agent.py."""

from __future__ import annotations

import ctypes
import os
import socket
import stat
import struct
from pathlib import Path

from warpwatch.export import metricdefs as md

FOREIGN_UID = 12345


FAST = ("--period", "300ms", "--window", "20ms", "--jitter", "0", "--allow-high-duty", "--collect-timeout", "1s")


ERRORS = md.exposed_name(md.ERRORS)


class OpenWatch:
    """Linux inotify on some folders: which entries were opened (IN_OPEN), by anyone."""

    IN_OPEN = 0x20

    def __init__(self, *folders: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        self._folders: dict[int, Path] = {}
        for folder in folders:
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(folder), self.IN_OPEN)
            assert wd >= 0, os.strerror(ctypes.get_errno())
            self._folders[wd] = folder
        self._opened: set[Path] = set()

    def opened(self) -> set[Path]:
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return set(self._opened)
            i = 0
            while i < len(buf):
                wd, _mask, _cookie, length = struct.unpack_from("iIII", buf, i)
                name = buf[i + 16 : i + 16 + length].rstrip(b"\0")
                if name:  # an empty name is the folder itself (listed)
                    self._opened.add(self._folders[wd] / os.fsdecode(name))
                i += 16 + length

    def close(self) -> None:
        os.close(self.fd)


def make_device(path: Path) -> bool:
    """A character device node with /dev/null's numbers, where allowed (root with CAP_MKNOD)."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        return False
    return True


def listening_socket(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen()
    return s
