"""The compiled scanner (`warpwatch/trace/_gpuscan.c`) against the Python reader it stands in for.

Its contract: for any piece it answers None ("read this piece in Python") or exactly what the
Python reader makes of it. The reference here is the strict one -- the whole piece decoded by
msgspec and scanned (`schema.scan`) -- and results are compared by `repr`, so that 1 and 1.0, or
0.0 and -0.0, differ. Pieces are real Kineto events (HTA's df_index_resolver trace), one kernel
event of which is mutated: by hand for each rule of the scanner, then byte by byte at random.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from support.paths import SHARED_TRACES, corpus_bytes
from support.trace_oracle import check_piece as check
from support.trace_oracle import compiled, fields, python_skim
from support.trace_oracle import strict_piece as strict
from warpwatch.model import KernelLaunch
from warpwatch.runtime.membudget import ReadLimits
from warpwatch.trace import parse_trace, skim
from warpwatch.trace.schema import Interned

native: Any = pytest.importorskip("warpwatch.trace._gpuscan", reason="never skipped in CI: see the first test")

REAL = gzip.decompress(
    corpus_bytes("facebookresearch__HolisticTraceAnalysis/tests/data/df_index_resolver/df_index_resolver.json.gz")
)
EVENTS = [b"{" + e + b"\n  }" for e in REAL.split(b"\n  },\n  {")[1:-1]]
"""The trace's events as Kineto wrote them (an event over several lines, `  },` then `  {`)."""
KERNEL = next(e for e in EVENTS if b'"cat": "kernel"' in e)
MEMCPY = next(e for e in EVENTS if b'"cat": "gpu_memcpy"' in e)
SPAN = next(e for e in EVENTS if b'"cat": "Trace"' in e)
CPU = [e for e in EVENTS if b'"cat": "cpu_op"' in e][:6]


def piece(event: bytes) -> bytes:
    """Real events around `event`, as Kineto lays them out (one per line)."""
    return b",\n  ".join([SPAN, *CPU[:3], KERNEL, MEMCPY, event, *CPU[3:], KERNEL])


def test_the_compiled_scanner_is_built_and_used() -> None:
    """CI and the image build it (setup.py; a C compiler is needed): without it the reader falls
    back to Python, 2.5x slower (benchmarks/README.md), which this test refuses to pass silently."""
    assert skim.NATIVE, "warpwatch.trace._gpuscan was not built, or WARPWATCH_PURE_PYTHON is set"


def test_a_real_piece_is_read_exactly_as_python_reads_it() -> None:
    assert check(piece(KERNEL))
    interned = Interned()
    launches = native.scan(piece(KERNEL), len(piece(KERNEL)), KernelLaunch, interned.names, interned.dims)[0]
    assert len(launches) == 3 and launches[0] is not launches[1] and launches[0].name is launches[1].name
    assert launches[0].grid is launches[1].grid  # interned, as the Python reader does


def test_a_piece_opening_with_its_bracket_as_the_parallel_reader_gives_it() -> None:
    text = b"[" + piece(KERNEL) + b"]"
    interned = Interned()
    got = native.scan(text, len(text) - 1, KernelLaunch, interned.names, interned.dims)
    assert got is not None and fields(*got) == strict(piece(KERNEL))


def _kernel(**replace: str) -> bytes:
    """The real kernel event with some values replaced (raw JSON text, keys as Kineto writes them)."""
    doc = msgspec.json.decode(KERNEL)
    text = KERNEL.decode()
    for key, raw in replace.items():
        key = key.replace("_", " ")
        holder = doc["args"] if key in doc["args"] else doc
        old = json.dumps(holder[key])
        needle = f'"{key}": {old}'
        assert needle in text, needle
        text = text.replace(needle, f'"{key}": {raw}', 1)
    return text.encode()


