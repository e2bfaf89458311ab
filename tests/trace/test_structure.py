"""`structure.balanced`, the proof of a cut in a one-line trace: the compiled check and the Python one
give the same answer on any bytes, and the right one where the truth is known (the events of a real
trace, cut by the standard library's json between two of them, or inside one)."""

from __future__ import annotations

import gzip
import json
import random
from typing import Any

import pytest

from support.paths import HTA
from warpwatch.runtime import native
from warpwatch.trace import skim, structure

SOURCE = HTA / "timeline_analysis" / "sampled_rank-0.json.gz"
"""A real trace written on one line (json.dump's layout; HTA's tests/data)."""

needs_native = pytest.mark.skipif(not skim.NATIVE, reason="the compiled scanner is not built here")
gpuscan: Any = native.load("warpwatch.trace._gpuscan")
"""The compiled scanner as the reader loads it, or None (not built, or WARPWATCH_PURE_PYTHON=1)."""


def _events() -> list[dict]:
    with gzip.open(SOURCE, "rt") as fh:
        events: list[dict] = json.load(fh)["traceEvents"]
    return events[:3000]


@pytest.fixture(scope="module")
def events() -> list[dict]:
    return _events()


def _both(text: bytes, lo: int, hi: int) -> bool:
    python = structure.balanced_python(text, lo, hi)
    if gpuscan is not None:
        assert gpuscan.balanced(text, lo, hi) == python, text[lo:hi][:400]
    return python


def test_runs_of_whole_events_are_balanced_and_cuts_inside_one_are_not(events: list[dict]) -> None:
    """Truth from json: the text of events i..j-1 (json.dumps of each, joined by `, `) is whole;
    the same text started or ended at any other `}, {` inside an event, or inside a string, is not."""
    rng = random.Random(7)
    texts = [json.dumps(e).encode() for e in events]
    wrong = 0
    for _ in range(300):
        i = rng.randrange(len(texts) - 1)
        j = rng.randrange(i + 1, min(len(texts), i + 60) + 1)
        run = b", ".join(texts[i:j])
        assert _both(run, 0, len(run))
        # one byte more or less at either end: inside an event (or in a string) -- never whole
        for lo, hi in ((0, len(run) - 1), (1, len(run)), (0, len(run) - len(texts[j - 1]) // 2)):
            assert not _both(run, lo, hi)
            wrong += 1
    assert wrong == 900


def test_a_cut_inside_a_string_or_an_array_of_objects_is_found_out() -> None:
    """The cuts a reader could take for a boundary (`}, {`) that are not one."""
    in_name = json.dumps([{"name": "f<{lambda()#1}, {lambda()#2}>", "cat": "kernel"}, {"a": 1}]).encode()[1:-1]
    cut = in_name.index(b"}, {") + 1  # inside the name
    assert _both(in_name, 0, len(in_name))
    assert not _both(in_name, 0, cut)
    assert not _both(in_name, cut + 2, len(in_name))
    nested = json.dumps([{"args": {"list": [{"x": 1}, {"y": 2}]}}, {"b": 2}]).encode()[1:-1]
    cut = nested.index(b"}, {") + 1  # between two objects of the array in args
    assert not _both(nested, 0, cut)
    assert not _both(nested, cut + 2, len(nested))
    escaped = json.dumps([{"name": 'say "}, {" \\'}, {"c": 3}]).encode()[1:-1]
    assert b'\\"}, {\\"' in escaped and _both(escaped, 0, len(escaped))
    assert not _both(escaped, 0, escaped.index(b"}, {") + 1)


@needs_native
def test_both_checks_agree_on_random_bytes_and_random_ranges_of_real_text(events: list[dict]) -> None:
    rng = random.Random(11)
    alphabet = b'"\\{}[], :a0\n'
    for _ in range(30_000):  # short: the byte-at-a-time tail of the compiled check
        text = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 80)))
        lo = rng.randrange(len(text) + 1)
        _both(text, lo, rng.randrange(lo, len(text) + 1))
    for _ in range(3_000):  # long: its 64-byte blocks, escapes and strings across their edges
        text = bytes(rng.choice(alphabet) for _ in range(rng.randrange(64, 700)))
        lo = rng.randrange(len(text) + 1)
        _both(text, lo, rng.randrange(lo, len(text) + 1))
    real = b", ".join(json.dumps(e).encode() for e in events)
    answers = set()
    for _ in range(2_000):
        lo = rng.randrange(len(real))
        hi = rng.randrange(lo, min(len(real), lo + 20_000) + 1)
        answers.add(_both(real, lo, hi))
    assert answers == {True, False}


@needs_native
def test_escapes_runs_of_backslashes_at_every_offset_of_a_block() -> None:
    """A backslash run that ends one 64-byte block escapes (or not) the first byte of the next."""
    for run in range(1, 6):
        for at in range(40, 70):
            text = b'"' + b"a" * at + b"\\" * run + b'"' + b"{" + b'"'
            _both(text, 0, len(text))
            _both(b"[" + text + b"]", 0, len(text) + 2)
