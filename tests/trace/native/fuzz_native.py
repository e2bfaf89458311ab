"""Fuzzes the compiled modules as loaded from the paths given (tests/trace/test_native_sanitizers.py builds
them with AddressSanitizer and UBSan and runs this under them):
`python fuzz_native.py GPUSCAN_SO WINDOWMATH_SO PIECES SEED [GPUSCAN_NO_SIMD_SO]`.

Edits real Kineto events (several edits per piece, cuts at random ends, tokens the scanner looks
for; `balanced` on a random range of each), and gives the analysis loops random intervals and
windows. With a second scanner (built
without SIMD: memmem, as on machines without SSE2), every piece must get the same answer from
both. Exits 0 having printed how many inputs it ran; a sanitizer report aborts it."""

from __future__ import annotations

import ctypes
import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the package `support`
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/trace/: test_gpuscan


def load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(gpuscan_so: str, windowmath_so: str, count: int, seed: int, plain_so: str | None = None) -> None:
    import test_gpuscan as real  # (the real events it cuts pieces from)

    from warpwatch.model import KernelLaunch

    gpuscan = load("_gpuscan", gpuscan_so)
    windowmath = load("_windowmath", windowmath_so)
    plain = load("_gpuscan", plain_so) if plain_so else None
    rng = random.Random(seed)
    bases = [real.piece(real.KERNEL), real.piece(real.MEMCPY), b"[" + real.piece(real.SPAN) + b"]"]
    alphabet = b'{}[]",:0123456789.-+eE \\/ntfalsruhipcatkernelTrace\x00\x1f\xff'
    tokens = [b'"cat": "kernel"', b'"cat":"Trace"', b"{", b"}", b'"\\u', b"1e308", b"[" * 80, b'"hip', b"-0"]
    pieces = answered = 0
    while pieces < count:
        b = bytearray(rng.choice(bases))
        for _ in range(rng.randrange(1, 8)):
            at = rng.randrange(len(b) + 1)
            op = rng.randrange(4)
            if op == 0 and at < len(b):
                b[at] = alphabet[rng.randrange(len(alphabet))]
            elif op == 1:
                b.insert(at, alphabet[rng.randrange(len(alphabet))])
            elif op == 2 and at < len(b):
                del b[at]
            else:
                b[at:at] = rng.choice(tokens)
        if rng.random() < 0.3:
            del b[rng.randrange(len(b) + 1) :]
        # A buffer of exactly its size (with PYTHONMALLOC=malloc, one malloc'd block, no NUL after
        # it): a read one byte past the end is a heap-buffer-overflow for ASan.
        exact = ctypes.create_string_buffer(bytes(b), len(b)) if b else b""
        got = gpuscan.scan(exact, len(b), KernelLaunch, {}, {})
        answered += got is not None
        if plain is not None:
            assert repr(plain.scan(exact, len(b), KernelLaunch, {}, {})) == repr(got), bytes(b)[:3000]
        lo = rng.randrange(len(b) + 1)  # the structure check on a random range (structure.py)
        hi = rng.randrange(lo, len(b) + 1)
        ok = gpuscan.balanced(exact, lo, hi)
        if plain is not None:
            assert plain.balanced(exact, lo, hi) == ok, (bytes(b)[lo:hi][:3000], ok)
        pieces += 1
        if pieces % 50 == 0:
            n = rng.randrange(0, 60)
            intervals = [(rng.uniform(-1e3, 1e3), rng.uniform(-1e3, 1e3)) for _ in range(n)]
            windowmath.busy_time(intervals, rng.choice([0.0, -1.0, 5.0, 1e3]), rng.randrange(0, 6))
            launches = [
                KernelLaunch(
                    "k",
                    0,
                    rng.uniform(0, 100),
                    rng.choice([0.0, 1.0, 200.0]),
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                    None,
                )
                for _ in range(n)
            ]
            groups = rng.randrange(1, 4)
            windowmath.group_sums([rng.randrange(groups) for _ in range(n)], groups, launches, 0.0, 100.0, 100.0)
    print(f"fuzzed {pieces} pieces, {answered} answered")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), *sys.argv[5:6])
