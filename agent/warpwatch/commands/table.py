"""The `warpwatch analyze` table: a header per trace, one row per (device, kernel), explanations.

Laid out from what each column holds for this trace, at the width it is given (the terminal's, or
`COLUMNS` when piped): a column that is empty for every row is left out, the GPU column appears
only when the kernels ran on more than one device, `Obs. %` (what the trace shows) only where it
differs from the estimate, and `Reported` (the profiler's own warps per SM) ranks high only where it
disagrees with the corrected value. When the row does not fit, the least telling columns are
dropped first (the artefacts column is then stacked under each row instead) and said so under the
table; the kernel column takes the rest, its labels cut in the middle so that rows stay distinct.
Numbers never are cut, and a column formats all its numbers alike. Header and notes wrap with
their indentation. Words follow the vendor: SMs and warps on NVIDIA, CUs and wavefronts on AMD.
"""

from __future__ import annotations

import textwrap
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from ..model import ARTIFACT_EXPLANATIONS, ARTIFACT_KINDS, KernelStats, Trace, WindowAnalysis
from ..names.labels import KernelNamer
from ..names.parse import ELLIPSIS
from .escape import printable
from .table_cells import (
    AMD,
    DASH,
    NVIDIA,
    Words,
    artefacts,
    column_numbers,
    device_lines,
    limiter,
    percent,
    reported_differs,
    share,
    window_line,
    words_for,
)

__all__ = ["AMD", "NVIDIA", "distinct_cuts", "explanations", "layout", "render_table"]

GAP = 2
INDENT = 2
KERNEL_MIN_WIDTH = 32
"""The kernel column's least width before columns are dropped, at most a third of the row."""


@dataclass(frozen=True, slots=True)
class _Column:
    key: str
    header: str
    right: bool
    rank: int
    """Kept before every column of a higher rank; 0: never dropped."""


def _columns(words: Words, rows: Sequence[KernelStats]) -> list[_Column]:
    """The table's columns in display order, ranked by what they hold for these rows."""
    disagree = any(reported_differs(k) for k in rows)
    return [
        _Column("kernel", "Kernel", False, 0),
        _Column("gpu", "GPU", True, 1),
        _Column("launches", "Launches", True, 3),
        _Column("time", "Time %", True, 0),
        _Column("observed", "Obs. %", True, 2),
        _Column("warps", f"{words.warp.capitalize()}s/{words.unit}", True, 0),
        _Column("reported", "Reported", True, 3 if disagree else 7),
        _Column("resident", "Resident", True, 5),
        _Column("theoretical", "Theor. occ", True, 4),
        _Column("estimated", "Est. occ", True, 0),
        _Column("limiter", "Limiter", False, 6),
        _Column("waves", "Waves", True, 8),
        _Column("artefacts", "Artefacts", False, 9),
    ]


def _cells(ks: Sequence[KernelStats], labels: Sequence[str]) -> list[dict[str, Text]]:
    """Every row's cells; numeric columns formatted per column."""
    numeric = {
        "warps": column_numbers([k.warps_per_sm for k in ks]),
        "reported": column_numbers([k.reported_warps_per_sm for k in ks]),
        "resident": column_numbers([k.resident_warps_per_sm for k in ks]),
        "waves": column_numbers([k.waves_per_sm for k in ks]),
        "launches": [f"{k.samples:,}" for k in ks],
    }
    out = []
    for i, (k, label) in enumerate(zip(ks, labels, strict=True)):
        row = {key: Text(v[i]) for key, v in numeric.items()}
        if reported_differs(k) and k.reported_warps_per_sm is not None:
            row["reported"].stylize("bold red" if k.reported_warps_per_sm < 0 else "yellow")
        row.update(
            kernel=Text(printable(label)),
            gpu=Text(str(k.device)),
            time=Text(share(k.time_share)),
            observed=Text(share(k.observed_time_share)),
            theoretical=Text(percent(k.theoretical_occupancy)),
            estimated=Text(percent(k.estimated_occupancy)),
            limiter=Text(limiter(k)),
            artefacts=Text(artefacts(k)),
        )
        out.append(row)
    return out


def _holding(columns: Sequence[_Column], rows: Sequence[dict[str, Text]], devices: int) -> list[_Column]:
    """The columns that say something for these rows: not empty for all, not one GPU for all, and
    `Obs. %` only where some row's observed share reads differently from its estimate."""

    def empty(key: str) -> bool:
        return all(r[key].plain in ("", DASH) for r in rows)

    out = []
    for c in columns:
        if c.key not in ("kernel", "time") and empty(c.key):
            continue
        if c.key == "gpu" and devices <= 1:
            continue
        if c.key == "observed" and all(r["observed"].plain == r["time"].plain for r in rows):
            continue
        out.append(c)
    return out


# --- Layout


