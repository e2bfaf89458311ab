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

import ctypes
import json
import os
import re
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.agent import CONTROL, Agent, parse, run_cli, sample, series
from support.tracebuild import H100, kernel, span, trace_doc, write
from warpwatch.capture import CapturedWindow
from warpwatch.capture import confine as confine_module
from warpwatch.capture.confine import Checked, RefusedFile, check, open_confined
from warpwatch.capture.daemon import HEADER, KinetoDaemonSource, encode_message
from warpwatch.capture.dirsource import DirSource
from warpwatch.capture.replay import ReplaySource
from warpwatch.config import Config
from warpwatch.export import metricdefs as md
from warpwatch.logs import JsonFormatter, TextFormatter
from warpwatch.model import FAULTS
from warpwatch.names.labels import MAX_LABEL_LENGTH, name_hash
from warpwatch.service.agent import Service

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another uid)")
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


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "traces"
    d.mkdir()
    return d


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    shutil.copy(CONTROL, d / "secret.json.gz")
    return d


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
            assert str(info.value) == (f"{folder / name}: refused: a symbolic link to {outside / 'secret.json.gz'}, "
                                       f"outside the folder {folder}")
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
        assert str(info.value) == (f"{folder / 'foreign.json.gz'}: refused: owned by uid {FOREIGN_UID}; only files of "
                                   "warpwatch's uid (0), root (0) or the folder's owner (0) are read")
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


def test_replaying_a_single_refused_file_stops_the_start_with_the_reason(folder: Path) -> None:
    os.mkfifo(folder / "pipe.json")
    result = run_cli("run", "--source", f"replay:{folder / 'pipe.json'}", "--port", "0", timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"warpwatch: error: replay:{folder / 'pipe.json'}: {folder / 'pipe.json'}: refused: a FIFO, not a regular file")


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
        client.settimeout(2)
        daemon = str(root / "s" / "dynolog")
        client.sendto(req([os.getpid()]), daemon)
        client.recv(4096)  # registered
        results: list[list[CapturedWindow]] = []
        capture = threading.Thread(target=lambda: results.append(src.capture(0.2, 0.5)))
        capture.start()
        time.sleep(0.2)
        client.sendto(req([os.getpid()]), daemon)
        config = client.recv(4096)[HEADER.size :].decode()
        log_file = Path(re.search(r"ACTIVITIES_LOG_FILE=(\S+)", config).group(1))  # type: ignore[union-attr]
        link = log_file.with_name(f"{log_file.stem}_{os.getpid()}.json")
        link.symlink_to(outside / "secret.json.gz")
        capture.join(15)
        [window] = results[0]
        assert window.path == link
        svc = Service(Config(source=("kineto-daemon",), port=0, address="127.0.0.1"), sources=[])
        result = svc.process_window(window)
        assert (result.outcome, result.fault) == ("failed", ("read", "refused_symlink"))
        assert not os.path.lexists(link)
        assert (outside / "secret.json.gz").read_bytes() == CONTROL.read_bytes()
    finally:
        client.close()
        src.close()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------------------------- the agent


def failed_lines(agent: Agent) -> dict[str, str]:
    records = [json.loads(line) for line in agent.lines]
    return {r["file"]: r["error"] for r in records if r["event"] == "window" and r["outcome"] == "failed"}


def test_the_agent_refuses_counts_and_names_each_entry_once_and_opens_none(
    folder: Path, outside: Path, tmp_path: Path
) -> None:
    (folder / "sub").mkdir()
    shutil.copy(CONTROL, folder / "sub" / "real.json.gz")
    shutil.copy(CONTROL, folder / "good.json.gz")
    (folder / "alias.json.gz").symlink_to("sub/real.json.gz")
    (folder / "escape.json.gz").symlink_to(outside / "secret.json.gz")
    os.mkfifo(folder / "pipe.json")
    sock = listening_socket(folder / "sock.json")
    expected = {
        "escape.json.gz": f"refused: a symbolic link to {outside / 'secret.json.gz'}, outside the folder {folder}",
        "pipe.json": "refused: a FIFO, not a regular file",
        "sock.json": "refused: a socket, not a regular file",
    }
    reasons = {"refused_symlink": 1.0, "refused_not_regular_file": 2.0, "refused_foreign_owner": 0.0}
    if make_device(folder / "dev.json"):
        expected["dev.json"] = "refused: a character device, not a regular file"
        reasons["refused_not_regular_file"] += 1
    if os.geteuid() == 0:
        shutil.copy(CONTROL, folder / "foreign.json.gz")
        os.chown(folder / "foreign.json.gz", FOREIGN_UID, FOREIGN_UID)
        expected["foreign.json.gz"] = (f"refused: owned by uid {FOREIGN_UID}; only files of warpwatch's uid (0), "
                                       "root (0) or the folder's owner (0) are read")
        reasons["refused_foreign_owner"] = 1.0
    watch = OpenWatch(folder, outside)
    agent = Agent("--source", f"dir:{folder}", *FAST, "--log-format", "json")
    try:
        done = agent.wait_for(lambda s: sample(s, "warpwatch_windows_total", outcome="failed") == len(expected)
                              and sample(s, "warpwatch_windows_total", outcome="ok") == 2)
        for reason, count in reasons.items():
            assert sample(done, ERRORS, stage="read", reason=reason) == count, reason
        time.sleep(1.0)  # more rounds: nothing is refused (or counted, or logged) twice
        again = agent.scrape()
        for reason, count in reasons.items():
            assert sample(again, ERRORS, stage="read", reason=reason) == count, reason
        assert sample(again, "warpwatch_windows_total", outcome="ok") == 2
    finally:
        rc, _ = agent.stop()
        sock.close()
        opened = watch.opened()
        watch.close()
    assert rc == 0
    assert failed_lines(agent) == expected
    # Only the good file and the folder on the inside link's way were opened (sub/ is not watched).
    assert opened == {folder / "good.json.gz", folder / "sub"}, opened


