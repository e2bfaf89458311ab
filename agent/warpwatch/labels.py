"""Kernel labels: a kernel's full name -> a short, readable, stable label value.

The `kernel` label (docs/metrics.md) is a pure function of the kernel's full name: the same
kernel gets the same label in every pod, process and restart, whatever else was seen first.
`kernel_label` computes it:

1. `clean`: control characters (C0, C1), zero-width and bidirectional formatting characters and
   lone surrogates are removed; runs of white space become one space.
2. Demangle: an Itanium-mangled name (`_Z...`) is demangled with `itanium-demangler`, a pure
   Python demangler, so the result is the same on every machine (it does not depend on the host's
   libstdc++ as `__cxa_demangle` would). Mangled names can expand exponentially (back-references),
   so a name longer than `MAX_MANGLED` or one whose demangled text would exceed `MAX_DEMANGLED`
   is not demangled: its leading qualified name is read directly (and the label carries the hash).
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

Raw names are untrusted and may be megabytes long: the work is linear in the name's length, nesting
deeper than `MAX_DEPTH` is kept as text, and names longer than `MAX_PARSED` are only cut and hashed.
`KernelNamer` caches labels (bounded); `label_text` applies steps 1 and 5d to other strings that
become label values (GPU names).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

MAX_LABEL_LENGTH = 128
HASH_DIGITS = 8
RESERVED = frozenset({"other"})
MAX_MANGLED = 4096
"""Longer mangled names are not demangled (the demangler's time grows faster than linearly)."""
MAX_DEMANGLED = 64 * 1024
"""Mangled names whose demangled text would be longer than this are not demangled."""
MAX_PARSED = 64 * 1024
"""Longer names are not parsed: cut and hashed."""
MAX_DEPTH = 40
"""Template or parameter nesting deeper than this is kept as text."""
ELLIPSIS = "…"

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
"""Removed from labels: C0 and C1 controls, zero-width and bidirectional formatting characters,
lone surrogates (which cannot be encoded as UTF-8 at all)."""
_SPACES = re.compile(r"\s+")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.]*")
_DIGITS = re.compile(r"\d+")
_ANON = "(anonymous namespace)"
_QUALIFIERS = (" const", " volatile", " &&", " &")
_CLOSE = {"<": ">", "(": ")", "[": "]", "{": "}"}
_LITERAL_CAST = re.compile(r"\((bool|int|unsigned int|long|unsigned long|long long|unsigned long long|char)\)(-?\d+)")
_LITERAL_SUFFIX = {"int": "", "unsigned int": "u", "long": "l", "unsigned long": "ul",
                   "long long": "ll", "unsigned long long": "ull"}


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


# --- Demangling


def demangle(name: str) -> str | None:
    """The demangled text of an Itanium-mangled name, or None (not mangled, invalid, too large)."""
    if not name.startswith("_Z") or len(name) > MAX_MANGLED:
        return None
    import itanium_demangler as dm

    try:
        # The public `parse` first expands argument packs over the whole tree, which takes time
        # exponential in the back-references; the bare parse shares them, so its size is measured
        # first (as a tree, in time linear in the shared graph), and only a bounded one expanded.
        ast = dm._parse_mangled_name(dm._Cursor(name))
        if ast is None or _tree_size(ast, {}) > MAX_DEMANGLED:
            return None
        text = str(dm._expand_arg_packs(ast))
    except (RecursionError, ValueError, TypeError, AttributeError, KeyError, IndexError, AssertionError):
        return None
    if len(text) > MAX_DEMANGLED:
        return None
    return _LITERAL_CAST.sub(_literal, text)


def _literal(m: re.Match[str]) -> str:
    """`(int)2` -> `2`, `(bool)1` -> `true`: literals as CUPTI and c++filt print them."""
    kind, value = m.group(1), m.group(2)
    if kind == "bool":
        return {"0": "false", "1": "true"}.get(value, m.group(0))
    if kind == "char":
        return m.group(0)
    return value + _LITERAL_SUFFIX[kind]


def _tree_size(node: Any, memo: dict[int, int]) -> int:
    """Characters (roughly) of the demangled text of a parsed name, shared parts counted each time."""
    key = id(node)
    size = memo.get(key)
    if size is not None:
        return size
    if isinstance(node, str):
        size = len(node)
    elif isinstance(node, (tuple, list, frozenset)):
        size = 2 * len(node)
        for child in node:
            size += _tree_size(child, memo)
            if size > MAX_DEMANGLED:
                break
    else:
        size = 2
    memo[key] = size
    return size


def _mangled_prefix(name: str) -> str | None:
    """The leading qualified name of a mangled symbol (`_ZN19cutlass_cudnn_train6KernelI...` ->
    `cutlass_cudnn_train::Kernel`), for names that are not demangled."""
    if not name.startswith("_Z"):
        return None
    i = 2
    nested = name.startswith("N", i)
    if nested:
        i += 1
    parts: list[str] = []
    while i < len(name):
        if name.startswith("St", i):  # std:: abbreviation
            parts.append("std")
            i += 2
            continue
        m = _DIGITS.match(name, i)
        if m is None:
            break
        length = int(m.group())
        start = m.end()
        ident = name[start:start + length]
        if len(ident) < length or not ident:
            break
        parts.append(ident)
        i = start + length
        if not nested:
            break
    return "::".join(parts) or None


