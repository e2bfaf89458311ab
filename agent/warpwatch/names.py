"""Kernel names -> short, stable, bounded Prometheus label values.

Raw kernel names are C++ signatures up to several KiB long (return type, template
arguments, parameter lists, lambdas). A label must be readable, identical for every launch
of the same kernel, and bounded. `normalize_kernel_name` applies, in order:

1. control characters (C0, C1), lone surrogates (from invalid UTF-8 decoded with
   `surrogateescape`) and other unprintable format characters are removed and runs of white
   space become one space;
2. a mangled name (`_Z...`) is reduced to its leading qualified name:
   `_ZN19cutlass_cudnn_train6KernelINS_...` -> `cutlass_cudnn_train::Kernel`;
3. the parameter list (the first `(` outside template brackets, except
   `(anonymous namespace)`) and everything after it is dropped;
4. template arguments (`<...>`, nested) are dropped, except when there is exactly one and it
   is a type name: then it *is* the kernel's identity and is kept, itself normalised:
   `cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align1>` stays as is,
   `at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, ...>` becomes
   `at::native::vectorized_elementwise_kernel`;
5. a return type before the name (`void `, `std::enable_if<...>::type `) is dropped;
6. a name longer than `MAX_LABEL_LENGTH` is cut and ends in `~` + 8 hex digits of the
   BLAKE2s hash of the full raw name (stable across runs and machines).

Different raw names can normalise to the same label (`vectorized_elementwise_kernel` has
hundreds of instantiations). `KernelNamer` keeps labels distinct: the first raw name seen for
a label keeps it; any other raw name with the same label gets the `~hash` suffix. The namer's
memory is bounded (least recently used labels are forgotten). The label `other` is reserved for
folded kernels: a kernel whose name normalises to `other` gets the suffix too. Raw names are
untrusted and may be megabytes long: normalising is linear in the name's length, and the namer
remembers a long raw name by its digest, not by its text.

`label_text` applies steps 1 and 6 to other strings that become label values (GPU names).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict

MAX_LABEL_LENGTH = 96
HASH_DIGITS = 8
RESERVED = frozenset({"other"})

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
"""Removed from labels: C0 and C1 controls, zero-width and bidirectional formatting characters,
lone surrogates (which cannot be encoded as UTF-8 at all)."""
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
_DIGITS = re.compile(r"\d+")
_KEY_MAX = 1024
"""Raw names longer than this are remembered by the namer as a digest."""
_SPACES = re.compile(r"\s+")
_ANON = "(anonymous namespace)"
_ANON_MARK = "\x01"
_OPEN = {"<": ">", "(": ")", "[": "]", "{": "}"}
_TYPE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_:\x01]*(<.*>)?$")
_LITERALS = frozenset({"true", "false"})


def name_hash(raw: str) -> str:
    """8 hex digits identifying a raw kernel name (BLAKE2s, stable across runs)."""
    return hashlib.blake2s(raw.encode("utf-8", "surrogatepass"), digest_size=HASH_DIGITS // 2).hexdigest()


def with_hash(label: str, raw: str) -> str:
    """`label~hash`, cut so that the whole stays within `MAX_LABEL_LENGTH`."""
    room = MAX_LABEL_LENGTH - HASH_DIGITS - 1
    return f"{label[:room]}~{name_hash(raw)}"


def _demangle_prefix(name: str) -> str | None:
    """The leading qualified name of an Itanium-mangled symbol, or None if it is not one."""
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
        m = _DIGITS.match(name, i)  # not name[i:]: slicing made this quadratic in the name's length
        if m is None:
            break
        length = int(m.group())
        start = i + len(m.group())
        ident = name[start:start + length]
        if len(ident) < length or not ident:
            break
        parts.append(ident)
        i = start + length
        if not nested:
            break
    return "::".join(parts) or None


def _split_top(text: str) -> tuple[str, list[str]]:
    """Strip brackets from `text`: returns the name outside all brackets (cut at the parameter
    list) and the top-level template argument lists' arguments of the last `<...>` seen."""
    out: list[str] = []
    args: list[str] = []
    stack: list[str] = []
    current: list[str] = []
    for ch in text:
        if stack:
            if ch == stack[-1]:
                stack.pop()
                if not stack:
                    args.append("".join(current).strip())
                    current = []
                    continue
            elif ch in _OPEN:
                stack.append(_OPEN[ch])
            elif ch == "," and len(stack) == 1 and stack[0] == ">":
                args.append("".join(current).strip())
                current = []
                continue
            if stack and stack[0] == ">":
                current.append(ch)
            continue
        if ch == "(":
            break  # the parameter list: everything from here on is dropped
        if ch == "<":
            stack.append(">")
            args = []
            current = []
            out.append("<>")  # a marker where template arguments stood
            continue
        if ch in _OPEN:
            stack.append(_OPEN[ch])
            continue
        out.append(ch)
    return "".join(out), args


