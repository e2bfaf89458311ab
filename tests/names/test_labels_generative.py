"""Kernel names are any string: generated names always get a valid, stable `kernel` label.

The properties hold for every name (warpwatch.names.labels module doc): the label is a pure function of
the name; it is a valid Prometheus label value (UTF-8 text, no control characters) of 1 to
`MAX_LABEL_LENGTH` characters and never a reserved value; a label that ends in a hash ends in the
name's own hash; nothing raises. Labels are computed in a child process with a memory limit, each
within a time limit (`LabelWorker`): a regression fails the test instead of hanging the suite. Each
test runs a bounded number of examples (a few seconds).
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections.abc import Iterator
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.labels_worker import LabelWorker
from warpwatch.names.demangle import MAX_MANGLED
from warpwatch.names.labels import MAX_LABEL_LENGTH, MAX_PARSED, RESERVED, name_hash

HASHED = re.compile(r"~[0-9a-f]{8}$")
BOUNDED = settings(
    max_examples=300,
    deadline=timedelta(seconds=5),  # generous: examples take ms
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)


@pytest.fixture(scope="module")
def worker() -> Iterator[LabelWorker]:
    child = LabelWorker(memory=1 << 30, timeout=20)
    yield child
    child.close()


def assert_valid_label(worker: LabelWorker, raw: str) -> str:
    label = worker.label(raw)
    assert 0 < len(label) <= MAX_LABEL_LENGTH, label
    assert label.encode("utf-8").decode("utf-8") == label  # UTF-8 (no lone surrogates)
    assert not any(unicodedata.category(c) in ("Cc", "Cs") for c in label), ascii(label)
    assert label not in RESERVED
    assert label == label.strip()
    if HASHED.search(label) and not label.endswith("~" + name_hash(raw)):
        # a hash it ends in is the name's own, unless the name itself ends that way
        assert raw.endswith(label[-9:]), (ascii(raw[:200]), label)
    assert worker.label(raw) == label  # a pure function: the same name, the same label
    return label


ANY_CHARACTER = st.characters(exclude_categories=())  # surrogates and unassigned code points too


@BOUNDED
@given(st.text(ANY_CHARACTER, max_size=400))
def test_any_text(worker: LabelWorker, raw: str) -> None:
    assert_valid_label(worker, raw)


CXX_TOKENS = [
    "void ",
    "at::",
    "native::",
    "(anonymous namespace)::",
    "kernel",
    "k",
    "<",
    ">",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ", ",
    " ",
    "*",
    "&",
    "&&",
    " const",
    "{lambda(",
    "{lambda()#1}",
    "#1}",
    "::",
    "operator()",
    "float",
    "int",
    "4",
    "-1",
    "true",
    "é",
    "日本",
    "🔥",
    "\u0301",
    "\u200f",
    "\x00",
    "\n",
    "_",
    "$",
    "…",
    "~",
    "std::enable_if<!(false), void>::type ",
    "other",
    "unnamed",
]
MANGLED_TOKENS = [
    "N",
    "E",
    "I",
    "S_",
    "S0_",
    "S1_",
    "SA_",
    "T_",
    "T0_",
    "Li1E",
    "Lin1E",
    "Lb1E",
    "3foo",
    "1a",
    "2at",
    "6native",
    "PFv",
    "Ul",
    "Ut",
    "Z",
    "v",
    "i",
    "f",
    "c",
    "St",
    "Sa",
    "K",
    "V",
    "r",
    "R",
    "O",
    "P",
    "Dp",
    "J",
    "X",
    "DT",
    "C1",
    "D2",
    "cl",
    "12_GLOBAL__N_1",
    "5café",
    "6日本",
    "0",
    "9",
    "_",
    "B5cxx11",
]


@pytest.mark.slow
@BOUNDED
@given(st.lists(st.sampled_from(CXX_TOKENS), max_size=80).map("".join))
def test_cxx_like_text(worker: LabelWorker, raw: str) -> None:
    assert_valid_label(worker, raw)


@BOUNDED
@given(st.lists(st.sampled_from(MANGLED_TOKENS), max_size=120).map(lambda parts: "_Z" + "".join(parts)))
def test_mangled_like_names(worker: LabelWorker, raw: str) -> None:
    assert_valid_label(worker, raw)


@pytest.mark.slow
@BOUNDED
@given(st.text(st.sampled_from("NEISTZUlvifdcPRKVOCDLXBJp_0123456789abé"), max_size=200).map(lambda s: "_Z" + s))
def test_mangled_garbage(worker: LabelWorker, raw: str) -> None:
    assert_valid_label(worker, raw)


@pytest.mark.slow
@settings(max_examples=40, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([MAX_MANGLED, MAX_PARSED]), st.integers(-2, 2), st.sampled_from(["_ZN1a", "a<", "é", "1a"]))
def test_names_at_and_beyond_the_limits(worker: LabelWorker, limit: int, delta: int, unit: str) -> None:
    raw = (unit * (limit // len(unit) + 2))[: limit + delta]
    assert_valid_label(worker, raw)


def test_labels_do_not_depend_on_which_names_came_first(worker: LabelWorker) -> None:
    """A namer that has seen other names first gives each name the label `kernel_label` gives it."""
    rng = random.Random(20)
    names = ["".join(rng.choice(CXX_TOKENS) for _ in range(rng.randint(0, 30))) for _ in range(300)]
    names += ["_Z" + "".join(rng.choice(MANGLED_TOKENS) for _ in range(rng.randint(0, 40))) for _ in range(300)]
    expected = {raw: assert_valid_label(worker, raw) for raw in names}
    for seed in range(3):
        rng.shuffle(names)
        assert dict(zip(names, worker.namer(names), strict=True)) == expected, seed  # evictions on the way