# --- Parsing a C++ signature (leniently: any text parses, unknown parts stay text)


@dataclass(slots=True)
class _Seg:
    """One `::` component: a name, its template arguments, and (for functions) parameters."""

    name: str
    args: list[_Arg] | None = None
    params: list[_Arg] | None = None
    quals: str = ""

    @property
    def is_local(self) -> bool:
        """A lambda, unnamed type or call operator: only meaningful with what encloses it."""
        return self.name.startswith("{") or self.name == "operator()"


@dataclass(slots=True)
class _QName:
    segs: list[_Seg] = field(default_factory=list)
    start: int = 0
    end: int = 0


_Part = _QName | str
_Arg = list[_Part]


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.n = len(text)

    def balanced(self, i: int) -> int:
        """Index after the bracket group opening at `i` (iterative: any depth), or the end."""
        stack = [_CLOSE[self.s[i]]]
        i += 1
        while i < self.n and stack:
            c = self.s[i]
            if c == stack[-1]:
                stack.pop()
            elif c in _CLOSE and not (c == "<" and stack[-1] != ">"):
                stack.append(_CLOSE[c])
            i += 1
        return i

    def seq(self, i: int, stops: str, depth: int) -> tuple[_Arg, int]:
        """Parts up to a character of `stops` outside brackets (or the end)."""
        parts: _Arg = []
        raw: list[str] = []
        s, n = self.s, self.n
        while i < n:
            c = s[i]
            if c in stops:
                break
            if c.isalpha() or c in "_$" or c == "{" or s.startswith(_ANON, i):
                if depth >= MAX_DEPTH:
                    j = self.balanced(i) if c == "{" else i + 1
                    raw.append(s[i:j])
                    i = j
                    continue
                if raw:
                    parts.append("".join(raw))
                    raw = []
                q, i = self.qname(i, depth)
                parts.append(q)
                continue
            if c in "(<[{":
                j = self.balanced(i)
                raw.append(s[i:j])
                i = j
                continue
            raw.append(c)
            i += 1
        if raw:
            parts.append("".join(raw))
        return parts, i

    def qname(self, i: int, depth: int) -> tuple[_QName, int]:
        s, n = self.s, self.n
        q = _QName(start=i)
        while i < n:
            if s.startswith(_ANON, i):
                name = _ANON
                i += len(_ANON)
            elif s[i] == "{":
                j = self.balanced(i)
                name = s[i:j]
                i = j
            elif s.startswith("operator()", i):
                name = "operator()"
                i += len(name)
            else:
                m = _IDENT.match(s, i)
                if m is None:
                    break
                name = m.group()
                i = m.end()
            seg = _Seg(name)
            if i < n and s[i] == "<" and name != "operator":
                seg.args, i = self.list(i, ">", depth)
            if i < n and s[i] == "(":
                seg.params, i = self.list(i, ")", depth)
                for qual in _QUALIFIERS:
                    if s.startswith(qual, i) and not s[i + len(qual):i + len(qual) + 1].isalnum():
                        seg.quals += qual
                        i += len(qual)
            q.segs.append(seg)
            if s.startswith("::", i):
                i += 2
                continue
            break
        q.end = i
        return q, i

    def list(self, i: int, close: str, depth: int) -> tuple[list[_Arg], int]:
        """Arguments of the group opening at `i`, up to its `close`."""
        args: list[_Arg] = []
        i += 1
        while True:
            arg, i = self.seq(i, "," + close, depth + 1)
            args.append(arg)
            if i >= self.n:
                return args, i
            if self.s[i] == close:
                return args, i + 1
            i += 1  # a comma


# --- Rendering


@dataclass(frozen=True, slots=True)
class _Style:
    inner_short: bool = False
    """Inside template arguments: no parameter lists, no namespaces, lambda chains collapsed."""
    outer_short: bool = False
    """The kernel's own namespaces dropped."""
    elided: frozenset[int] = frozenset()
    """Template arguments (by `id`) rendered as `…`."""


def _render_arg(arg: _Arg, style: _Style, depth: int) -> str:
    out = []
    for part in arg:
        out.append(_render_qname(part, style, depth, inner=True) if isinstance(part, _QName) else part)
    return _SPACES.sub(" ", "".join(out)).strip()


def _render_list(args: list[_Arg], style: _Style, depth: int) -> str:
    out: list[str] = []
    for a in args:
        if id(a) in style.elided:
            if not out or out[-1] != ELLIPSIS:
                out.append(ELLIPSIS)
        else:
            out.append(_render_arg(a, style, depth))
    return ", ".join(out)


_MAX_ELISIONS = 256