ANSWERED = [  # the compiled scanner reads these itself, exactly as Python does
    _kernel(dur="0"),
    _kernel(dur="2.5", ts="1669783687389324.25"),
    _kernel(ts="-5"),
    _kernel(name='"k\u00e9rnel \u4e2d"'),
    _kernel(name="null"),
    _kernel(device="null"),
    _kernel(device="null", pid='"a string"'),
    _kernel(device="null", pid="3.0"),
    _kernel(device="null", pid="true"),
    _kernel(stream='"s7"'),
    _kernel(stream="null"),
    _kernel(grid="null", block="null"),
    _kernel(grid="[0, 0, 0]"),
    _kernel(grid="[2147483648, 65535, 65535]"),
    _kernel(registers_per_thread="null", shared_memory="null"),
    _kernel(correlation="null"),
    _kernel(warps_per_SM='"inf"', blocks_per_SM='"-inf"'),
    _kernel(warps_per_SM='"' + "x" * 50 + '"'),
    _kernel(warps_per_SM="-0.0"),
    _kernel(warps_per_SM="0.1", blocks_per_SM="1e-5"),
    _kernel(warps_per_SM="123456789012345678"),
    _kernel(warps_per_SM="1.7976931348623157e308", blocks_per_SM="5e-324"),
    _kernel(warps_per_SM="9007199254740993.0", blocks_per_SM="0.30000000000000004"),
    _kernel(warps_per_SM="1E22", blocks_per_SM="1.5e-22"),
    _kernel(warps_per_SM="-1234.5678e-3"),
    _kernel(queued='{"a": [1, "x\\"y", [], null], "b": {"c": {}}, "c": true, "d": false}'),
    _kernel(context='[[], -0.5e+3, "\\u00e9"]'),
    KERNEL.replace(b'"cat": "kernel"', b'"cat":"kernel"'),
    KERNEL.replace(b'"cat": "kernel"', b'"cat":\t"Kernel"'),
    KERNEL.replace(b'"cat": "kernel"', b'"cat" :\n  "kernel"'),  # any JSON whitespace (both readers)
    KERNEL.replace(b'"ph": "X"', b'"ph": "i"'),  # another phase: validated, skipped
    KERNEL.replace(b'"ph": "X", ', b"").replace(b'"pid"', b'"ph": "X", "pid"'),  # ph after cat
    KERNEL.replace(b'"args": {', b'"args": null, "other": {'),
    KERNEL.replace(b'{"ph"', b'{ \n "ph"').replace(b"}}", b"} \n }"),
    re.sub(rb'"dur": \d+', b'"dur": 0', SPAN),
    MEMCPY.replace(b'"cat": "gpu_memcpy"', b'"cat": "Memset"'),
    _kernel(queued='"\\ud83d\\ude00 \\u00e9"'),  # a surrogate pair, escaped (msgspec reads it)
]

