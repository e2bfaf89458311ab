"""Generative test of the dir: surface (issue 20): whatever a folder holds, and however its files
change while they are checked, the real `DirSource` feeding a real `Service` round returns
cleanly. Each trace-named entry is handed over and counted as one window, a failed one with a
message and a log line naming the file; nothing escapes `capture()`, the reader or the log
formatters; a round ends within a generous bound.

Entries: real traces (plain and gzip, whole and cut), arbitrary bytes, `.gz` that is not gzip,
deep nesting, empty files, FIFOs, directories and links (inside the folder, out of it, dangling)
named like traces; names of any Unicode, undecodable bytes, 255 bytes long, dotfiles, `.tmp`.
Mutations (truncate, append, replace, delete, chmod 000) happen inside the check: after the
source has opened the file and before it reads it."""

from __future__ import annotations

import gzip
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.agent import parse, sample
from support.paths import corpus_bytes
from warpwatch.capture import files
from warpwatch.capture.confine import ConfinedFile
from warpwatch.capture.dirsource import DirSource, is_trace_name
from warpwatch.config.table import Config
from warpwatch.export import metricdefs as md
from warpwatch.logs import JsonFormatter, TextFormatter
from warpwatch.service.agent import Service

REAL_GZ = corpus_bytes("facebookresearch__HolisticTraceAnalysis/tests/data/triton_example/triton_example.json.gz")
REAL_JSON = corpus_bytes("pytorch__kineto/docs/traces/after_fix_trace.json")
NAME_MAX = 255

_CONTENTS: dict[str, Any] = {
    "real_json": lambda n: REAL_JSON,
    "real_gz": lambda n: REAL_GZ,
    "cut_json": lambda n: REAL_JSON[: n % len(REAL_JSON)],
    "cut_gz": lambda n: REAL_GZ[: n % len(REAL_GZ)],
    "json_in_gz_name": lambda n: REAL_JSON,  # a .gz that is not gzip
    "gz_of_garbage": lambda n: gzip.compress(os.urandom(n % 512)),
    "deep": lambda n: b'{"traceEvents": [' + b"[" * (n * 97 % 50_000) + b"]" * (n * 97 % 50_000) + b"]}",
    "empty": lambda n: b"",
}

_SUFFIXES = (".json", ".json.gz", ".pt.trace.json", ".JSON", ".json.tmp", ".json.gz.part", ".txt", "")
_STEMS = st.one_of(
    st.text(st.characters(exclude_characters="/\x00", exclude_categories=("Cs",)), min_size=1, max_size=40),
    st.binary(min_size=1, max_size=20).map(lambda b: os.fsdecode(b.replace(b"/", b"_").replace(b"\0", b"_"))),
    st.just("x" * 250),
    st.sampled_from([".hidden", "-", " spaced name ", "a\nb", "\u202e"]),
)

_ENTRY = st.fixed_dictionaries(
    {
        "stem": _STEMS,
        "suffix": st.sampled_from(_SUFFIXES),
        "kind": st.sampled_from(["file"] * 6 + ["random", "fifo", "dir", "link_in", "link_out", "dangling"]),
        "content": st.sampled_from(sorted(_CONTENTS)),
        "n": st.integers(0, 100_000),
        "noise": st.binary(max_size=2048),
        "mutation": st.sampled_from(["none"] * 3 + ["truncate", "append", "replace", "delete", "chmod"]),
    }
)


def _name(entry: dict[str, Any]) -> str | None:
    name = entry["stem"] + entry["suffix"]
    raw = os.fsencode(name)
    if name in (".", "..") or len(raw) > NAME_MAX:
        raw = raw[: NAME_MAX - len(os.fsencode(entry["suffix"]))] + os.fsencode(entry["suffix"])
        try:
            name = os.fsdecode(raw)
        except UnicodeDecodeError:
            return None
    return name if name not in (".", "..") and b"/" not in os.fsencode(name) else None


