"""The `warpwatch analyze` table: a header per trace, one row per (device, kernel), explanations.

Laid out for the width it is given (the terminal's, or `COLUMNS` when piped): numbers are never
cut. When the row does not fit, columns are dropped in a fixed order (the artefacts column is then
stacked under each row instead) and said so under the table; the kernel column takes the rest, its
labels cut in the middle so that rows stay distinct. Words follow the vendor: SMs and warps on
NVIDIA, CUs and wavefronts on AMD.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from ..model import (
    ARTIFACT_EXPLANATIONS,
    ARTIFACT_KINDS,
    DeviceProperties,
    DeviceStats,
    KernelStats,
    Trace,
    WindowAnalysis,
)
from ..names.labels import KernelNamer
from ..names.parse import ELLIPSIS
from .escape import printable

ARTIFACT_SHORT = {
    "negative_warps_per_sm": "neg",
    "non_finite": "inf/nan",
    "grid_overflow": "overflow",
    "sm_count_invalid": "bad SMs",
    "occupancy_sentinel": "sentinel",
    "occupancy_smem_optin": "smem 0%",
    "unrounded_warps": "unrounded",
    "missing_launch_config": "no grid",
    "grid_units_unknown": "grid unit?",
}
GAP = 2
INDENT = 2
KERNEL_MIN_WIDTH = 32
DROP_ORDER = ("artefacts", "reported", "waves", "limiter", "launches", "theoretical", "gpu", "resident")
"""Columns dropped, first to last, when a row does not fit; kernel, time share, warps per SM and
estimated occupancy always stay."""
BOUNDS = {
    "trace_span": "from the trace's profiler span",
    "requested": "as requested by the agent",
    "estimated": "estimated from the first and last GPU events",
    "none": "unknown",
}


@dataclass(frozen=True, slots=True)
class Words:
    """What a multiprocessor and a warp are called on a vendor's GPUs."""

    unit: str
    warp: str

    @property
    def warps_per_unit(self) -> str:
        return f"{self.warp}s/{self.unit}"


NVIDIA = Words("SM", "warp")
AMD = Words("CU", "wavefront")


def words_for(props: Sequence[DeviceProperties | None]) -> Words:
    """AMD words when every device with properties is AMD, else NVIDIA's."""
    known = [p for p in props if p is not None]
    return AMD if known and all(p.vendor == "amd" for p in known) else NVIDIA


def device_description(p: DeviceProperties) -> str:
    """`NVIDIA H100 (compute 9.0), 132 SMs, max 64 warps/SM` or `AMD Instinct MI300X (AMD, gfx942), ...`."""
    name = p.name.strip() or "unknown"
    if p.vendor == "amd":
        w = AMD
        kind = f"AMD, {p.arch}" if p.arch else "AMD"
    else:
        w = NVIDIA
        kind = f"compute {p.compute_capability}"
    uuid = f", UUID {p.uuid}" if p.uuid else ""
    return f"{name} ({kind}), {p.num_sms} {w.unit}s, max {p.max_warps_per_sm} {w.warps_per_unit}{uuid}"


def _device_line(d: DeviceStats) -> str:
    p = d.properties
    desc = device_description(p) if p else "no device properties in the trace (use --gpu-properties): occupancy unknown"
    busy = f", busy {d.busy_ratio:.1%}" if d.busy_ratio is not None else ""
    extra = f"; estimated occupancy {d.estimated_occupancy:.1%}" if d.estimated_occupancy is not None else ""
    conf = " (low confidence: few launches)" if d.low_confidence else ""
    return f"  GPU {d.device}: {desc}{busy}{extra}{conf}"


# --- Cells


