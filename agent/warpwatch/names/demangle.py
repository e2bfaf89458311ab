"""C++ kernel names: an Itanium-mangled name (`_Z...`) -> its demangled text (for `labels`).

`demangle` uses `itanium-demangler`, a pure Python demangler, so the result is the same on every
machine (it does not depend on the host's libstdc++ as `__cxa_demangle` would). The text is
c++filt's but for spacing (`>>`): literals as CUPTI and c++filt write them (`2`, `-3l`, `5u`,
`true`), `(anonymous namespace)`, qualifiers in c++filt's order, parameter packs expanded,
identifiers in any script (mangled lengths count UTF-8 bytes).

Mangled names can expand exponentially (back-references), so a name longer than `MAX_MANGLED`, or
one whose demangled text would exceed `MAX_DEMANGLED`, is not demangled; nor is one the demangler
cannot read (it raises on local names `Z...E` and lambdas `Ul...E_`, as in torch's `normal_`
kernels), whatever it raises. `mangled_prefix` reads the leading qualified name of any of them.
"""

from __future__ import annotations

import operator
import re
from itertools import compress
from typing import Any

import itanium_demangler as dm

from .parse import ANONYMOUS

MAX_MANGLED = 4096
"""Longer mangled names are not demangled (the demangler's time grows faster than linearly)."""
MAX_DEMANGLED = 64 * 1024
"""Mangled names whose demangled text would be longer than this are not demangled."""
_DIGITS = re.compile(r"[0-9]{1,9}(?![0-9])")
"""A mangled length: ASCII digits only (as c++filt reads them); more than 9 is no real length, and
`int()` refuses over 4,300 digits."""
_NESTED = re.compile(r"N[rVK]*[RO]?")
"""A nested name and its qualifiers (`NK`: a const member function)."""
_ANON_NAME = re.compile(r"(?<![\w$.])_GLOBAL_[._$]N[\w$.]*")
"""How compilers name an anonymous namespace (`_GLOBAL__N_1`), which c++filt writes `(anonymous namespace)`."""
_LITERAL_CAST = re.compile(r"\((bool|int|unsigned int|long|unsigned long|long long|unsigned long long|char)\)(n?\d+)")
_CV = ("const", "volatile", "restrict")
_CV_RUN = re.compile(r"(?<![\w$])(?:const|volatile|restrict)(?: (?:const|volatile|restrict))+(?![\w$])")
"""Qualifiers that itanium-demangler writes in the order of a frozenset, which changes from one
process to the next (string hashing is randomised): written in c++filt's order instead."""
_LITERAL_SUFFIX = {
    "int": "",
    "unsigned int": "u",
    "long": "l",
    "unsigned long": "ul",
    "long long": "ll",
    "unsigned long long": "ull",
}


def demangle(name: str) -> str | None:
    """The demangled text of an Itanium-mangled name, or None: not mangled, invalid, too large, or
    a form that itanium-demangler does not read (local names `Z...E` and lambdas `Ul...E_`, as in
    torch's `normal_` kernels, expressions, decltype) or special names (vtables, thunks)."""
    if not name.startswith("_Z") or len(name) > MAX_MANGLED or name.startswith(("_ZT", "_ZG")):
        return None
    try:
        ast = _parse_encoding(_Cursor(_bytes_view(name), 2))
        # Template parameters (`T_`) become their arguments and argument packs are expanded only
        # once the tree is known to be small: both copy shared parts (back-references), which takes
        # time exponential in the name (a 226-character name took 92 s inside the demangler's parse).
        if ast is None or _tree_size(ast, {}) > MAX_DEMANGLED:
            return None
        if ast.kind == "func":
            ast = _expand_parameter_packs(dm._expand_template_args(ast))
            if _tree_size(ast, {}) > MAX_DEMANGLED:
                return None
        text = str(dm._expand_arg_packs(ast))
    except Exception:  # any failure of the demangler (NotImplementedError for local names, or a
        return None  # bug of its own) leaves the name mangled, for `labels` to label it otherwise
    if len(text) > MAX_DEMANGLED:
        return None
    try:
        text = text.encode("latin-1").decode("utf-8", "surrogatepass")
    except UnicodeError:  # a length that cuts a character in two: no compiler wrote it
        return None
    text = _CV_RUN.sub(lambda m: " ".join(sorted(m.group().split(), key=_CV.index)), text)
    # `_Z0` is an empty name, and `_Z3 ab` one with a space: no label value begins with a space
    return _ANON_NAME.sub(ANONYMOUS, _LITERAL_CAST.sub(_literal, text)).strip() or None


def _bytes_view(name: str) -> str:
    """`name` with one character per UTF-8 byte: mangled lengths count bytes (GCC writes
    `void café(int)` as `_Z5caféi`, 5 bytes and 4 characters), and so does c++filt."""
    return name.encode("utf-8", "surrogatepass").decode("latin-1")