def _make(folder: Path, outside: Path, name: str, entry: dict[str, Any]) -> None:
    path = folder / name
    kind = entry["kind"]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "link_in":
        (folder / "target.json").write_bytes(REAL_JSON)
        path.symlink_to("target.json")
    elif kind == "link_out":
        path.symlink_to(outside)
    elif kind == "dangling":
        path.symlink_to(folder / "nowhere.json")
    elif kind == "random":
        path.write_bytes(entry["noise"])
    else:
        path.write_bytes(_CONTENTS[entry["content"]](entry["n"]))


def _mutate(path: Path, how: str) -> None:
    try:
        if how == "truncate":
            os.truncate(path, path.stat().st_size // 2)
        elif how == "append":
            with path.open("ab") as f:
                f.write(b', {"name": "late"}')
        elif how == "replace":
            tmp = path.with_name(".replacing")
            tmp.write_bytes(REAL_GZ if path.name.endswith(".gz") else REAL_JSON[:100])
            os.replace(tmp, path)
        elif how == "delete":
            path.unlink()
        elif how == "chmod":
            os.chmod(path, 0)
    except OSError:
        pass  # a FIFO, a directory, a link out of the folder: nothing to do to it


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@pytest.mark.slow
@given(entries=st.lists(_ENTRY, min_size=1, max_size=6))
def test_any_folder_content_gives_clean_counted_windows(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, entries: list[dict[str, Any]]
) -> None:
    root = tmp_path_factory.mktemp("fuzz")
    folder, outside = root / "traces", root / "outside.json"
    folder.mkdir()
    outside.write_bytes(REAL_JSON)
    planned: dict[str, str] = {}
    for entry in entries:
        name = _name(entry)
        if name is None or name in planned or name in ("target.json", "nowhere.json", ".replacing"):
            continue
        _make(folder, outside, name, entry)
        planned[name] = entry["mutation"]

    real_open = files.open_confined
    pending = dict(planned)

    @contextmanager
    def open_then_mutate(path: Path, folder: Path | None = None) -> Iterator[ConfinedFile]:
        with real_open(path, folder) as opened:
            how = pending.pop(path.name, "none")  # once per file, inside the check
            if how != "none":
                _mutate(path, how)
            yield opened

    monkeypatch.setattr(files, "open_confined", open_then_mutate)
    src = DirSource(folder, json_settle_s=3600.0, give_up_s=0.0)  # checks decide; nothing is waited for
    cfg = Config(
        source=(f"dir:{folder}",),
        address="127.0.0.1",
        port=0,
        period=10.0,
        window=0.01,
        jitter=0.0,
        collect_timeout=2.0,
    )
    svc = Service(cfg, sources=[src])
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("warpwatch")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        t0 = time.monotonic()
        svc.run_round()
        svc.run_round()  # what changed or was refused in the first one comes round again
        assert time.monotonic() - t0 < 60  # generous: bounded, not fast
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        monkeypatch.undo()

    def count(m: md.MetricDef, **labels: str) -> float:
        return sample(parse(svc.render("text/plain")[0].decode()), md.exposed_name(m), **labels) or 0.0

    assert count(md.ERRORS, stage="capture", reason="raised") == 0, "an exception left capture()"
    assert count(md.ERRORS, stage="analysis", reason="unexpected") == 0, "an exception left the reader"
    windows = [r for r in records if r.msg == "window"]
    for r in records:  # every line can be written, as one line, in both formats
        for fmt in (TextFormatter(), JsonFormatter()):
            line = fmt.format(r)
            line.encode("utf-8")
            assert "\n" not in line
    fields = [r.warpwatch_fields for r in windows]  # type: ignore[attr-defined]
    handed = {f["file"] for f in fields}
    assert all(f["file"] is not None for f in fields)
    assert all(f.get("error") for f in fields if f["outcome"] == "failed")
    counted = sum(count(md.WINDOWS, outcome=o) for o in ("ok", "empty", "failed", "timed_out"))
    assert counted == len(windows)  # each window counted once, and logged (failures are distinct files)
    for name in planned:
        if not is_trace_name(name):
            assert name not in handed, name
        elif os.path.lexists(folder / name):  # still there: it was handed over, whatever it is
            assert name in handed, (name, planned[name], fields)
