"""Kernel labels: a kernel's full name -> a short, readable, stable label value.

The `kernel` label (docs/metrics.md) is a pure function of the kernel's full name: the same
kernel gets the same label in every pod, process and restart, whatever else was seen first.
`kernel_label` computes it:

1. `clean`: control characters (C0, C1), zero-width and bidirectional formatting characters and
   lone surrogates are removed; runs of white space become one space.
2. Demangle: an Itanium-mangled name (`_Z...`) is demangled (`cppdemangle.demangle`: pure Python, the
   same on every machine); one that is not (too large to demangle safely, or a form the demangler
   does not read, such as the local lambdas of torch's `normal_` kernels) keeps only its leading
   qualified name, read directly (`cppdemangle.mangled_prefix`), and the label carries the hash.
3. The *core* of a C++ signature is the kernel's qualified name with its template arguments:
   the return type (`void`, `std::enable_if<...>::type`) and the parameter list are left out.
   A name that is no signature (Triton, cuBLAS/cuDNN SASS kernels, Tensile) is its own core.
4. A core of at most `MAX_LABEL_LENGTH` characters is the label, with spacing normalised
   (`a, b`, `>>`): nothing was dropped, so there is no hash.
5. A longer core is shortened step by step, each step only if the previous one is still too long,
   and the label ends in `~` + 8 hex digits of the BLAKE2s hash of the full (raw) name:
   a. inside template arguments: parameter lists and `operator()` go, a chain of lambdas becomes
      the function it is in and its innermost lambda (`direct_copy_kernel_cuda::{lambda(float)#1}`:
      the op and the dtype of an elementwise kernel; just the function when it is a template, as
      in `gpu_kernel_impl<op>::{lambda(int)#1}`), and namespaces go (`at::native::FillFunctor<float>`
      -> `FillFunctor<float>`);
   b. the kernel's own namespaces go;
   c. template arguments become `…` one at a time, the most deeply nested first and, among
      equally deep ones, the last first, until the label fits;
   d. the middle is cut (`…`), keeping the start and the end.

So what tells kernels apart stays readable (the functor of `vectorized_elementwise_kernel`, the
kernel type of Composable Kernel's `ck_tile::kentry`, Triton and SASS names whole), and two
different kernels never share a label: a label without hash is the kernel's whole core, one with a
hash names its full name. The one exception is C++ overloading: two kernels whose names differ only
in their parameter list or return type (same name, same template arguments) share a label; no
profiler trace we know of has such a pair.

Raw names are untrusted and may be megabytes long: the work is linear in the name's length (the
parser is `cppnames.Parser`), and names longer than `MAX_PARSED` are only cut and hashed.
`KernelNamer` caches labels (bounded); `label_text` applies steps 1 and 5d to other strings that
become label values (GPU names).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import replace

from .demangle import demangle, mangled_prefix
from .parse import ELLIPSIS, QName, Style, params_length, render_qname, signature, slots, squash

MAX_LABEL_LENGTH = 128
HASH_DIGITS = 8
RESERVED = frozenset({"other"})
MAX_PARSED = 64 * 1024
"""Longer names are not parsed: cut and hashed."""
MAX_ELISIONS = 256
"""Template arguments elided one at a time at most (then the middle is cut)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
"""Removed from labels: C0 and C1 controls, zero-width and bidirectional formatting characters,
lone surrogates (which cannot be encoded as UTF-8 at all)."""
_SPACES = re.compile(r"\s+")


