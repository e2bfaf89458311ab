"""C++ kernel names: demangling and a lenient parser of demangled signatures (for `labels`).

`demangle` turns an Itanium-mangled name (`_Z...`) into text with `itanium-demangler`, a pure
Python demangler, so the result is the same on every machine (it does not depend on the host's
libstdc++ as `__cxa_demangle` would). Mangled names can expand exponentially (back-references),
so a name longer than `MAX_MANGLED`, or one whose demangled text would exceed `MAX_DEMANGLED`, is
not demangled. Literals are written as CUPTI and c++filt write them (`2`, `5u`, `true`).

`Parser` reads any text: qualified names (`a::b<...>::c(...)`), template arguments, parameter lists
and lambdas (`{lambda(float)#1}`) become a tree; whatever else is kept as text. It never fails, is
linear in the text's length, and keeps nesting deeper than `MAX_DEPTH` as text. `render_qname`
writes a tree back, whole or shortened (`Style`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_MANGLED = 4096
"""Longer mangled names are not demangled (the demangler's time grows faster than linearly)."""
MAX_DEMANGLED = 64 * 1024
"""Mangled names whose demangled text would be longer than this are not demangled."""
MAX_DEPTH = 40
"""Template or parameter nesting deeper than this is kept as text."""
ELLIPSIS = "…"

_SPACES = re.compile(r"\s+")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.]*")
_DIGITS = re.compile(r"\d+")
_ANON = "(anonymous namespace)"
_QUALIFIERS = (" const", " volatile", " &&", " &")
_CLOSE = {"<": ">", "(": ")", "[": "]", "{": "}"}
_LITERAL_CAST = re.compile(r"\((bool|int|unsigned int|long|unsigned long|long long|unsigned long long|char)\)(-?\d+)")
_LITERAL_SUFFIX = {"int": "", "unsigned int": "u", "long": "l", "unsigned long": "ul",
                   "long long": "ll", "unsigned long long": "ull"}


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


def mangled_prefix(name: str) -> str | None:
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
class Seg:
    """One `::` component: a name, its template arguments, and (for functions) parameters."""

    name: str
    args: list[Arg] | None = None
    params: list[Arg] | None = None
    quals: str = ""

    @property
    def is_local(self) -> bool:
        """A lambda, unnamed type or call operator: only meaningful with what encloses it."""
        return self.name.startswith("{") or self.name == "operator()"


@dataclass(slots=True)
class QName:
    segs: list[Seg] = field(default_factory=list)
    start: int = 0
    end: int = 0


Part = QName | str
Arg = list[Part]


class Parser:
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

    def seq(self, i: int, stops: str, depth: int) -> tuple[Arg, int]:
        """Parts up to a character of `stops` outside brackets (or the end)."""
        parts: Arg = []
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

    def qname(self, i: int, depth: int) -> tuple[QName, int]:
        s, n = self.s, self.n
        q = QName(start=i)
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
            seg = Seg(name)
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

    def list(self, i: int, close: str, depth: int) -> tuple[list[Arg], int]:
        """Arguments of the group opening at `i`, up to its `close`."""
        args: list[Arg] = []
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
class Style:
    inner_short: bool = False
    """Inside template arguments: no parameter lists, no namespaces, lambda chains collapsed."""
    outer_short: bool = False
    """The kernel's own namespaces dropped."""
    elided: frozenset[int] = frozenset()
    """Template arguments (by `id`) rendered as `…`."""


def _render_arg(arg: Arg, style: Style, depth: int) -> str:
    out = []
    for part in arg:
        out.append(render_qname(part, style, depth, inner=True) if isinstance(part, QName) else part)
    return _SPACES.sub(" ", "".join(out)).strip()


def _render_list(args: list[Arg], style: Style, depth: int) -> str:
    out: list[str] = []
    for a in args:
        if id(a) in style.elided:
            if not out or out[-1] != ELLIPSIS:
                out.append(ELLIPSIS)
        else:
            out.append(_render_arg(a, style, depth))
    return ", ".join(out)


def slots(q: QName, style: Style, depth: int = 0, *, inner: bool = False) -> list[tuple[int, int, int]]:
    """(depth, order, id) of every template argument that the style renders, in text order."""
    out: list[tuple[int, int, int]] = []
    short = style.inner_short if inner else style.outer_short
    for seg in _short_segs(q.segs) if short else q.segs:
        for arg in seg.args or ():
            out.append((depth + 1, 0, id(arg)))
            for part in arg:
                if isinstance(part, QName):
                    out.extend(slots(part, style, depth + 1, inner=True))
    return [(d, k, key) for k, (d, _, key) in enumerate(out)] if depth == 0 else out


def _short_segs(segs: list[Seg]) -> list[Seg]:
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


def render_qname(q: QName, style: Style, depth: int, *, inner: bool, params: bool = True) -> str:
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


def squash(text: str) -> str:
    """Text without the spaces that do not separate two words: for comparing spellings."""
    return re.sub(r"(?<![\w$]) | (?![\w$])", "", text)


def signature(text: str) -> tuple[QName, bool] | None:
    """The kernel's qualified name in `text`, and whether `text` is a signature (return type,
    name, parameter list); None when no qualified name covers the text."""
    parts, _ = Parser(text).seq(0, "", 0)
    names = [p for p in parts if isinstance(p, QName)]
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


def params_length(text: str, kernel: QName, last: Seg) -> int:
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