def layout(widths: dict[str, int], ranks: dict[str, int], total: int) -> tuple[list[str], int]:
    """The columns shown (in table order, minus the dropped ones) and the kernel column's width.

    `widths` are what each column needs (header or widest cell; the kernel: its widest label), in
    table order; columns are dropped by descending `ranks` (rank 0: never) until the row fits."""
    shown = list(widths)
    kernel_need = min(widths["kernel"], KERNEL_MIN_WIDTH, max(total // 3, 12))

    def others() -> int:
        return sum(widths[c] + GAP for c in shown if c != "kernel")

    for key in sorted((k for k in shown if ranks[k]), key=lambda k: -ranks[k]):
        if INDENT + kernel_need + others() <= total:
            break
        shown.remove(key)
    kernel_width = max(min(widths["kernel"], total - INDENT - others()), min(widths["kernel"], 12))
    return shown, kernel_width


def distinct_cuts(labels: Sequence[str], width: int) -> list[str]:
    """Each label in at most `width` characters, cut in the middle; labels that were distinct stay so
    (a label that would read like another is cut around the first character where they differ)."""
    cut = [_cut(x, width) for x in labels]
    for _ in range(3):
        groups: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(cut):
            groups[c].append(i)
        clashes = [g for g in groups.values() if len({labels[i] for i in g}) > 1]
        if not clashes:
            break
        for group in clashes:
            for i in group:
                others = [labels[j] for j in group if labels[j] != labels[i]]
                differs = max(_common_prefix(labels[i], o) for o in others)
                cut[i] = _cut(labels[i], width, around=differs)
    return cut


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _cut(text: str, width: int, *, around: int | None = None) -> str:
    """`text` cut in the middle to `width`; with `around`, showing the character at that index."""
    if len(text) <= width:
        return text
    if width <= 4:
        return text[:width]
    room = width - 1
    head = room * 2 // 3
    if around is None or around < head:
        return text[:head] + ELLIPSIS + text[len(text) - (room - head) :]
    if around + 4 <= room:
        return text[: around + 1] + ELLIPSIS + text[len(text) - (room - around - 1) :]
    head = room // 3
    segment = width - head - 2
    start = min(max(head, around - segment // 2), len(text) - segment)
    end = start + segment
    return text[:head] + ELLIPSIS + text[start:end] + (ELLIPSIS if end < len(text) else text[end : end + 1])


def render_table(
    console: Console, trace: Trace, analysis: WindowAnalysis, *, top: int = 25, namer: KernelNamer | None = None
) -> None:
    """Header, one row per (device, kernel) by GPU time, then one explanation per artefact kind found."""
    namer = namer or KernelNamer()
    _wrapped(console, f"Trace: {printable(analysis.path)}", 0, style="bold")
    for d in analysis.devices:
        for k, text in enumerate(device_lines(d)):
            _wrapped(console, printable(text), INDENT + 2 * (k > 0))
    _wrapped(console, window_line(analysis), INDENT)
    if not analysis.kernels:
        _wrapped(
            console, "No kernel events in this trace (a CPU-only capture, or GPU activities were not recorded).", INDENT
        )
        console.print()
        return
    words = words_for([d.properties for d in analysis.devices])
    shown_kernels = analysis.kernels if top <= 0 else analysis.kernels[:top]
    rows = _cells(shown_kernels, [namer(k.name) for k in shown_kernels])
    columns = _holding(_columns(words, shown_kernels), rows, len({k.device for k in shown_kernels}))
    by_key = {c.key: c for c in columns}
    widths = {c.key: max([len(c.header), *(len(r[c.key].plain) for r in rows)]) for c in columns}
    widths["kernel"] = max(len(r["kernel"].plain) for r in rows)
    shown, kernel_width = layout(widths, {c.key: c.rank for c in columns}, console.width)
    names = distinct_cuts([r["kernel"].plain for r in rows], kernel_width)
    widths["kernel"] = max(kernel_width, len("Kernel"))
    console.print(
        _line({c: Text(by_key[c].header, style="bold") for c in shown}, shown, widths, by_key),
        overflow="ignore",
        crop=False,
    )
    console.print(
        Text(" " * INDENT + "─" * (sum(widths[c] for c in shown) + GAP * (len(shown) - 1))),
        overflow="ignore",
        crop=False,
    )
    stacked = "artefacts" in widths and "artefacts" not in shown
    labels = [r["kernel"].plain for r in rows]
    alike = Counter(names)
    for row, name, label in zip(rows, names, labels, strict=True):
        row["kernel"] = Text(name)
        console.print(_line(row, shown, widths, by_key), overflow="ignore", crop=False)
        if alike[name] > 1 and name != label:  # cut alike: the whole label under the row
            _folded(console, " " * (INDENT + 2) + "kernel: ", label)
        if stacked and row["artefacts"].plain:
            _folded(console, " " * (INDENT + 2) + "artefacts: ", row["artefacts"].plain)
    if len(shown_kernels) < len(analysis.kernels):
        _wrapped(console, f"… {len(analysis.kernels) - len(shown_kernels)} more kernels (--top 0 shows all)", INDENT)
    for note in _notes(analysis, shown_kernels, shown, widths, words):
        _wrapped(console, note, INDENT)
    for note in explanations(analysis, trace):
        _wrapped(console, "• " + printable(note), INDENT, hanging=2)
    console.print()


def _wrapped(console: Console, text: str, indent: int, *, hanging: int = 0, style: str = "") -> None:
    """`text` at `indent`, wrapped at the console's width with every continuation line indented
    alike (and `hanging` more); long words such as paths are broken."""
    width = max(console.width, indent + hanging + 16)
    lines = textwrap.wrap(
        text,
        width=width,
        initial_indent=" " * indent,
        subsequent_indent=" " * (indent + hanging),
        break_on_hyphens=False,
    ) or [""]
    for line in lines:
        console.print(Text(line, style=style), overflow="ignore", crop=False)


def _folded(console: Console, lead: str, text: str) -> None:
    """`lead` then `text`, folded at the console's width, continuation lines aligned under `text`."""
    room = max(console.width - len(lead), 16)
    for k in range(0, max(len(text), 1), room):
        console.print(Text((lead if k == 0 else " " * len(lead)) + text[k : k + room]), overflow="ignore", crop=False)


def _line(cells: dict[str, Text], shown: list[str], widths: dict[str, int], columns: dict[str, _Column]) -> Text:
    out = Text(" " * INDENT)
    for k, key in enumerate(shown):
        cell = cells[key].copy()
        pad = widths[key] - len(cell.plain)
        if k:
            out.append(" " * GAP)
        if columns[key].right:
            out.append(" " * pad)
            out.append_text(cell)
        else:
            out.append_text(cell)
            if k < len(shown) - 1:
                out.append(" " * pad)
    return out


def _notes(
    analysis: WindowAnalysis, kernels: Sequence[KernelStats], shown: list[str], widths: dict[str, int], words: Words
) -> Iterator[str]:
    names = {
        "gpu": "GPU",
        "launches": "launches",
        "observed": "observed %",
        "reported": "reported",
        "resident": "resident",
        "theoretical": "theoretical occupancy",
        "limiter": "limiter",
        "waves": "waves",
    }
    dropped = [names[c] for c in widths if c not in shown and c in names]
    if dropped:
        yield f"(Narrow terminal: {', '.join(dropped)} not shown; widen it, set COLUMNS, or use --format json.)"
    devices = {k.device for k in kernels}
    if "gpu" not in widths and len(devices) == 1:
        yield f"All kernels ran on GPU {next(iter(devices))}."
    if words is AMD and "estimated" not in widths:
        yield (
            "Occupancy is not shown: CUDA's occupancy calculator does not apply to AMD GPUs (the "
            "wavefronts per CU are computed from grid, block and the CU count)."
        )
    w, u = words.warp, words.unit
    yield (
        "Kernel: the `kernel` label of its metrics (--format json shows the full name). Time %: the kernel's "
        "share of the window, estimated: each captured launch weighted for the launches of its length that the "
        "profiler dropped at the window's edges, and kept within what the trace proves possible. "
        + ("Obs. %: what the trace itself shows (its captured launches, unweighted). " if "observed" in shown else "")
        + f"{w.capitalize()}s/{u}: launched {w}s per {u}, corrected, duration-weighted"
        + (
            "; Reported: the profiler's own value, weighted alike (highlighted where it differs)"
            if "reported" in shown
            else ""
        )
        + f"; Resident: {w}s actually on {'an' if u == 'SM' else 'a'} {u} at once (waves and tail accounted). "
        "Launches: launches in the trace."
    )
    if any(k.bounded for k in kernels):
        yield (
            "Estimates of one window can exceed what is possible when long kernels are captured (a launch of "
            "duration d counts W/(W-d) times); these are brought within what the trace shows possible, and "
            "the device is marked low-confidence. The agent's counters keep the unbounded sums, which stay "
            "unbiased over many windows."
        )
    over = [k for k in kernels if k.time_share is not None and k.time_share > 1.0]
    if over:
        yield (f"* Time % above 100 ({len(over)} kernels): the kernel ran on several streams at once.")


def explanations(analysis: WindowAnalysis, trace: Trace | None = None) -> Iterator[str]:
    """One plain sentence per artefact kind found, plus the launched-vs-resident note when it applies."""
    for kind in ARTIFACT_KINDS:
        n = analysis.artifacts.get(kind)
        if n:
            yield f"{kind} ({n} launches): {ARTIFACT_EXPLANATIONS[kind]}"
    over = [
        k
        for k in analysis.kernels
        if k.reported_warps_per_sm_min is not None
        and (props := next((d.properties for d in analysis.devices if d.device == k.device), None)) is not None
        and k.reported_warps_per_sm_min > props.max_warps_per_sm
    ]
    if over:
        yield (
            f"{len(over)} kernels report more warps per SM than an SM can hold: the profiler's 'warps per SM' "
            "counts every warp of every wave (launched, not resident). See the Resident column for what an SM "
            "actually holds."
        )
    if trace is not None:
        yield from trace.warnings