def _num(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _pct(v: float | None) -> str:
    return "-" if v is None else format(v * 100, ".0f") + "%"


def _time_share(v: float | None) -> str:
    if v is None:
        return "-"
    text = format(v * 100, ".1f")
    return text + "*" if v > 1.0 else text


def _reported(v: float | None) -> Text:
    if v is None:
        return Text("-")
    return Text(format(v, ".4g"), style="bold red" if v < 0 else "")


def _limiter(k: KernelStats) -> str:
    """The main limiting factor, empty where nothing limits (100 % theoretical occupancy)."""
    if k.theoretical_occupancy is not None and k.theoretical_occupancy >= 1.0 - 1e-9:
        return ""
    return k.main_limiter or ""


def _artefacts(k: KernelStats) -> str:
    return ", ".join(f"{ARTIFACT_SHORT.get(a, a)} {n}" for a, n in k.artifacts.items())


@dataclass(frozen=True, slots=True)
class _Column:
    key: str
    header: str
    right: bool


def _columns(words: Words) -> tuple[_Column, ...]:
    return (
        _Column("kernel", "Kernel", False),
        _Column("gpu", "GPU", True),
        _Column("launches", "Launches", True),
        _Column("time", "Time %", True),
        _Column("warps", f"{words.warp.capitalize()}s/{words.unit}", True),
        _Column("reported", "Reported min", True),
        _Column("resident", "Resident", True),
        _Column("theoretical", "Theor. occ", True),
        _Column("estimated", "Est. occ", True),
        _Column("limiter", "Limiter", False),
        _Column("waves", "Waves", True),
        _Column("artefacts", "Artefacts", False),
    )


def _cells(k: KernelStats, label: str) -> dict[str, Text]:
    return {
        "kernel": Text(printable(label)),
        "gpu": Text(str(k.device)),
        "launches": Text(str(k.samples)),
        "time": Text(_time_share(k.time_share)),
        "warps": Text(_num(k.warps_per_sm)),
        "reported": _reported(k.reported_warps_per_sm_min),
        "resident": Text(_num(k.resident_warps_per_sm)),
        "theoretical": Text(_pct(k.theoretical_occupancy)),
        "estimated": Text(_pct(k.estimated_occupancy)),
        "limiter": Text(_limiter(k)),
        "waves": Text(_num(k.waves_per_sm)),
        "artefacts": Text(_artefacts(k)),
    }


# --- Layout


def layout(
    widths: dict[str, int], total: int, *, keep_gpu: bool
) -> tuple[list[str], int]:
    """The columns shown (in table order, minus the dropped ones) and the kernel column's width.

    `widths` are what each column needs (header or widest cell; the kernel: its widest label).
    """
    shown = list(widths)
    kernel_need = widths["kernel"]

    def others() -> int:
        return sum(widths[c] + GAP for c in shown if c != "kernel")

    for key in DROP_ORDER:
        if INDENT + min(kernel_need, KERNEL_MIN_WIDTH) + others() <= total:
            break
        if key == "gpu" and keep_gpu:
            continue
        if key in shown:
            shown.remove(key)
    kernel_width = max(min(kernel_need, total - INDENT - others()), min(kernel_need, 12))
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
        return text[:head] + ELLIPSIS + text[len(text) - (room - head):]
    if around + 4 <= room:
        return text[: around + 1] + ELLIPSIS + text[len(text) - (room - around - 1):]
    head = room // 3
    segment = width - head - 2
    start = min(max(head, around - segment // 2), len(text) - segment)
    end = start + segment
    return text[:head] + ELLIPSIS + text[start:end] + (ELLIPSIS if end < len(text) else text[end:end + 1])


def render_table(
    console: Console, trace: Trace, analysis: WindowAnalysis, *, top: int = 25, namer: KernelNamer | None = None
) -> None:
    """Header, one row per (device, kernel) by GPU time, then one explanation per artefact kind found."""
    namer = namer or KernelNamer()
    w = analysis.window
    console.print(Text(f"Trace: {printable(analysis.path)}", style="bold"))
    for d in analysis.devices:
        console.print(Text(printable(_device_line(d))))
    rank = f", rank {analysis.rank}" if analysis.rank is not None else ""
    console.print(Text(
        f"  Window: {w.duration / 1000:.3f} ms ({BOUNDS[w.bounds]}){rank}; {analysis.launch_count} kernel launches"
    ))
    if not analysis.kernels:
        console.print("  No kernel events in this trace (a CPU-only capture, or GPU activities were not recorded).")
        console.print()
        return
    words = words_for([d.properties for d in analysis.devices])
    columns = {c.key: c for c in _columns(words)}
    shown_kernels = analysis.kernels if top <= 0 else analysis.kernels[:top]
    rows = [_cells(k, namer(k.name)) for k in shown_kernels]
    widths = {key: max([len(col.header), *(len(r[key].plain) for r in rows)]) for key, col in columns.items()}
    widths["kernel"] = max(len(r["kernel"].plain) for r in rows)
    if not any(r["artefacts"].plain for r in rows):
        widths.pop("artefacts")
    keep_gpu = len({k.device for k in shown_kernels}) > 1
    shown, kernel_width = layout(widths, console.width, keep_gpu=keep_gpu)
    names = distinct_cuts([r["kernel"].plain for r in rows], kernel_width)
    widths["kernel"] = max(kernel_width, len("Kernel"))
    console.print(_line({c: Text(columns[c].header, style="bold") for c in shown}, shown, widths, columns),
                  overflow="ignore", crop=False)
    console.print(Text(" " * INDENT + "─" * (sum(widths[c] for c in shown) + GAP * (len(shown) - 1))),
                  overflow="ignore", crop=False)
    stacked = "artefacts" in widths and "artefacts" not in shown
    labels = [r["kernel"].plain for r in rows]
    alike = Counter(names)
    for row, name, label in zip(rows, names, labels, strict=True):
        row["kernel"] = Text(name)
        console.print(_line(row, shown, widths, columns), overflow="ignore", crop=False)
        if alike[name] > 1 and name != label:  # cut alike: the whole label under the row
            _folded(console, " " * (INDENT + 2) + "kernel: ", label)
        if stacked and row["artefacts"].plain:
            _folded(console, " " * (INDENT + 2) + "artefacts: ", row["artefacts"].plain)
    if len(shown_kernels) < len(analysis.kernels):
        console.print(f"  … {len(analysis.kernels) - len(shown_kernels)} more kernels (--top 0 shows all)")
    for line in _notes(analysis, shown_kernels, shown, widths, words):
        console.print(Text("  " + line))
    for line in explanations(analysis, trace):
        console.print(Text("  • " + printable(line)))
    console.print()


def _folded(console: Console, lead: str, text: str) -> None:
    """`lead` then `text`, folded at the console's width, continuation lines aligned under `text`."""
    room = max(console.width - len(lead), 16)
    for k in range(0, max(len(text), 1), room):
        console.print(Text((lead if k == 0 else " " * len(lead)) + text[k:k + room]), overflow="ignore", crop=False)


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
    dropped = [c for c in DROP_ORDER if c in widths and c not in shown and c != "artefacts"]
    if dropped:
        yield (f"(Narrow terminal: {', '.join(dropped)} not shown; widen it, set COLUMNS, or use --format json.)")
    w, u = words.warp, words.unit
    yield (
        f"Kernel: the `kernel` label of its metrics (--format json shows the full name). {w.capitalize()}s/{u}: "
        f"launched {w}s per {u}, corrected; Reported: the profiler's own value (minimum); Resident: {w}s actually "
        f"on {'an' if u == 'SM' else 'a'} {u} at once (waves and tail accounted). Launches are raw counts; "
        "time shares and means are corrected for the capture window (long kernels are under-sampled)."
    )
    over = [k for k in kernels if k.time_share is not None and k.time_share > 1.0]
    if over:
        yield (
            f"* Time % above 100 ({len(over)} kernels): the kernel's corrected GPU time exceeds the window. Each "
            "captured launch of duration d in a window W counts W/(W-d) times (a long kernel is rarely captured "
            "whole), so one long launch weighs heavily; launches on concurrent streams also add up."
        )


def explanations(analysis: WindowAnalysis, trace: Trace | None = None) -> Iterator[str]:
    """One plain sentence per artefact kind found, plus the launched-vs-resident note when it applies."""
    for kind in ARTIFACT_KINDS:
        n = analysis.artifacts.get(kind)
        if n:
            yield f"{kind} ({n} launches): {ARTIFACT_EXPLANATIONS[kind]}"
    over = [
        k for k in analysis.kernels
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