# --------------------------------------------------------------------------------------------- strings

HOSTILE_NAMES = [
    'evil"} 1\nfake_metric{job="x"} 1',
    "ctl\x00\x01\x1b[31mred\x07\r\nend",
    'back\\slash"quote\\',
    "x" * (1 << 20),  # 1 MiB
    "[bold]markup[/]",
    "line\u2028sep\u0085nel\u2029",
    "zero\u200bwidth\u202eRTL\ufeff",
    "tab\tkernel<float>",
    "_ZN" + "3abc" * 50_000,  # a long mangled name
    "ok_kernel",
]
UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\ufeff]")


def hostile_trace(path: Path) -> Path:
    events = [span(0, 1000)] + [kernel(n, ts=10 + i * 50, dur=5) for i, n in enumerate(HOSTILE_NAMES)]
    gpu = dict(H100, name='H100"} 1\nfake_gpu 1\x1b[31m\u2028' + "y" * 500)
    return write(path, trace_doc(events, devices=[gpu]))


def invalid_utf8_trace(path: Path) -> Path:
    data = json.dumps(trace_doc([span(0, 1000), kernel("BAD_NAME", ts=10, dur=5)])).encode()
    path.write_bytes(data.replace(b"BAD_NAME", b"bad\xff\xfe\xc3(name"))
    return path


@pytest.fixture(scope="module")
def hostile_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Agent, Path]]:
    d = tmp_path_factory.mktemp("hostile")
    hostile_trace(d / "a_hostile.json")
    invalid_utf8_trace(d / "b_invalid_utf8.json")
    agent = Agent("--source", f"replay:{d}", *FAST, "--log-format", "json", startup_timeout=30)
    try:
        agent.wait_for(lambda s: (sample(s, "warpwatch_windows_total", outcome="ok") or 0) >= 2, timeout=40)
        yield agent, d
    finally:
        agent.stop()


