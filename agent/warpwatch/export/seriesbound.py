"""Bounds on what `export.SnapshotBuilder` keeps, so that /metrics stays bounded whatever traces say.

Traces are input: a broken or hostile one can name any number of kernels and GPU device ids.
Kernels are bounded per GPU by the top-K (`pooling.StableTopK`) and, per counter family, by
`LruCounter` / `LruSums` (the least recently updated (gpu, kernel[, artifact]) series beyond
`MAX_COUNTER_SERIES` are dropped); the series of a kernel out of the top-K for `ABSENT_ROUNDS` rounds
are removed (bounded in time, not only in count). GPUs are bounded by `GpuBound`: at most `max_gpus` GPUs have
series at once (a node has 8 to 16 GPUs; MIG makes up to 7 instances of each).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..config.units import check_count

MAX_COUNTER_SERIES = 10_000
"""Per counter family: least recently updated (gpu, kernel[, artifact]) series beyond this are dropped."""
ABSENT_ROUNDS = 10
"""Rounds of its GPU after which the counter series of a kernel that left the top-K are removed: a
kernel out of the top-K counts under `other`, so its own series stay flat (their rates are 0) and
removing them changes no rate or increase; a kernel that comes back starts again at 0 (a counter
reset to Prometheus). Series then cost (top-K + 1) per family and GPU, not one per kernel ever seen."""

V = TypeVar("V")


class _Lru(Generic[V]):
    """Values keyed by label tuples (the GPU first), bounded by dropping the least recently updated."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._values: OrderedDict[tuple[str, ...], V] = OrderedDict()

    def _touched(self, key: tuple[str, ...]) -> None:
        self._values.move_to_end(key)
        while len(self._values) > self._limit:
            self._values.popitem(last=False)

    def drop_kernel(self, gpu: str, kernel: str) -> None:
        """Forget every series of (`gpu`, `kernel`) (any further labels)."""
        for key in [k for k in self._values if k[0] == gpu and k[1] == kernel]:
            del self._values[key]

    def drop_gpu(self, gpu: str) -> None:
        """Forget every series of `gpu` (its GPU left the export)."""
        for key in [k for k in self._values if k[0] == gpu]:
            del self._values[key]


class LruCounter(_Lru[float]):
    """One counter value per key."""

    def add(self, key: tuple[str, ...], value: float) -> None:
        self._values[key] = self._values.get(key, 0.0) + value
        self._touched(key)

    def items(self) -> list[tuple[tuple[str, ...], float]]:
        return sorted(self._values.items())


class LruSums(_Lru[list[float]]):
    """A vector of counter values per key (updated together)."""

    def __init__(self, limit: int, width: int) -> None:
        super().__init__(limit)
        self._width = width

    def add(self, key: tuple[str, ...], values: Sequence[float]) -> None:
        row = self._values.setdefault(key, [0.0] * self._width)
        for i, v in enumerate(values):
            row[i] += v
        self._touched(key)

    def items(self) -> list[tuple[tuple[str, ...], tuple[float, ...]]]:
        return [(k, tuple(v)) for k, v in sorted(self._values.items())]


@dataclass(frozen=True, slots=True)
class Admission:
    """One round's GPUs, sorted: those exported, those left out, and those that lost their place."""

    admitted: tuple[int, ...]
    refused: tuple[int, ...]
    """New GPUs left out: every place is held by a GPU updated in this round."""
    evicted: tuple[int, ...]
    """GPUs not updated in this round whose series were removed to make room for a new one."""


class GpuBound:
    """Which GPUs have series: at most `limit`, the least recently updated one out first.

    A GPU that was already exported keeps its place in every round that updates it, so a trace
    naming thousands of device ids cannot push out the GPUs other processes report each round:
    new GPUs take free places, then the places of GPUs not updated in this round (least recently
    updated first), in the order of their ids (the real GPUs of a node are the low ones); the
    rest are refused for this round. Memory is O(limit).
    """

    def __init__(self, limit: int) -> None:
        check_count(limit, "max_gpus")
        self.limit = limit
        self._round = 0
        self._last: OrderedDict[int, int] = OrderedDict()
        """gpu -> the round that last updated it, least recently updated first."""

    def __contains__(self, gpu: int) -> bool:
        return gpu in self._last

    def admit(self, gpus: Iterable[int]) -> Admission:
        """Place one round's GPUs (module doc)."""
        self._round += 1
        admitted: list[int] = []
        new: list[int] = []
        for gpu in sorted(set(gpus)):
            if gpu in self._last:
                self._last[gpu] = self._round
                self._last.move_to_end(gpu)
                admitted.append(gpu)
            else:
                new.append(gpu)
        refused: list[int] = []
        evicted: list[int] = []
        for i, gpu in enumerate(new):
            if len(self._last) >= self.limit:
                oldest, updated = next(iter(self._last.items()))
                if updated == self._round:  # every place is held by a GPU of this round
                    refused.extend(new[i:])
                    break
                del self._last[oldest]
                evicted.append(oldest)
            self._last[gpu] = self._round
            admitted.append(gpu)
        return Admission(tuple(sorted(admitted)), tuple(refused), tuple(evicted))