def _slots(q: _QName, style: _Style, depth: int = 0, *, inner: bool = False) -> list[tuple[int, int, int]]:
    """(depth, order, id) of every template argument that the style renders, in text order."""
    out: list[tuple[int, int, int]] = []
    short = style.inner_short if inner else style.outer_short
    for seg in _short_segs(q.segs) if short else q.segs:
        for arg in seg.args or ():
            out.append((depth + 1, 0, id(arg)))
            for part in arg:
                if isinstance(part, _QName):
                    out.extend(_slots(part, style, depth + 1, inner=True))
    return [(d, k, key) for k, (d, _, key) in enumerate(out)] if depth == 0 else out


def _short_segs(segs: list[_Seg]) -> list[_Seg]:
    """The last named component and the innermost local one after it (lambda chains collapsed)."""
    segs = [s for s in segs if s.name != "operator()"]
    named = [k for k, s in enumerate(segs) if not s.is_local]
    if not named:
        return segs[-1:]
    last = named[-1]
    kept = [segs[last]]
    if last + 1 < len(segs) and segs[last].args is None:  # X<op>::{lambda(int)#1}: X<op> says it
        kept.append(segs[-1])
    return kept


def _render_qname(q: _QName, style: _Style, depth: int, *, inner: bool, params: bool = True) -> str:
    short = style.inner_short if inner else style.outer_short
    segs = _short_segs(q.segs) if short else q.segs
    out = []
    for k, seg in enumerate(segs):
        text = seg.name
        if seg.args is not None:
            text += "<" + _render_list(seg.args, style, depth + 1) + ">"
        last = k == len(segs) - 1
        if seg.params is not None and not (inner and style.inner_short) and (params or not last):
            text += "(" + _render_list(seg.params, style, depth + 1) + ")" + seg.quals
        out.append(text)
    return "::".join(out)


def _squash(text: str) -> str:
    """Text without the spaces that do not separate two words: for comparing spellings."""
    return re.sub(r"(?<![\w$]) | (?![\w$])", "", text)


# --- The label


def _signature(text: str) -> tuple[_QName, bool] | None:
    """The kernel's qualified name in `text`, and whether `text` is a signature (return type,
    name, parameter list); None when no qualified name covers the text."""
    parts, _ = _Parser(text).seq(0, "", 0)
    names = [p for p in parts if isinstance(p, _QName)]
    if not names:
        return None
    kernel = names[-1]
    rest = text[kernel.end:].strip()
    is_signature = kernel.segs[-1].params is not None and rest in ("", "const")
    if is_signature:
        return kernel, True
    if len(names) == 1 and kernel.start == 0 and kernel.end == len(text):
        return kernel, False
    return None


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
            prefix = _mangled_prefix(text)
            return with_hash(prefix or text, raw)
        text = demangled
    sig = _signature(text)
    if sig is None:
        core = text
        full = text
    else:
        kernel, is_signature = sig
        core = text[kernel.start:kernel.end]
        full = _render_qname(kernel, _Style(), 0, inner=False, params=not is_signature)
        if is_signature:
            last = kernel.segs[-1]
            core = core[: len(core) - _params_length(text, kernel, last)]
        if _squash(full) != _squash(core):  # the parser did not reproduce it: count as dropped
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
        label = _render_qname(kernel, style, 0, inner=False, params=not is_signature)
    if len(label) > room:
        # Elide template arguments one at a time, the most deeply nested first and, among equals,
        # the last first: the kernel's name and its leading arguments stay readable longest.
        style = _SHORTER[-1]
        slots = sorted(_slots(kernel, style), key=lambda slot: (-slot[0], -slot[1]))
        elided: set[int] = set()
        for _depth, _order, key in slots[:_MAX_ELISIONS]:
            elided.add(key)
            label = _render_qname(kernel, replace(style, elided=frozenset(elided)), 0, inner=False,
                                  params=not is_signature)
            if len(label) <= room:
                break
    return with_hash(label, raw)


_SHORTER = (_Style(inner_short=True), _Style(inner_short=True, outer_short=True))
"""Lossy renderings, tried in order (module doc, 5a and 5b)."""


def _params_length(text: str, kernel: _QName, last: _Seg) -> int:
    """Characters of the kernel's parameter list (and qualifiers) at the end of its core."""
    core = text[kernel.start:kernel.end]
    # The parameter list opens at the last top-level "(" of the core's last component.
    depth = 0
    for k in range(len(core) - 1, -1, -1):
        c = core[k]
        if c in ")>]}":
            depth += 1
        elif c in "(<[{":
            depth -= 1
            if depth == 0 and c == "(":
                return len(core) - k
    return 0


class KernelNamer:
    """`kernel_label` with a bounded cache (least recently used names are forgotten).

    Labels are a pure function of the name: the cache only saves the work. Not thread-safe:
    one writer (the service's window job) uses it.
    """

    def __init__(self, max_entries: int = 20_000) -> None:
        self._max = max_entries
        self._cache: OrderedDict[str, str] = OrderedDict()

    def __call__(self, raw: str) -> str:
        key = raw if len(raw) <= 1024 else "\0" + hashlib.blake2b(
            raw.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
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
