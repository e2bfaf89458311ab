"""Sources that read files (dir:, replay:), the spec registry, and NVML's error paths."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from support.clock import Clock
from support.dirsource import ALEXNET, CONTROL, names, set_mtime
from support.reachable import reachable
from warpwatch.capture import CapturedWindow, dirsource
from warpwatch.capture.dirsource import DirSource, is_trace_name, labels_for
from warpwatch.capture.replay import ReplaySource
from warpwatch.errors import CaptureError


def finish(windows: list[CapturedWindow]) -> None:
    for w in windows:
        w.done(True)


# --------------------------------------------------------------------------------------------- dir:


def test_each_finished_file_is_handed_over_exactly_once(folder: Path) -> None:
    shutil.copy(CONTROL, folder / "host_1.1700000000000000000.pt.trace.json.gz")
    (folder / "b.json").write_text('{"traceEvents": []}')
    src = DirSource(folder, json_settle_s=0)
    src.start()
    first = src.capture(0.01, 1.0)
    assert set(names(first)) == {"host_1.1700000000000000000.pt.trace.json.gz", "b.json"}
    assert next(w for w in first if w.path and w.path.name.endswith(".gz")).labels == {"process": "host_1"}
    finish(first)
    assert src.capture(0.01, 1.0) == []
    assert folder.joinpath("b.json").exists()  # not deleted unless asked


def test_a_file_handed_over_but_not_yet_done_is_not_handed_over_again(folder: Path) -> None:
    (folder / "a.json").write_text("{}")
    src = DirSource(folder, json_settle_s=0)
    first = src.capture(0.01, 1.0)
    assert names(first) == ["a.json"]
    assert src.capture(0.01, 1.0) == []
    first[0].done(False)  # abandoned (shutdown): offered again
    assert names(src.capture(0.01, 1.0)) == ["a.json"]


def test_temporary_hidden_and_foreign_files_are_ignored(folder: Path) -> None:
    for name in ("a.json.tmp", "trace.json.gz.part", ".hidden.json", "notes.txt", "a.pt.trace.json.gz.partial"):
        (folder / name).write_text("{}")
    (folder / "sub").mkdir()
    (folder / "sub" / "x.json").write_text("{}")
    assert DirSource(folder).capture(0.01, 1.0) == []
    assert [is_trace_name(n) for n in ("x.json", "x.JSON.GZ", "x.pt.trace.json", "x.json.tmp", ".x.json")] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_an_incomplete_gzip_waits_until_complete(folder: Path) -> None:
    data = CONTROL.read_bytes()
    target = folder / "w.json.gz"
    target.write_bytes(data[: len(data) // 2])
    clock = Clock()
    src = DirSource(folder, give_up_s=30.0, clock=clock)
    assert src.capture(0.01, 1.0) == []  # stable, but the gzip stream is cut
    target.write_bytes(data)
    assert names(src.capture(0.01, 1.0)) == ["w.json.gz"]


def test_a_file_that_never_completes_is_handed_over_after_give_up_so_its_window_fails(folder: Path) -> None:
    (folder / "empty.json").write_bytes(b"")
    (folder / "garbage.json").write_bytes(b"\x00\x01 not json")
    data = CONTROL.read_bytes()
    (folder / "cut.json.gz").write_bytes(data[:1000])
    clock = Clock()
    src = DirSource(folder, give_up_s=5.0, clock=clock)
    assert src.capture(0.01, 1.0) == []
    clock.now = 4.9
    assert src.capture(0.01, 1.0) == []
    clock.now = 5.0
    windows = src.capture(0.01, 1.0)
    assert sorted(names(windows)) == ["cut.json.gz", "empty.json", "garbage.json"]
    finish(windows)
    clock.now = 100.0
    assert src.capture(0.01, 1.0) == []


def test_a_file_still_growing_is_not_handed_over(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = folder / "growing.json"
    target.write_text('{"traceEvents": []}')
    list_traces = dirsource.list_traces

    def growing(*args: Any, **kwargs: Any) -> Any:
        listing = list_traces(*args, **kwargs)  # one look at the folder
        with target.open("a") as f:  # the writer appends between the two looks
            f.write(" ")
        return listing

    monkeypatch.setattr(dirsource, "list_traces", growing)
    assert DirSource(folder).capture(0.01, 1.0) == []


def test_a_file_rewritten_in_place_counts_as_new(folder: Path) -> None:
    target = folder / "a.json"
    target.write_text("{}")
    set_mtime(target, 1_000)
    src = DirSource(folder, json_settle_s=0)
    finish(src.capture(0.01, 1.0))
    target.write_text('{"traceEvents": []}')
    set_mtime(target, 2_000)
    assert names(src.capture(0.01, 1.0)) == ["a.json"]


def test_delete_processed_removes_the_file_once_done(folder: Path) -> None:
    (folder / "a.json").write_text("{}")
    src = DirSource(folder, delete_processed=True, json_settle_s=0)
    windows = src.capture(0.01, 1.0)
    assert (folder / "a.json").exists()  # not before the window is analysed
    finish(windows)
    assert not (folder / "a.json").exists()


def test_retention_deletes_the_oldest_processed_files_only(folder: Path) -> None:
    for i, name in enumerate(("old.json", "mid.json", "new.json")):
        (folder / name).write_text("{" + " " * 100 + "}")
        set_mtime(folder / name, 1_000 + i)
    src = DirSource(folder, retention_files=2)
    windows = src.capture(0.01, 1.0)
    (folder / "unprocessed.json").write_text("{}")
    set_mtime(folder / "unprocessed.json", 10)  # the oldest of all, but not processed: kept
    finish(windows)
    assert sorted(p.name for p in folder.iterdir()) == ["new.json", "unprocessed.json"]


def test_retention_by_bytes(folder: Path) -> None:
    for i in range(4):
        (folder / f"{i}.json").write_text("{" + " " * 998 + "}")  # 1000 bytes each
        set_mtime(folder / f"{i}.json", 1_000 + i)
    src = DirSource(folder, retention_bytes=2500)
    finish(src.capture(0.01, 1.0))
    assert sorted(p.name for p in folder.iterdir()) == ["2.json", "3.json"]


def test_the_memory_of_processed_files_is_pruned_to_files_present(folder: Path) -> None:
    src = DirSource(folder)
    for i in range(50):
        (folder / f"{i}.json").write_text("{}")
        finish(src.capture(0.0, 1.0))
        (folder / f"{i}.json").unlink()
    src.capture(0.0, 1.0)
    assert not {s for s in reachable(src, str) if re.fullmatch(r"\d+\.json", s)}  # nothing of the files gone


def test_a_missing_folder_is_waited_for_and_a_file_is_refused(tmp_path: Path) -> None:
    src = DirSource(tmp_path / "later", json_settle_s=0)
    src.start()
    assert src.capture(0.01, 1.0) == []
    (tmp_path / "later").mkdir()
    (tmp_path / "later" / "a.json").write_text("{}")
    assert names(src.capture(0.01, 1.0)) == ["a.json"]
    (tmp_path / "file").write_text("")
    with pytest.raises(CaptureError, match="is not a folder"):
        DirSource(tmp_path / "file", name="dir:x").start()


def test_close_interrupts_the_wait(folder: Path) -> None:
    (folder / "a.json").write_text("{}")
    src = DirSource(folder)
    src.close()
    assert src.capture(30.0, 30.0) == []


def test_labels_from_tensorboard_trace_handler_names() -> None:
    assert labels_for("node-3_4211.1717000000123456789.pt.trace.json.gz") == {"process": "node-3_4211"}
    assert labels_for("trace.json") == {}


# --------------------------------------------------------------------------------------------- replay:


def test_replay_cycles_through_a_folder_in_sorted_order(folder: Path) -> None:
    for name in ("b.json.gz", "a.json", "c.txt"):
        (folder / name).write_text("{}")
    src = ReplaySource(folder)
    src.start()
    got = [names(src.capture(1.0, 1.0))[0] for _ in range(5)]
    assert got == ["a.json", "b.json.gz", "a.json", "b.json.gz", "a.json"]
    assert all(w.requested is None for w in src.capture(1.0, 1.0))


def test_replay_of_one_file_and_its_errors(tmp_path: Path) -> None:
    src = ReplaySource(ALEXNET)
    src.start()
    assert names(src.capture(1.0, 1.0)) == [ALEXNET.name]
    with pytest.raises(CaptureError, match="does not exist"):
        ReplaySource(tmp_path / "nope").start()
    with pytest.raises(CaptureError, match="no trace files"):
        ReplaySource(tmp_path).start()
