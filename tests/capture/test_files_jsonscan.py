"""The streaming completeness check of plain .json files (`capture.jsonscan`, `files.is_complete_json`).

The oracle for `JsonScan` is the JSON texts themselves: hypothesis builds any JSON object (keys
and strings full of quotes, backslashes, brackets and non-ASCII), `json.dumps` writes it, and
the scan must call the whole text (plus blanks) complete and every shorter prefix not, however
the text is cut into chunks."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warpwatch.capture import files
from warpwatch.capture.jsonscan import MAX_WALKED, JsonScan

DEEP = 100_000


def scan(text: bytes, cuts: list[int] | None = None) -> bool:
    s = JsonScan()
    start = 0
    for cut in sorted(set(cuts or [])):
        s.feed(text[start:cut])
        start = max(start, cut)
    s.feed(text[start:])
    return s.complete()


# --------------------------------------------------------------------------------------------- JsonScan

_TRICKY = st.text(alphabet=st.sampled_from('ab"\\{}[]/: \n\t\u00e9\u2603\U0001f600\x00\x1f'), max_size=12)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _TRICKY,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TRICKY, inner, max_size=4),
    max_leaves=12,
)
_OBJECTS = st.dictionaries(_TRICKY, _VALUES, max_size=5)


@settings(max_examples=150, deadline=None)
@given(
    obj=_OBJECTS,
    ascii_only=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
    lead=st.sampled_from(["", " ", "\n\t "]),
    trail=st.sampled_from(["", "\n", " \r\n "]),
    data=st.data(),
)
@pytest.mark.slow
def test_a_json_object_is_complete_exactly_when_whole_however_it_is_cut(
    obj: dict[str, Any], ascii_only: bool, indent: int | None, lead: str, trail: str, data: st.DataObject
) -> None:
    text = (lead + json.dumps(obj, ensure_ascii=ascii_only, indent=indent)).encode()
    cuts = data.draw(st.lists(st.integers(0, len(text) + len(trail)), max_size=6))
    assert scan(text + trail.encode(), cuts), text
    # every prefix that stops before the closing brace is a writer's unfinished file
    for end in range(len(text)):
        prefix = text[:end]
        assert not scan(prefix, [c for c in cuts if c < end]), prefix


def test_kinetos_invalid_json_counts_by_its_structure() -> None:
    """Bare inf/nan and raw control characters (what some Kineto versions wrote) are not JSON, but
    the text is whole: the reader takes it, so there is nothing to wait for."""
    text = b'{"traceEvents": [{"name": "a\tb", "dur": inf, "args": {"x": nan}}]}'
    assert scan(text)
    assert not scan(text[:-1])
    assert not scan(text[:-2] + b"}")  # `}` closing the event, not the object: the cut-chunk case


def test_escapes_split_across_chunks() -> None:
    text = b'{"k": "a\\\\\\"}[\\\\", "x": ["\\"]"]}'  # escaped backslashes and quotes beside brackets
    json.loads(text)
    assert all(scan(text, [cut]) for cut in range(len(text) + 1))
    assert all(not scan(text[:end], [cut]) for end in range(len(text)) for cut in range(end + 1))


@pytest.mark.parametrize("text", [b"", b"   ", b"[1, 2]", b'"{}"', b"{}}", b"{} x", b'{"a": "}', b"{\\", b"}{"])
def test_texts_that_are_not_one_whole_object(text: bytes) -> None:
    assert not scan(text)


def test_deep_nesting_is_counted_not_recursed_and_hostile_text_is_bounded() -> None:
    deep = b'{"a": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    assert scan(deep) and not scan(deep[:-1])
    noisy = JsonScan()  # quotes and brackets that cancel nowhere: walked byte by byte, up to a bound
    t0 = time.perf_counter()
    for _ in range(4 * MAX_WALKED // 65536):
        noisy.feed(b'{"[' * (65536 // 3))
    assert noisy.gave_up and not noisy.complete()
    assert time.perf_counter() - t0 < 60  # a hang guard only: `gave_up` above is the bound


# --------------------------------------------------------------------------------------------- is_complete_json


def mutating(target: Path, how: str) -> type[JsonScan]:
    """A `JsonScan` that changes `target` under the check, once the first chunk has been read."""

    class Mutating(JsonScan):
        fed = 0

        def feed(self, chunk: bytes) -> None:
            Mutating.fed += 1
            if Mutating.fed == 1:
                if how == "truncate":
                    os.truncate(target, target.stat().st_size // 3)
                elif how == "append":
                    with target.open("ab") as f:
                        f.write(b" ")
                else:  # replaced: a new file renamed over the name; the open one reads on
                    tmp = target.with_suffix(".tmp")
                    tmp.write_bytes(b'{"traceEvents": []}')
                    os.replace(tmp, target)
            super().feed(chunk)

    return Mutating


@pytest.mark.parametrize("how", ["truncate", "append", "replace"])
def test_a_file_that_changes_while_it_is_checked_is_not_complete_yet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    target = tmp_path / "t.json"
    target.write_bytes(b'{"traceEvents": [' + b", ".join([b'{"name": "k"}'] * 1000) + b"]}")
    assert files.is_complete_json(target)
    monkeypatch.setattr(files, "CHUNK", 4096)
    monkeypatch.setattr(files, "JsonScan", mutating(target, how))
    os.utime(target, ns=(1, 1))  # the mutation is seen by its mtime too, however coarse the clock
    verdict = files.is_complete_json(target)
    # a replaced file is read whole, unchanged, from the inode that was opened: complete, and the
    # dir: source sees the new file by its identity (test_dirsource)
    assert verdict is (how == "replace")


def test_a_fifo_given_by_path_never_blocks_the_checks(tmp_path: Path) -> None:
    """Sources open files through `confine` (which refuses FIFOs); a caller passing a FIFO's path
    straight to a check still gets False at once instead of a reader blocked on the open."""
    results: list[bool] = []
    for name in ("p.json", "p.json.gz"):
        fifo = tmp_path / name
        os.mkfifo(fifo)
        for check in (files.is_complete_json, files.is_complete_gzip, files.is_complete_trace_file):
            t = threading.Thread(target=lambda c=check, f=fifo: results.append(c(f)), daemon=True)
            t.start()
            t.join(10)  # generous
            assert not t.is_alive(), f"{check.__name__} blocked on a FIFO"
    assert results == [False] * 6


def test_a_sparse_file_is_given_up_at_its_first_zeros(tmp_path: Path) -> None:
    """A file preallocated (or extended) with zeros between braces is not finished, and is not
    read to its end to find that out."""
    sparse = tmp_path / "sparse.json"
    with sparse.open("wb") as f:
        f.write(b'{"traceEvents": [')
        f.truncate(1 << 30)
        f.seek((1 << 30) - 2)
        f.write(b"]}")
    assert not files.is_complete_json(sparse)
    s = JsonScan()
    s.feed(b'{"traceEvents": [\0\0\0')
    assert s.gave_up
    s.feed(b"]}")
    assert not s.complete()
