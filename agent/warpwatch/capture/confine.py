"""Trace files stay in their folder: which entries may be read, and how they are opened.

A trace folder is shared with the traced workload, often through a volume that other containers
(and other users) write to, so its entries are untrusted input. An entry is read only when

- it is a regular file, or a symbolic link whose resolved target is a regular file inside the
  same folder (a link out of the folder is refused, whatever it points to);
- it belongs to the agent's own uid, to root, or to the owner of the folder (whoever owns the
  folder can replace its files anyway); another user's file is refused;

and FIFOs, sockets, devices and directories are refused without ever being opened (`check`
decides from `lstat`). `open_confined` then opens the file without following any symbolic link
on the way from the folder (`openat` with `O_NOFOLLOW` per component) and with `O_NONBLOCK`, so
that a FIFO swapped in after the check cannot block the agent, and checks the open file again
with `fstat`: what is read is what was checked. Readers that take a path get
`/proc/self/fd/N`, which reopens that very file (where `/proc` is missing, the checked path).

Every refusal is a `RefusedFile` naming the file and why; its `reason` is one of `REASONS`,
short enough for a metric label.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import CaptureError

__all__ = ["REASONS", "Checked", "ConfinedFile", "RefusedFile", "check", "open_confined"]

REASONS = ("symlink", "not_regular_file", "foreign_owner", "unreadable")
"""Why a file is refused: a link out of its folder (or one swapped in while opening); a FIFO,
socket, device or directory; another user's file; an `OSError` while looking at or opening it."""

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_PROC_FD = Path("/proc/self/fd")


class RefusedFile(CaptureError):
    """A trace file that must not be read; `reason` is one of `REASONS`."""

    def __init__(self, path: Path, reason: str, detail: str) -> None:
        self.path = path
        self.reason = reason
        self.detail = detail
        super().__init__(f"{path}: refused: {detail}")


@dataclass(frozen=True, slots=True)
class Checked:
    """An entry that may be read: `target` is `path`, or the resolved target of a link inside
    the folder; `st` is the target's `stat`."""

    path: Path
    target: Path
    st: os.stat_result


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _trusted(folder_st: os.stat_result) -> frozenset[int]:
    return frozenset({os.geteuid(), 0, folder_st.st_uid})


def _check_owner(path: Path, st: os.stat_result, folder_st: os.stat_result) -> None:
    if st.st_uid not in _trusted(folder_st):
        raise RefusedFile(
            path,
            "foreign_owner",
            f"owned by uid {st.st_uid}; only files of warpwatch's uid ({os.geteuid()}), root (0) "
            f"or the folder's owner ({folder_st.st_uid}) are read",
        )


def _check_mode(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise RefusedFile(path, "not_regular_file", f"{_kind(st.st_mode)}, not a regular file")


def check(path: Path, folder: Path | None = None) -> Checked:
    """Decide from `lstat` (nothing is opened) whether `path`, an entry of `folder` (default: its
    parent), may be read; raise `RefusedFile` if not."""
    folder = path.parent if folder is None else folder
    try:
        folder_st = os.stat(folder)
        st = os.lstat(path)
        target = path
        if stat.S_ISLNK(st.st_mode):
            real_folder = os.path.realpath(folder)
            resolved = os.path.realpath(path)
            if os.path.commonpath([real_folder, resolved]) != real_folder or resolved == real_folder:
                raise RefusedFile(path, "symlink", f"a symbolic link to {resolved}, outside the folder {folder}")
            target = Path(resolved)
            st = os.lstat(target)
    except RefusedFile:
        raise
    except OSError as exc:
        raise RefusedFile(path, "unreadable", f"cannot look at it: {exc.strerror or exc}") from None
    _check_mode(path, st)
    _check_owner(path, st, folder_st)
    return Checked(path, target, st)


@dataclass(frozen=True, slots=True)
class ConfinedFile:
    """An open, checked trace file. `reader_path` reopens this very file (see module doc)."""

    fd: int
    st: os.stat_result
    reader_path: str


@contextmanager
def open_confined(path: Path, folder: Path | None = None) -> Iterator[ConfinedFile]:
    """`check`, open without following links and without blocking, check again with `fstat`;
    the file is closed on leaving. Raises `RefusedFile`."""
    folder = path.parent if folder is None else folder
    checked = check(path, folder)
    real_folder = Path(os.path.realpath(folder))
    parts = checked.target.relative_to(real_folder).parts if checked.target != path else (path.name,)
    fd, folder_st = _open_below(path, real_folder, parts)
    try:
        st = os.fstat(fd)
        _check_mode(path, st)
        _check_owner(path, st, folder_st)
        yield ConfinedFile(fd, st, str(_PROC_FD / str(fd)) if _PROC_FD.is_dir() else str(checked.target))
    finally:
        os.close(fd)


def _open_below(path: Path, folder: Path, parts: tuple[str, ...]) -> tuple[int, os.stat_result]:
    """Open folder/parts[0]/.../parts[-1] with no symbolic link followed below `folder`;
    return the file and the folder's `fstat`."""
    try:
        current = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        folder_st = os.fstat(current)
    except OSError as exc:
        raise RefusedFile(path, "unreadable", f"cannot open its folder: {exc.strerror or exc}") from None
    try:
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            try:
                fd = os.open(part, _OPEN_FLAGS if last else _DIR_FLAGS, dir_fd=current)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise RefusedFile(path, "symlink", "changed into a symbolic link while being opened") from None
                raise RefusedFile(path, "unreadable", f"cannot open it: {exc.strerror or exc}") from None
            os.close(current)
            current = fd
        return current, folder_st
    except BaseException:
        os.close(current)
        raise