def _expand_parameter_packs(func: Any) -> Any:
    """A function's parameter packs (`Ts...`, `Ts const&...`) as the types they stand for, as c++filt
    writes them: itanium-demangler expands only `Ts&&...`, and drops its `&&`."""
    arg_tys = []
    for arg in func.arg_tys:
        types = _pack_types(arg.value) if arg.kind == "expand_arg_pack" else None
        arg_tys.extend([arg] if types is None else types)
    return func._replace(arg_tys=tuple(arg_tys))


def _pack_types(node: Any) -> list[Any] | None:
    """The types of a pack expansion's pattern (`const T&` of `<int, float>`: `const int&`,
    `const float&`), or None when its pack is not known."""
    if node.kind in ("tpl_arg_pack", "tpl_args"):
        return list(node.value)
    if node.kind in ("pointer", "lvalue", "rvalue", "cv_qual"):
        inner = _pack_types(node.value)
        return None if inner is None else [node._replace(value=t) for t in inner]
    return None


class _Cursor(dm._Cursor):  # type: ignore[misc]  # the library has no types
    """itanium-demangler's cursor with a substitution table that finds a node in constant time.

    The library adds a node to the table unless an equal one is in it, which it finds by comparing
    with every entry in turn, whole tuples each time: cubic in the nesting (12 s for the 4 KB name
    `_ZN1a1a...1aEv`). Here each node gets the number of its structure (equal nodes, equal numbers),
    computed once per node object, so that sharing costs nothing either."""

    def __init__(self, raw: str, pos: int) -> None:
        super().__init__(raw, pos)
        self._numbers: dict[int, int] = {}  # id(node) -> number of its structure
        self._structures: dict[Any, int] = {}  # structure (child numbers) -> number
        self._nodes: list[Any] = []  # keeps numbered nodes alive: their ids are never reused
        self._in_table: set[int] = set()

    def add_subst(self, node: Any) -> None:
        number = self._number(node)
        if number not in self._in_table:
            self._in_table.add(number)
            self._substs[len(self._substs)] = node

    def _number(self, node: Any) -> int:
        number = self._numbers.get(id(node))
        if number is None:
            if isinstance(node, (tuple, frozenset)):
                # The children's numbers, looked up with C loops: a nested name's every prefix is a
                # new tuple of the same children but one (4 KB of `1a` make two million lookups).
                ids = list(map(id, node))
                for child in compress(node, map(operator.not_, map(self._numbers.__contains__, ids))):
                    self._number(child)
                children = map(self._numbers.__getitem__, ids)
                structure: Any = tuple(children) if isinstance(node, tuple) else (frozenset, frozenset(children))
            else:
                structure = (type(node).__name__, node)
            number = self._structures.setdefault(structure, len(self._structures))
            self._numbers[id(node)] = number
            self._nodes.append(node)
        return number


def _parse_encoding(cursor: Any) -> Any:
    """itanium-demangler's `_parse_encoding` without its expansion of template parameters (see
    `demangle`): a name, and for a function its return type (templates only) and parameter types."""
    name = dm._parse_name(cursor)
    if name is None or cursor.at_end():
        return name
    ret_ty = None
    if (
        name.kind == "qual_name"
        and name.value[-1].kind == "tpl_args"
        and name.value[-2].kind not in ("ctor", "dtor", "oper_cast")
    ):
        ret_ty = dm._parse_type(cursor)
        if ret_ty is None:
            return None
    arg_tys = []
    while not cursor.at_end():
        arg_ty = dm._parse_type(cursor)
        if arg_ty is None:
            return None
        arg_tys.append(arg_ty)
    return dm.FuncNode("func", name, tuple(arg_tys), ret_ty) if arg_tys else name


def _literal(m: re.Match[str]) -> str:
    """`(int)2` -> `2`, `(long)n3` -> `-3l`, `(bool)1` -> `true`: literals as CUPTI and c++filt print them."""
    kind, value = m.group(1), m.group(2).replace("n", "-")
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
    `cutlass_cudnn_train::Kernel`), for names that are not demangled; names read as c++filt reads
    them (lengths in UTF-8 bytes, `_GLOBAL__N_1` -> `(anonymous namespace)`)."""
    if not name.startswith("_Z"):
        return None
    raw = _bytes_view(name)
    nested = _NESTED.match(raw, 2)
    i = nested.end() if nested else 2
    parts: list[str] = []
    while i < len(raw):
        if raw.startswith("St", i):  # std:: abbreviation
            parts.append("std")
            i += 2
            continue
        m = _DIGITS.match(raw, i)
        if m is None:
            break
        length = int(m.group())
        start = m.end()
        ident = raw[start : start + length]
        if len(ident) < length or not ident:
            break
        try:
            parts.append(_ANON_NAME.sub(ANONYMOUS, ident.encode("latin-1").decode("utf-8", "surrogatepass")))
        except UnicodeError:  # a length that cuts a character in two
            break
        i = start + length
        if not nested:
            break
    return "::".join(parts).strip() or None
