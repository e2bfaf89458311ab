"""`warpwatch fix` run on its own output: the profiler's values survive, the output is the same.

`reported <arg>` holds what the profiler wrote; a second `fix` must read it back from there, for
every kernel, and write the same document again. Checked on a small trace whose kernels have
wrong profiler values, and on every shared trace (SOURCES.md) in both layouts (one event per line,
the whole document on one line; support/layouts.py), each read as gzip and as a plain file.
"""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from support.layouts import other_layout
from support.paths import SHARED_TRACES
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.commands.fix import REPORTED_PREFIX, fix_trace
from warpwatch.trace import KERNEL_CATEGORIES

FIXED_ARGS = ("warps per SM", "blocks per SM", "est. achieved occupancy %")
SMALL = 25_000
"""Bytes on disk of the traces fixed in the fast loop (the A100 alexnet trace the largest of them)."""
DLRM = SHARED_TRACES / "facebookresearch__param/et_replay/tests/inputs/dlrm_kineto.tar.gz"


def text_of(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def kernel_args(text: bytes) -> list[dict[str, Any]]:
    doc = json.loads(text)
    events = doc if isinstance(doc, list) else doc.get("traceEvents", [])
    return [
        e["args"]
        for e in events
        if isinstance(e, dict)
        and e.get("ph") == "X"
        and e.get("cat") in KERNEL_CATEGORIES
        and isinstance(e.get("args"), dict)
    ]


def originals(text: bytes) -> list[dict[str, Any]]:
    """Per kernel, the profiler's values as a fixed copy keeps them (`reported <arg>`)."""
    return [{k: a[REPORTED_PREFIX + k] for k in FIXED_ARGS if REPORTED_PREFIX + k in a} for a in kernel_args(text)]


def fix_thrice(src: Path, tmp: Path, gz_first: bool) -> list[bytes]:
    """The decompressed outputs of `fix` run on `src`, then on each output; compression alternates."""
    outs, current, gz = [], src, gz_first
    for n in range(3):
        out = tmp / f"{src.name}.fixed{n}.json{'.gz' if gz else ''}"
        fix_trace(str(current), str(out))
        outs.append(text_of(out))
        current, gz = out, not gz
    return outs


def small_doc() -> dict[str, Any]:
    """Kernels whose profiler values are all wrong, one without any."""
    return trace_doc(
        [
            span(0, 1000),
            kernel("huge_grid_kernel", grid=(65536, 32768, 1), block=(128, 1, 1)),
            kernel("odd_block", ts=200, grid=(100, 1, 1), block=(48, 1, 1), occupancy=-100),
            kernel("no_values", ts=300, grid=(7, 1, 1), block=(96, 1, 1), sms=None),
            kernel("plain", ts=400, grid=(1000, 1, 1), block=(256, 1, 1), occupancy=25),
        ]
    )


def test_every_kernel_keeps_the_profiler_values_after_fix_on_fix(tmp_path: Path) -> None:
    src = write(tmp_path / "in.json", small_doc())
    once, twice, thrice = fix_thrice(src, tmp_path, gz_first=False)
    expected = [{k: a.get(k) for k in FIXED_ARGS} for a in kernel_args(src.read_bytes())]
    assert originals(once) == expected
    assert originals(twice) == originals(once)
    assert twice == once and thrice == once


def profiler_values_of(src: Path, fixed: bytes) -> list[dict[str, Any]]:
    """Per kernel of `src`, the profiler's value of each arg the fixed copy `fixed` replaced (None: absent)."""
    replaced = [[k for k in FIXED_ARGS if REPORTED_PREFIX + k in a] for a in kernel_args(fixed)]
    return [{k: a.get(k) for k in keys} for a, keys in zip(kernel_args(text_of(src)), replaced, strict=True)]


def _shared() -> list[Any]:
    paths = sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))
    return [pytest.param(p, id=p.name, marks=[pytest.mark.slow] if p.stat().st_size > SMALL else []) for p in paths] + [
        pytest.param(DLRM, id="dlrm_kineto.tar.gz (8 ranks)", marks=[pytest.mark.slow])
    ]


def _sources(path: Path, tmp: Path) -> list[Path]:
    """The shared file itself (the tar's members, written as they are) and its twin in the other layout,
    compressed when the file is not and plain when it is."""
    if path == DLRM:
        with tarfile.open(path) as tf:
            members = [
                (Path(m.name).name, tf.extractfile(m).read())
                for m in tf.getmembers()  # type: ignore[union-attr]
                if m.name.endswith(".json")
            ]
        files = [tmp / name for name, _ in members]
        for file, (_, text) in zip(files, members, strict=True):
            file.write_bytes(text)
    else:
        files = [path]
    twins = []
    for file in files:
        gz = not file.name.endswith(".gz")
        twin = tmp / f"twin.{file.name.removesuffix('.gz')}{'.gz' if gz else ''}"
        twin_text = other_layout(text_of(file))
        twin.write_bytes(gzip.compress(twin_text) if gz else twin_text)
        twins.append(twin)
    return files + twins


@pytest.mark.parametrize("path", _shared())
def test_fix_on_fix_of_a_shared_trace_changes_nothing(tmp_path: Path, path: Path) -> None:
    for src in _sources(path, tmp_path):
        once, twice, thrice = fix_thrice(src, tmp_path, gz_first=not src.name.endswith(".gz"))
        assert originals(twice) == originals(once), src.name
        assert twice == once and thrice == once, src.name
        assert originals(once) == profiler_values_of(src, once), src.name
