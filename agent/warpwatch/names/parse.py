"""C++ kernel names: a lenient parser of demangled signatures (for `labels`).

`Parser` reads any text: qualified names (`a::b<...>::c(...)`, identifiers in any script),
template arguments, parameter lists and lambdas (`{lambda(float)#1}`) become a tree; whatever else
is kept as text. It never fails, is linear in the text's length, and keeps nesting deeper than
`MAX_DEPTH` as text. `render_qname` writes a tree back, whole or shortened (`Style`). Demangling
is `demangle`'s.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

MAX_DEPTH = 40
"""Template or parameter nesting deeper than this is kept as text."""
ELLIPSIS = "…"

_SPACES = re.compile(r"\s+")
_IDENT_START = r"(?:[^\W\d]|\$)"
"""A letter of any script, `_` or `$`: C++ identifiers may be Unicode (GCC and Clang write them in UTF-8)."""
_IDENT_AT = re.compile(_IDENT_START)
_IDENT_REST = re.compile(r"[\w$.]*")
_IDENT = re.compile(_IDENT_START + _IDENT_REST.pattern)
ANONYMOUS = "(anonymous namespace)"
_QUALIFIERS = (" const", " volatile", " &&", " &")
_CLOSE = {"<": ">", "(": ")", "[": "]", "{": "}"}


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
            # The same test as `qname`'s first component, so that `qname` always moves on (a letter
            # that `qname` did not take looped here forever, growing `parts` until out of memory).
            if c == "{" or s.startswith(ANONYMOUS, i) or _IDENT_AT.match(c):
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
            if s.startswith(ANONYMOUS, i):
                name = ANONYMOUS
                i += len(ANONYMOUS)
            elif s[i] == "{":
                j = self.balanced(i)
                name = s[i:j]
                i = j
            elif s.startswith("operator()", i):
                name = "operator()"
                i += len(name)
            else:
                end = _ident_end(s, i)
                if end == i:
                    break
                name = s[i:end]
                i = end
            seg = Seg(name)
            if i < n and s[i] == "<" and name != "operator":
                seg.args, i = self.list(i, ">", depth)
            if i < n and s[i] == "(":
                seg.params, i = self.list(i, ")", depth)
                for qual in _QUALIFIERS:
                    if s.startswith(qual, i) and not s[i + len(qual) : i + len(qual) + 1].isalnum():
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


def _ident_end(s: str, i: int) -> int:
    """Index after the identifier at `i` (`i` when none starts there). Combining marks continue an
    identifier (`é` written as `e` + U+0301), as Unicode's XID_Continue has them."""
    m = _IDENT.match(s, i)
    if m is None:
        return i
    j = m.end()
    while j < len(s) and s[j] >= "\x80" and unicodedata.category(s[j]).startswith("M"):
        j += 1
        m = _IDENT_REST.match(s, j)
        if m is not None:
            j = m.end()
    return j


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
    rest = text[kernel.end :].strip()
    is_signature = kernel.segs[-1].params is not None and rest in ("", "const")
    if is_signature:
        return kernel, True
    if len(names) == 1 and kernel.start == 0 and kernel.end == len(text):
        return kernel, False
    return None


def params_length(text: str, kernel: QName, last: Seg) -> int:
    """Characters of the kernel's parameter list (and qualifiers) at the end of its core."""
    core = text[kernel.start : kernel.end]
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
