"""The evidence folder on a real filesystem: what is kept, in which form, within which bounds."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from warpwatch.evidence.store import META_SUFFIX, TRACE_SUFFIX, EvidenceError, EvidenceStore, is_id

T0 = 1_764_921_600.0  # 2025-12-05T08:00:00Z


def clock() -> float:
    return T0


def trace(tmp_path: Path, name: str, size: int) -> Path:
    """`size` bytes that gzip barely compresses (random), so the kept size is close to `size`."""
    path = tmp_path / name
    path.write_bytes(os.urandom(size))
    return path


def on_disk(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def test_a_plain_trace_is_kept_gzip_compressed_with_its_json_beside_it(tmp_path: Path) -> None:
    source = tmp_path / "w.pt.trace.json"
    source.write_bytes(b'{"traceEvents": []}' * 100)
    store = EvidenceStore(tmp_path / "ev", 1 << 20, 10, clock)
    store.open()
    kept = store.keep(source, {"reason": "baseline"})
    assert kept.id == "20251205T080000Z-000001" and is_id(kept.id)
    gz = tmp_path / "ev" / (kept.id + TRACE_SUFFIX)
    assert gzip.decompress(gz.read_bytes()) == source.read_bytes()
    meta = json.loads((tmp_path / "ev" / (kept.id + META_SUFFIX)).read_text())
    assert meta == {"reason": "baseline", "id": kept.id, "trace_bytes": gz.stat().st_size}
    assert kept.bytes == on_disk(tmp_path / "ev")
    assert store.read_trace(kept.id) == gz.read_bytes()


def test_a_trace_the_engine_compressed_is_kept_byte_for_byte(tmp_path: Path) -> None:
    source = tmp_path / "w.pt.trace.json.gz"
    source.write_bytes(gzip.compress(b'{"traceEvents": []}', mtime=12345))
    store = EvidenceStore(tmp_path / "ev", 1 << 20, 10, clock)
    kept = store.keep(source, {})
    assert store.read_trace(kept.id) == source.read_bytes()


def test_the_oldest_windows_go_first_at_the_file_bound(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path / "ev", 1 << 30, 3, clock)
    ids = [store.keep(trace(tmp_path, f"t{i}", 1000), {"n": i}).id for i in range(5)]
    assert [k.id for k in store.windows()] == ids[2:]
    assert sorted(p.name for p in (tmp_path / "ev").iterdir()) == sorted(
        kid + suffix for kid in ids[2:] for suffix in (TRACE_SUFFIX, META_SUFFIX)
    )


def test_the_byte_bound_holds_after_every_keep(tmp_path: Path) -> None:
    bound = 50_000
    store = EvidenceStore(tmp_path / "ev", bound, 1000, clock)
    for i in range(12):
        store.keep(trace(tmp_path, f"t{i}", 9_000 + 1_000 * (i % 4)), {})
        assert on_disk(tmp_path / "ev") <= bound
        assert store.total_bytes() == on_disk(tmp_path / "ev")
    assert len(store.windows()) >= 3


def test_a_trace_larger_than_the_bound_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path / "ev", 10_000, 10, clock)
    with pytest.raises(EvidenceError) as err:
        store.keep(trace(tmp_path, "big", 20_000), {})
    assert err.value.reason == "too_large"
    assert list((tmp_path / "ev").iterdir()) == []
    assert store.windows() == []


def test_a_compressed_trace_larger_than_the_bound_pushes_nothing_out(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path / "ev", 10_000, 10, clock)
    kept = store.keep(trace(tmp_path, "small", 1_000), {})
    big = tmp_path / "big.json.gz"
    big.write_bytes(gzip.compress(os.urandom(20_000)))
    with pytest.raises(EvidenceError) as err:
        store.keep(big, {})
    assert err.value.reason == "too_large"
    assert [k.id for k in store.windows()] == [kept.id]
    assert len(list((tmp_path / "ev").iterdir())) == 2


def test_an_unwritable_folder_fails_the_keep_as_an_io_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    store = EvidenceStore(tmp_path / "file" / "ev", 1 << 20, 10, clock)
    source = trace(tmp_path, "t", 100)
    with pytest.raises(EvidenceError) as err:
        store.keep(source, {})
    assert err.value.reason == "io_error"
    assert source.stat().st_size == 100


def test_a_restarted_store_takes_in_what_was_kept_and_holds_the_bounds(tmp_path: Path) -> None:
    first = EvidenceStore(tmp_path / "ev", 1 << 30, 10, clock)
    ids = [first.keep(trace(tmp_path, f"t{i}", 500), {"n": i}).id for i in range(4)]
    (tmp_path / "ev" / ".20251205T080000Z-000009.partial").write_bytes(b"half")
    second = EvidenceStore(tmp_path / "ev", 1 << 30, 2, clock)
    second.open()
    assert [(k.id, k.meta["n"]) for k in second.windows()] == [(ids[2], 2), (ids[3], 3)]
    assert len(list((tmp_path / "ev").iterdir())) == 4
    assert second.keep(trace(tmp_path, "t9", 500), {}).id == "20251205T080000Z-000005"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "..",
        "../etc/passwd",
        "20251205T080000Z-000001/../x",
        "20251205T080000Z-00001",
        "20251205T080000Z-000001.meta.json",
    ],
)
def test_nothing_but_an_id_names_a_kept_trace(tmp_path: Path, text: str) -> None:
    store = EvidenceStore(tmp_path / "ev", 1 << 20, 10, clock)
    store.keep(trace(tmp_path, "t", 100), {})
    assert store.trace_path(text) is None
    assert store.read_trace(text) is None


# ---------------------------------------------------------------- evicting only what a keep needs


class Watched:
    """The file a trace is written to, checking before each write that the folder, this file with
    the write included, stays within `bound`."""

    def __init__(self, path: Path, bound: int) -> None:
        self.path, self.bound, self.raw = path, bound, path.open("wb")
        self.written = 0

    def write(self, data: bytes) -> int:
        others = sum(p.stat().st_size for p in self.path.parent.iterdir() if p != self.path)
        assert others + self.written + len(data) <= self.bound
        self.written += len(data)
        return self.raw.write(data)

    def flush(self) -> None:
        self.raw.flush()

    def fileno(self) -> int:
        return self.raw.fileno()

    def __enter__(self) -> Watched:
        return self

    def __exit__(self, *exc: object) -> None:
        self.raw.close()


def watched(bound: int) -> Callable[[Path], Watched]:
    return lambda path: Watched(path, bound)


@pytest.mark.parametrize("engine_gzip", [False, True])
def test_a_window_pushes_out_the_oldest_only_when_it_needs_the_room(tmp_path: Path, engine_gzip: bool) -> None:
    """Two windows of the same trace take the same bytes `s` (same trace, ids of the same length):
    a bound of 2s holds both, one byte less holds one."""
    source = tmp_path / ("t.json.gz" if engine_gzip else "t.json")
    source.write_bytes(gzip.compress(os.urandom(3_000)) if engine_gzip else os.urandom(3_000))
    alone = EvidenceStore(tmp_path / "alone", 1 << 20, 10, clock)
    s = alone.keep(source, {}).bytes
    assert s == on_disk(tmp_path / "alone")
    for bound, survivors in ((2 * s, 2), (2 * s - 1, 1)):
        folder = tmp_path / f"ev{bound}"
        store = EvidenceStore(folder, bound, 10, clock, opener=watched(bound))
        first = store.keep(source, {}).id
        second = store.keep(source, {}).id
        assert [k.id for k in store.windows()] == [first, second][-survivors:]
        assert on_disk(folder) == survivors * s


def test_a_trace_too_large_once_compressed_pushes_nothing_out(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path / "ev", 10_000, 10, clock)
    kept = store.keep(trace(tmp_path, "small", 1_000), {})
    before = on_disk(tmp_path / "ev")
    with pytest.raises(EvidenceError) as err:
        store.keep(trace(tmp_path, "big", 20_000), {})  # random bytes: about 20,000 compressed
    assert err.value.reason == "too_large"
    assert [k.id for k in store.windows()] == [kept.id]
    assert on_disk(tmp_path / "ev") == before


def test_a_refused_window_at_the_file_bound_pushes_nothing_out(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path / "ev", 10_000, 1, clock)
    kept = store.keep(trace(tmp_path, "small", 1_000), {})
    with pytest.raises(EvidenceError):
        store.keep(trace(tmp_path, "big", 20_000), {})
    assert [k.id for k in store.windows()] == [kept.id]


def test_a_trace_larger_than_the_room_left_is_sized_then_written_whole(tmp_path: Path) -> None:
    """6,000 random bytes kept take more than 6,000 on disk: beside them, 10,000 leave less room
    than a second such trace needs, so the first goes, and the second is written whole."""
    bound = 10_000
    store = EvidenceStore(tmp_path / "ev", bound, 10, clock, opener=watched(bound))
    store.keep(trace(tmp_path, "a", 6_000), {})
    second = trace(tmp_path, "b", 6_000)
    kept = store.keep(second, {})
    assert [k.id for k in store.windows()] == [kept.id]
    assert gzip.decompress((tmp_path / "ev" / (kept.id + TRACE_SUFFIX)).read_bytes()) == second.read_bytes()
    assert on_disk(tmp_path / "ev") == kept.bytes