def _strip(text: str, depth: int = 0) -> str:
    name, args = _split_top(text)
    # Keep a single type-name template argument (cutlass::Kernel<cutlass_80_..._align4>).
    keep = ""
    if name.endswith("<>") and len(args) == 1 and depth < 3:
        arg = args[0]
        if _TYPE_NAME.match(arg) and arg not in _LITERALS:
            keep = "<" + _strip(arg, depth + 1) + ">"
    # The last space-separated token is the name; earlier ones are a return type.
    tokens = name.split(" ")
    base = tokens[-1] if tokens[-1] else name
    if keep and base.endswith("<>"):
        base = base[:-2] + keep
    return base.replace("<>", "").strip(":")


def clean(raw: str) -> str:
    """The raw name without control characters and with single spaces."""
    return _SPACES.sub(" ", _CONTROL.sub("", raw)).strip()


def base_label(raw: str) -> str:
    """Steps 1-5 of the module doc: the readable part, not yet length-capped."""
    text = clean(raw)
    demangled = _demangle_prefix(text)
    if demangled is not None:
        return demangled
    marked = text.replace(_ANON, _ANON_MARK)
    label = _strip(marked).replace(_ANON_MARK, _ANON)
    return label or text or "unnamed"


def printable(text: str) -> str:
    """`text` for a terminal: every character that is not printable (controls, line separators,
    bidirectional and zero-width formatting, lone surrogates) shown as a `\\xNN`/`\\uNNNN` escape."""
    return _UNPRINTABLE.sub(_escape_char, text)


def _escape_char(m: re.Match[str]) -> str:
    c = m.group(0)
    if c.isprintable():
        return c
    code = ord(c)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def label_text(raw: str) -> str:
    """Any untrusted string as a label value: `clean`, and cut with a `~hash` beyond `MAX_LABEL_LENGTH`."""
    text = clean(raw)
    return with_hash(text, raw) if len(text) > MAX_LABEL_LENGTH else text


def normalize_kernel_name(raw: str) -> str:
    """A readable, stable label of at most `MAX_LABEL_LENGTH` characters (module doc, 1-6)."""
    label = base_label(raw)
    if len(label) > MAX_LABEL_LENGTH:
        return with_hash(label, raw)
    return label


class KernelNamer:
    """Labels for raw kernel names, distinct for distinct names (see module doc).

    Not thread-safe: one writer (the service's window job) uses it.
    """

    def __init__(self, max_entries: int = 20_000) -> None:
        self._max = max_entries
        self._owner: OrderedDict[str, str] = OrderedDict()  # label -> key of the first raw name
        self._cache: OrderedDict[str, str] = OrderedDict()  # key of a raw name -> label

    def __call__(self, raw: str) -> str:
        key = raw if len(raw) <= _KEY_MAX else "\0" + hashlib.blake2b(
            raw.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        label = normalize_kernel_name(raw)
        owner = self._owner.get(label)
        if label in RESERVED or (owner is not None and owner != key):
            result = with_hash(label, raw)
        else:
            self._owner[label] = key
            self._owner.move_to_end(label)
            result = label
        self._cache[key] = result
        self._trim()
        return result

    def _trim(self) -> None:
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        while len(self._owner) > self._max:
            self._owner.popitem(last=False)

    def __len__(self) -> int:
        return len(self._cache)
