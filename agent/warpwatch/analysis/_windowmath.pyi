from collections.abc import Sequence
from typing import Any

def group_sums(
    gids: list[int], n_groups: int, launches: Sequence[Any], t0: float, t1: float, w: float
) -> tuple[list[float], list[float], list[float], list[float], list[list[tuple[float, float]]]] | None: ...
def busy_time(intervals: Sequence[tuple[float, float]], w: float, max_overlap: int) -> tuple[float, bool] | None: ...
