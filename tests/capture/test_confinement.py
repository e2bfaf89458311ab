"""Untrusted input stays where it belongs.

Trace files stay in their folder (`warpwatch.capture.confine`): a link out of it, a FIFO, a
socket, a device or another user's file is refused with a message naming it and why, counted in
`warpwatch_errors_total{stage="read"}`, and never opened — Linux's inotify watches the folders
and reports every open. Strings from traces and file names (kernel and GPU names, file names)
stay inside their label value, log line and table cell: the real agent's /metrics passes
`promtool check metrics` and injects no series, every log line parses on its own, and
`warpwatch analyze` prints no raw control character.

Tests that create devices or other users' files need root (CI runs as root) and skip otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
from pathlib import Path

import pytest

from support.agent import CONTROL, run_cli
from support.confinement import FOREIGN_UID, OpenWatch, listening_socket, make_device
from support.patience import hang_guard
from warpwatch.capture import CapturedWindow
from warpwatch.capture import confine as confine_module
from warpwatch.capture.confine import Checked, RefusedFile, check, open_confined
from warpwatch.capture.daemon import HEADER, KinetoDaemonSource, encode_message
from warpwatch.capture.dirsource import DirSource
from warpwatch.capture.replay import ReplaySource
from warpwatch.config.table import Config
from warpwatch.service.agent import Service

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another uid)")


# --------------------------------------------------------------------------------------------- confine


def test_a_regular_file_and_a_link_to_one_inside_the_folder_are_opened(folder: Path) -> None:
    (folder / "sub").mkdir()
    shutil.copy(CONTROL, folder / "sub" / "real.json.gz")
    (folder / "alias.json.gz").symlink_to("sub/real.json.gz")
    shutil.copy(CONTROL, folder / "plain.json.gz")
    for name in ("plain.json.gz", "alias.json.gz"):
        with open_confined(folder / name) as opened:
            assert stat.S_ISREG(opened.st.st_mode)
            assert Path(opened.reader_path).read_bytes() == CONTROL.read_bytes()
    assert check(folder / "alias.json.gz").target == (folder / "sub" / "real.json.gz").resolve()


def test_a_link_out_of_the_folder_is_refused_naming_its_target(folder: Path, outside: Path) -> None:
    (folder / "escape.json.gz").symlink_to(outside / "secret.json.gz")
    (folder / "dotdot.json.gz").symlink_to("../outside/secret.json.gz")
    watch = OpenWatch(outside)
    try:
        for name in ("escape.json.gz", "dotdot.json.gz"):
            with pytest.raises(RefusedFile) as info:
                check(folder / name)
            assert info.value.reason == "symlink"
            assert str(info.value) == (
                f"{folder / name}: refused: a symbolic link to {outside / 'secret.json.gz'}, "
                f"outside the folder {folder}"
            )
            with pytest.raises(RefusedFile):
                open_confined(folder / name).__enter__()
        assert watch.opened() == set()
    finally:
        watch.close()


def test_fifos_sockets_and_devices_are_refused_without_being_opened(folder: Path) -> None:
    os.mkfifo(folder / "pipe.json")
    sock = listening_socket(folder / "sock.json")
    expected = {"pipe.json": "a FIFO", "sock.json": "a socket"}
    if make_device(folder / "dev.json"):
        expected["dev.json"] = "a character device"
    watch = OpenWatch(folder)
    try:
        for name, kind in expected.items():
            with pytest.raises(RefusedFile) as info, open_confined(folder / name):
                pass
            assert info.value.reason == "not_regular_file"
            assert str(info.value) == f"{folder / name}: refused: {kind}, not a regular file"
        assert watch.opened() == set()
    finally:
        watch.close()
        sock.close()


@ROOT_ONLY
def test_another_users_file_is_refused_unless_the_folder_is_theirs(folder: Path, tmp_path: Path) -> None:
    shutil.copy(CONTROL, folder / "foreign.json.gz")
    os.chown(folder / "foreign.json.gz", FOREIGN_UID, FOREIGN_UID)
    watch = OpenWatch(folder)
    try:
        with pytest.raises(RefusedFile) as info:
            open_confined(folder / "foreign.json.gz").__enter__()
        assert info.value.reason == "foreign_owner"
        assert str(info.value) == (
            f"{folder / 'foreign.json.gz'}: refused: owned by uid {FOREIGN_UID}; only files of "
            "warpwatch's uid (0), root (0) or the folder's owner (0) are read"
        )
        assert watch.opened() == set()
    finally:
        watch.close()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    shutil.copy(CONTROL, theirs / "t.json.gz")
    os.chown(theirs, FOREIGN_UID, FOREIGN_UID)
    os.chown(theirs / "t.json.gz", FOREIGN_UID, FOREIGN_UID)
    with open_confined(theirs / "t.json.gz") as opened:  # whoever owns the folder owns its files anyway
        assert opened.st.st_uid == FOREIGN_UID


def pretend_regular(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """The entry passed `check` a moment ago and was swapped before the open."""
    monkeypatch.setattr(confine_module, "check", lambda p, folder=None: Checked(p, p, os.stat(CONTROL)))


def test_a_fifo_swapped_in_after_the_check_neither_blocks_nor_is_read(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    os.mkfifo(folder / "late.json")
    pretend_regular(monkeypatch, folder / "late.json")
    outcome: list[BaseException] = []

    def attempt() -> None:
        try:
            with open_confined(folder / "late.json"):
                pass
        except RefusedFile as exc:
            outcome.append(exc)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "opening a FIFO blocked"
    [exc] = outcome
    assert isinstance(exc, RefusedFile) and exc.reason == "not_regular_file"


def test_a_link_swapped_in_after_the_check_is_not_followed(
    folder: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (folder / "late.json.gz").symlink_to(outside / "secret.json.gz")
    pretend_regular(monkeypatch, folder / "late.json.gz")
    watch = OpenWatch(outside)
    try:
        with pytest.raises(RefusedFile) as info:
            open_confined(folder / "late.json.gz").__enter__()
        assert (info.value.reason, info.value.detail) == ("symlink", "changed into a symbolic link while being opened")
        assert watch.opened() == set()
    finally:
        watch.close()


# --------------------------------------------------------------------------------------------- sources


def test_the_dir_source_hands_refused_entries_over_at_once_and_only_once(folder: Path, outside: Path) -> None:
    (folder / "escape.json.gz").symlink_to(outside / "secret.json.gz")
    os.mkfifo(folder / "pipe.json")
    shutil.copy(CONTROL, folder / "good.json.gz")
    watch = OpenWatch(folder, outside)
    src = DirSource(folder, give_up_s=3600)
    try:
        windows = src.capture(0.01, 1.0)
        assert sorted(w.path.name for w in windows if w.path) == ["escape.json.gz", "good.json.gz", "pipe.json"]
        for w in windows:
            w.done(True)
        assert src.capture(0.01, 1.0) == []
        # Only the good file was opened (its completeness checked through confine).
        assert watch.opened() == {folder / "good.json.gz"}
    finally:
        watch.close()


def test_a_replayed_folder_leaves_refused_files_out_and_reports_them_once(folder: Path, outside: Path) -> None:
    shutil.copy(CONTROL, folder / "a.json.gz")
    (folder / "b.json.gz").symlink_to(outside / "secret.json.gz")
    (folder / "sub.json").mkdir()  # a folder with a trace name: not a file, ignored
    src = ReplaySource(folder)
    src.start()
    assert src.files == (folder / "a.json.gz",)
    first = [w.path for w in src.capture(1, 1)]
    assert first == [folder / "b.json.gz", folder / "a.json.gz"]  # the refused one once, for its log line
    assert [w.path for w in src.capture(1, 1)] == [folder / "a.json.gz"]


@pytest.mark.slow
def test_replaying_a_single_refused_file_stops_the_start_with_the_reason(folder: Path) -> None:
    os.mkfifo(folder / "pipe.json")
    result = run_cli("run", "--source", f"replay:{folder / 'pipe.json'}", "--port", "0", timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"warpwatch: error: replay:{folder / 'pipe.json'}: {folder / 'pipe.json'}: refused: a FIFO, not a regular file"
    )


def req(pids: list[int]) -> bytes:
    return encode_message("req", struct.pack("<iiq", 3, len(pids), 0) + struct.pack(f"<{len(pids)}i", *pids))


def test_a_link_in_the_daemon_trace_dir_is_refused_and_deleted_leaving_its_target(outside: Path) -> None:
    """A stand-in Kineto client collects a config; a link to a file outside appears where its
    trace should be. The reader refuses it; the window's clean-up deletes the link only."""
    root = Path(tempfile.mkdtemp(prefix="ww", dir="/tmp"))  # Unix socket paths are short
    src = KinetoDaemonSource(root / "t", socket_dir=str(root / "s"), poll_interval_hint_s=1.0)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    src.start()
    try:
        client.bind(str(root / "s" / "client"))
        client.settimeout(hang_guard(2))
        daemon = str(root / "s" / "dynolog")
        client.sendto(req([os.getpid()]), daemon)
        client.recv(4096)  # registered
        results: list[list[CapturedWindow]] = []
        # The window waits up to 60 s for the trace: it ends when the link appears, however late
        # a loaded machine lets the client poll (a 0.5-s wait once went by before it did).
        capture = threading.Thread(target=lambda: results.append(src.capture(0.2, 60)))
        capture.start()
        config = ""
        while "ACTIVITIES_LOG_FILE=" not in config:  # polls, as Kineto does, until the config comes
            assert capture.is_alive(), results
            time.sleep(0.05)
            client.sendto(req([os.getpid()]), daemon)
            config = client.recv(4096)[HEADER.size :].decode()
        log_file = Path(re.search(r"ACTIVITIES_LOG_FILE=(\S+)", config).group(1))  # type: ignore[union-attr]
        link = log_file.with_name(f"{log_file.stem}_{os.getpid()}.json")
        link.symlink_to(outside / "secret.json.gz")
        capture.join(hang_guard(15))
        [window] = results[0]
        assert window.path == link
        svc = Service(Config(source=("kineto-daemon",), port=0, address="127.0.0.1"), sources=[])
        result = svc.rounds.process_window(window)
        assert (result.outcome, result.fault) == ("failed", ("read", "refused_symlink"))
        assert not os.path.lexists(link)
        assert (outside / "secret.json.gz").read_bytes() == CONTROL.read_bytes()
    finally:
        client.close()
        src.close()
        shutil.rmtree(root, ignore_errors=True)