def name_hash(raw: str) -> str:
    """8 hex digits identifying a raw kernel name (BLAKE2s, stable across runs and machines)."""
    return hashlib.blake2s(raw.encode("utf-8", "surrogatepass"), digest_size=HASH_DIGITS // 2).hexdigest()


def clean(raw: str) -> str:
    """The raw name without control characters and with single spaces."""
    return _SPACES.sub(" ", _CONTROL.sub("", raw)).strip()


def middle_cut(text: str, width: int) -> str:
    """`text` in at most `width` characters: its start, `…`, its end (two thirds before, one after)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return text[:width]
    head = (width - 1) * 2 // 3
    tail = width - 1 - head
    return text[:head] + ELLIPSIS + (text[-tail:] if tail else "")


def with_hash(label: str, raw: str) -> str:
    """`label~hash`, the label middle-cut so that the whole stays within `MAX_LABEL_LENGTH`."""
    return f"{middle_cut(label, MAX_LABEL_LENGTH - HASH_DIGITS - 1)}~{name_hash(raw)}"


def label_text(raw: str) -> str:
    """Any untrusted string as a label value: `clean`, and cut with a `~hash` beyond `MAX_LABEL_LENGTH`."""
    text = clean(raw)
    return with_hash(text, raw) if len(text) > MAX_LABEL_LENGTH else text


MAX_NAME_TEXT = 1024
"""Longest full kernel name exported as a label value (`warpwatch_kernel_info{name}`)."""


def name_text(raw: str) -> str:
    """A full kernel name as a label value: `clean`, and beyond `MAX_NAME_TEXT` characters cut in the
    middle with the `~hash` of the full name (the kernel label's hash, where it has one)."""
    text = clean(raw)
    if len(text) <= MAX_NAME_TEXT:
        return text
    return f"{middle_cut(text, MAX_NAME_TEXT - HASH_DIGITS - 1)}~{name_hash(raw)}"


# --- The label


def kernel_label(raw: str) -> str:
    """The label of a kernel's full name (module doc): readable, at most `MAX_LABEL_LENGTH`
    characters, the same on every machine, with a `~hash` exactly when something was dropped."""
    text = clean(raw)
    lossless = _CONTROL.search(raw) is None
    if not text:
        return with_hash("unnamed", raw)
    if len(text) > MAX_PARSED:
        return with_hash(text, raw)
    if text.startswith("_Z"):
        demangled = demangle(text)
        if demangled is None:
            prefix = mangled_prefix(text)
            return with_hash(prefix or text, raw)
        text = demangled
    sig = signature(text)
    if sig is None:
        core = text
        full = text
    else:
        kernel, is_signature = sig
        core = text[kernel.start : kernel.end]
        full = render_qname(kernel, Style(), 0, inner=False, params=not is_signature)
        if is_signature:
            last = kernel.segs[-1]
            core = core[: len(core) - params_length(text, kernel, last)]
        if squash(full) != squash(core):  # the parser did not reproduce it: count as dropped
            lossless = False
    if lossless and len(full) <= MAX_LABEL_LENGTH and full not in RESERVED:
        return full
    if sig is None:
        return with_hash(full, raw)
    kernel, is_signature = sig
    room = MAX_LABEL_LENGTH - HASH_DIGITS - 1
    label = full
    for style in _SHORTER:
        if len(label) <= room:
            break
        label = render_qname(kernel, style, 0, inner=False, params=not is_signature)
    if len(label) > room:
        label = _elided(kernel, is_signature, room, label)
    return with_hash(label, raw)


_SHORTER = (Style(inner_short=True), Style(inner_short=True, outer_short=True))


def _elided(kernel: QName, is_signature: bool, room: int, label: str) -> str:
    """`label`, the shortest rendering, with template arguments elided until it fits in `room`."""
    # Elide template arguments, the most deeply nested first and, among equals, the last first
    # (the kernel's name and its leading arguments stay readable longest): the fewest that make
    # the label fit, found by bisection, since each rendering costs the name's length (one more
    # at a time took 27 s for a 60 KB name).
    style = _SHORTER[-1]
    order = [key for _depth, _order, key in sorted(slots(kernel, style), key=lambda slot: (-slot[0], -slot[1]))]

    def elide(count: int) -> str:
        return render_qname(
            kernel, replace(style, elided=frozenset(order[:count])), 0, inner=False, params=not is_signature
        )

    count = min(len(order), MAX_ELISIONS)
    if count:
        label = elide(count)
        low = 1
        while low < count and len(label) <= room:  # `label` is elide(count), and it fits
            middle = (low + count) // 2
            shorter = elide(middle)
            if len(shorter) <= room:
                count, label = middle, shorter
            else:
                low = middle + 1
    return label


"""Lossy renderings, tried in order (module doc, 5a and 5b)."""


class KernelNamer:
    """`kernel_label` with a bounded cache (least recently used names are forgotten).

    Labels are a pure function of the name: the cache only saves the work. Not thread-safe:
    one writer (the service's window job) uses it.
    """

    def __init__(self, max_entries: int = 20_000) -> None:
        self._max = max_entries
        self._cache: OrderedDict[str, str] = OrderedDict()

    def __call__(self, raw: str) -> str:
        key = (
            raw
            if len(raw) <= 1024
            else "\0" + hashlib.blake2b(raw.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        )
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        label = self._cache[key] = kernel_label(raw)
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return label

    def __len__(self) -> int:
        return len(self._cache)