REFUSED = [  # each sends the piece to Python (which gives the result or the error)
    _kernel(dur="-1"),
    _kernel(dur="null"),
    _kernel(ts='"5"'),
    _kernel(ts="1e999"),
    _kernel(ts="inf"),
    _kernel(ts="NaN"),
    _kernel(ts="01"),
    _kernel(ts="-0"),
    _kernel(ts="12345678901234567890"),
    _kernel(name='"a\\"b"'),
    _kernel(name="7"),
    _kernel(device='"0"'),
    _kernel(device="true"),
    _kernel(device="1.0"),
    _kernel(stream="1.5"),
    _kernel(grid="[1, 2]"),
    _kernel(grid="[1, -2, 3]"),
    _kernel(grid="[1.0, 2, 3]"),
    _kernel(grid="[1, 2, 3, 4]"),
    _kernel(registers_per_thread="-1"),
    _kernel(shared_memory="1.5"),
    _kernel(warps_per_SM="true"),
    _kernel(warps_per_SM="[1]"),
    _kernel(queued="[1, 2"),
    _kernel(queued="tru"),
    _kernel(queued='"\\x"'),
    _kernel(queued='"a\tb"'),
    _kernel(queued="[" * 70 + "]" * 70),
    KERNEL.replace(b'"dur": ', b'"dur": 1, "dur": '),
    KERNEL.replace(b'"device": ', b'"device": 1, "device": '),
    KERNEL.replace(b'"ph": "X"', b'"ph": "Q"'),
    KERNEL.replace(b'"ph": "X", ', b""),
    KERNEL.replace(b'"ph": "X"', b'"ph": 1'),
    KERNEL.replace(b'"args": {', b'"args": ['),
    KERNEL.replace(b'"name"', b'"n\\u0061me"'),
    KERNEL.replace(b'"cat": "kernel"', b'"cat": "k\\u0065rnel"'),
    KERNEL.replace(b'"est. achieved occupancy %": 2', b'"est. achieved occupancy %": 2,'),
    b'{"x": ' + KERNEL + b"}",  # an event inside another one's value
    KERNEL.replace(b'"ph": "X", "cat": "kernel", ', b"")[:-4] + b', "ph": "X", "cat": "kernel"\n  }',
    KERNEL.replace(b"at::native", b"at::\xff\xfenative"),  # a name that is not UTF-8
    KERNEL.replace(b'"cat": "kernel"', b'"cat": "kernel", "hip": 1'),  # maybe AMD: Python reads hip calls
    re.sub(rb'"dur": \d+', b'"dur": -1', SPAN),
    # issue 20: most of these were answered on 4ac2651, differently from Python (or a SystemError)
    KERNEL.replace(b'"args": {', b'"args": true, "other": {'),  # args must be an object (or null)
    KERNEL.replace(b'"args": {', b'"args": [], "other": {'),
    KERNEL.replace(b'"args": {', b'"args": "x", "other": {'),
    _kernel(stream='"s7"').replace(b"at::native", b"at::\xffnative", 1).replace(b'"s7"', b'"s\xff"'),  # two not UTF-8
    _kernel(warps_per_SM='"w"', blocks_per_SM='"b"').replace(b'"w"', b'"\xfe"').replace(b'"b"', b'"\xff"'),
    KERNEL.replace(b'"cat": "kernel"', b'"cat"\v: "kernel"'),  # \v, \f: whitespace to skim's regex, not to JSON
    KERNEL.replace(b'"cat": "kernel"', b'"cat":\f"kernel"'),
    KERNEL.replace(b'"cat": "kernel"', b'"cat"cat": "kernel"'),  # the key starts at the last quote of another
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "args": {"x": [{}, ' + KERNEL + b", {}]}}",
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "args": {"x": [1, ' + KERNEL + b"]}}",
    b'{"ph": "X", "cat": "cpu_op", "args": {"cat": "kernel", "ph": "X", "ts": 1, "dur": 1}}',
    # an object in an array (here in the kernel's own args): maybe a GPU event nested in another's
    _kernel(queued='{"a": [1, {"b": null}, "x\\"y"], "c": true, "d": false}'),
    _kernel(context='[[], {}, -0.5e+3, "\\u00e9"]'),
    _kernel(context="[{}]"),
    # strings msgspec decodes (and the scanner never converted) that are not UTF-8 (found by the fuzzer)
    MEMCPY.replace(b"Memcpy DtoD", b"Memcpy \xcaDtoD"),
    _kernel(device="null", pid='"p"').replace(b'"pid": "p"', b'"pid": "\xff"'),
    SPAN.replace(b'"name": "PyTorch Profiler', b'"name": "\xe2\x82PyTorch Profiler'),
    _kernel(queued='"\\ud800"'),  # lone surrogates: msgspec's errors
    _kernel(queued='"\\udc00"'),
    _kernel(queued='"\\ud800\\u0041"'),
]


@pytest.mark.parametrize("event", ANSWERED, ids=range(len(ANSWERED)))
def test_what_the_compiled_scanner_reads_is_what_python_reads(event: bytes) -> None:
    assert check(piece(event)), "the compiled scanner sent a piece it can read to Python"


@pytest.mark.parametrize("event", REFUSED, ids=range(len(REFUSED)))
def test_what_the_compiled_scanner_is_not_sure_of_goes_to_python(event: bytes) -> None:
    assert compiled(piece(event)) is None


NESTED = [  # a kernel event that is no event of the piece: in an array of another's args, or a value
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "args": {"x": [{}, ' + KERNEL + b", {}]}}",
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "args": {"x": [1, ' + KERNEL + b"]}}",
    b'{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1, "args": {"x": ' + KERNEL + b"}}",
    b'{"x": ' + KERNEL + b"}",
]


@pytest.mark.parametrize("event", NESTED, ids=range(len(NESTED)))
def test_a_kernel_nested_in_another_event_is_no_launch_for_either_skimming_reader(event: bytes) -> None:
    """The strict reading has two launches of the three kernel events (the nested one is part of
    another event's value): neither skimming reader may count it; both send the piece to it."""
    expected = strict(piece(event))
    assert expected is not None and expected.count("KernelLaunch(") == 2
    assert compiled(piece(event)) is None
    assert python_skim(piece(event)) is None


@pytest.mark.slow
def test_random_byte_edits_of_a_kernel_event_never_give_another_answer() -> None:
    """20,000 single-byte edits (replace, insert, delete) anywhere in one kernel event, with JSON's
    own characters more likely than others: answered exactly as Python, or refused."""
    rng = random.Random(14)
    alphabet = b'{}[]",:0123456789.-+eE \\/ntfalsru\x00\x1f\xff'
    answered = 0
    for _ in range(20_000):
        ev = bytearray(KERNEL)
        at = rng.randrange(len(ev))
        op = rng.randrange(3)
        byte = alphabet[rng.randrange(len(alphabet))] if rng.random() < 0.9 else rng.randrange(256)
        if op == 0:
            ev[at] = byte
        elif op == 1:
            ev.insert(at, byte)
        else:
            del ev[at]
        answered += check(piece(bytes(ev)))
    assert answered > 5_000  # most edits land in a name or a value the scanner reads


def _pieces_answered(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    calls = {"answered": 0, "all": 0}
    real = native.scan

    def counting(*args: Any) -> Any:
        got = real(*args)
        calls["all"] += 1
        calls["answered"] += got is not None
        return got

    monkeypatch.setattr(native, "scan", counting)  # the compiled module, as the reader calls it
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    native_trace = parse_trace(data, "doc.json", limits=ReadLimits(piece_bytes=16_000, workers=1))
    monkeypatch.setattr(skim, "NATIVE", False)
    python_trace = parse_trace(data, "doc.json", limits=ReadLimits(piece_bytes=16_000, workers=1))
    assert repr(native_trace) == repr(python_trace)
    return calls["answered"], calls["all"]


@pytest.mark.slow
def test_every_shared_trace_reads_the_same_with_and_without_the_compiled_scanner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answered = total = 0
    for path in sorted(SHARED_TRACES.rglob("*.json*")):
        if not path.is_file() or not path.name.endswith((".json", ".json.gz")):
            continue
        with monkeypatch.context() as m:
            try:
                a, n = _pieces_answered(path, m)
            except Exception as exc:  # a shared trace that is an error is an error either way
                from warpwatch.errors import TraceError

                assert isinstance(exc, TraceError), exc
                continue
        answered += a
        total += n
    assert total > 1_000 and answered > 0.9 * total, (answered, total)