def test_hostile_names_leave_the_exposition_valid_for_promtool(hostile_agent: tuple[Agent, Path]) -> None:
    agent, _ = hostile_agent
    status, _, body = agent.get("/metrics")
    assert status == 200
    if shutil.which("promtool"):
        proc = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60,
                              check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    text = body.decode("utf-8")  # valid UTF-8, or this raises
    samples = parse(text)
    known = {md.exposed_name(m) for m in (*md.ALL, *md.AGENT)} | {m.name for m in (*md.ALL, *md.AGENT)}
    names = {name for name, _ in samples}
    ours = {n for n in names if n.startswith("warpwatch_")}
    assert {n.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum") for n in ours} <= known
    assert not any("fake" in n for n in names)
    assert not {n for n in names if not n.startswith(("warpwatch_", "process_", "python_"))}
    kernels = {dict(labels)["kernel"] for labels in series(samples, md.KERNEL_TIME_SHARE.name)}
    assert len(kernels) == len(HOSTILE_NAMES)
    for label in kernels:
        assert len(label) <= MAX_LABEL_LENGTH and not UNPRINTABLE.search(label) and "\n" not in label, repr(label)
    [info] = series(samples, md.GPU_INFO.name)
    gpu_name = dict(info)["name"]
    assert len(gpu_name) <= MAX_LABEL_LENGTH and not UNPRINTABLE.search(gpu_name), repr(gpu_name)
    # Everything our exposition says about a kernel is in a label value: each line is one sample.
    for line in text.splitlines():
        assert line.startswith(("# HELP ", "# TYPE ", "warpwatch_", "process_", "python_")), line


def test_a_trace_with_invalid_utf8_fails_only_its_own_window(hostile_agent: tuple[Agent, Path]) -> None:
    agent, _ = hostile_agent
    samples = agent.wait_for(lambda s: (sample(s, ERRORS, stage="read", reason="invalid_trace") or 0) >= 1)
    assert (sample(samples, "warpwatch_windows_total", outcome="ok") or 0) >= 1
    assert series(samples, md.KERNEL_TIME_SHARE.name)  # the last good snapshot is still served
    # Replayed every other window, the same failure is logged once (repeats go to debug level).
    agent.wait_for(lambda s: (sample(s, ERRORS, stage="read", reason="invalid_trace") or 0) >= 3)
    logged = [line for line in agent.lines if '"b_invalid_utf8.json"' in line and '"event": "window"' in line]
    assert len(logged) == 1, logged


def test_every_log_line_of_the_hostile_run_is_one_json_object(hostile_agent: tuple[Agent, Path]) -> None:
    agent, _ = hostile_agent
    for line in list(agent.lines):
        record = json.loads(line)
        assert isinstance(record, dict) and "event" in record
        assert not UNPRINTABLE.search(line), repr(line)


HOSTILE_FILE_NAMES = [
    'new\nline"quoted=x.json',
    "esc\x1b[31mred\x07.json",
    "sep\u2028arator.json",
    os.fsdecode(b"bad\xff\xfeutf8.json"),  # not UTF-8: Python holds it as lone surrogates
]


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_hostile_file_names_stay_on_one_log_line(log_format: str, folder: Path) -> None:
    for name in HOSTILE_FILE_NAMES:
        shutil.copy(CONTROL, folder / name)
    agent = Agent("--source", f"dir:{folder}", *FAST, "--log-format", log_format)
    try:
        agent.wait_for(lambda s: sample(s, "warpwatch_windows_total", outcome="ok") == len(HOSTILE_FILE_NAMES))
    finally:
        rc, _ = agent.stop()
    assert rc == 0
    window_lines = [line for line in agent.lines if "window" in line and "outcome" in line]
    assert len(window_lines) == len(HOSTILE_FILE_NAMES)
    for line in agent.lines:
        assert not UNPRINTABLE.search(line), repr(line)
        if log_format == "json":
            json.loads(line)
        else:
            assert re.match(r'^ts=\S+ level=[a-z]+ event=[a-z_]+( [a-z_]+=("([^"\\]|\\.)*"|\S+))*$', line), line
    files = set()
    for line in window_lines:
        if log_format == "json":
            files.add(json.loads(line)["file"])
        else:
            quoted = re.search(r' file=("([^"\\]|\\.)*")', line)
            assert quoted, line
            files.add(json.loads(quoted.group(1)))
    assert files == set(HOSTILE_FILE_NAMES)  # escaped, not lost: each decodes back to the name


@pytest.mark.parametrize("formatter", [TextFormatter(), JsonFormatter()])
def test_a_log_record_is_one_line_whatever_its_values(formatter: Any) -> None:
    import logging

    record = logging.LogRecord("warpwatch.test", logging.WARNING, __file__, 1, "window", None, None)
    record.warpwatch_fields = {"file": HOSTILE_FILE_NAMES[0], "error": "\ud800\x00\u2028\U0001F600", "n": 1}
    line = formatter.format(record)
    assert "\n" not in line and not UNPRINTABLE.search(line)
    line.encode("utf-8")  # no lone surrogate left
    if isinstance(formatter, JsonFormatter):
        assert json.loads(line)["file"] == HOSTILE_FILE_NAMES[0]


def test_the_analyze_table_prints_no_raw_control_character(tmp_path: Path) -> None:
    path = hostile_trace(tmp_path / "hostile.json")
    result = run_cli("analyze", str(path), timeout=60)
    assert result.returncode == 0, result.stderr
    assert not UNPRINTABLE.search(result.stdout), [m.group() for m in UNPRINTABLE.finditer(result.stdout)][:10]
    assert "[bold]markup[/]" in result.stdout  # shown as written, not read as rich markup
    # The table shows kernel labels: control characters dropped, and so a hash of the full name.
    assert "ctl[31mredend~" + name_hash(HOSTILE_NAMES[1]) in result.stdout
    lines = result.stdout.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("  ─"))
    rows = lines[rule + 1:rule + 1 + len(HOSTILE_NAMES)]
    assert all(re.search(r"  \d+\.\d\d$", line) for line in rows)  # one row per kernel: no name broke a row
    assert lines[rule + 1 + len(HOSTILE_NAMES)].startswith("  Kernel:")


def test_fault_labels_are_public_and_bounded() -> None:
    """Every (stage, reason) exported is documented in docs/metrics.md."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    for stage, reason in FAULTS:
        assert f"| `{stage}` | `{reason}` |" in doc

