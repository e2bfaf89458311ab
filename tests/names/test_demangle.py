"""`cppdemangle.demangle` against the real c++filt (GNU binutils): the same text but for spacing.

The oracle is the system's c++filt, run on each name here (`--no-recurse-limit`: without it,
binutils 2.40 refuses the 1.6 KB cuDNN names of the shared traces). Spellings are compared with
`squash` (c++filt writes `> >` where demangle writes `>>`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from support.paths import SHARED_TRACES
from warpwatch.names.demangle import demangle
from warpwatch.names.parse import squash
from warpwatch.trace import read_trace

CXXFILT = shutil.which("c++filt")
GXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(CXXFILT is None, reason="c++filt not found (Debian package binutils)")


def cxxfilt(names: list[str]) -> list[str]:
    assert CXXFILT is not None
    # as arguments: reading stdin, c++filt takes a non-ASCII byte for the end of a symbol
    out = subprocess.run(
        [CXXFILT, "--no-recurse-limit", *names], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return out.splitlines()


def shared_mangled_names(tmp: Path) -> list[str]:
    files = sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))
    with tarfile.open(SHARED_TRACES / "facebookresearch__param/et_replay/tests/inputs/dlrm_kineto.tar.gz") as tf:
        tf.extractall(tmp, members=[m for m in tf.getmembers() if m.name.endswith(".json")], filter="data")
    files += sorted(tmp.rglob("*.json"))
    return sorted(
        {launch.name for path in files for launch in read_trace(path).launches if launch.name.startswith("_Z")}
    )


@pytest.mark.slow
def test_every_mangled_kernel_name_of_the_shared_traces_demangles_as_cxxfilt_does(tmp_path: Path) -> None:
    names = shared_mangled_names(tmp_path)
    demangled = {n: demangle(n) for n in names}
    checked = [n for n in names if demangled[n] is not None]
    assert len(checked) == len(names) == 2  # nccl_data's two cuDNN kernels, 1.6 KB each
    for name, expected in zip(checked, cxxfilt(checked), strict=True):
        assert squash(demangled[name] or "") == squash(expected), name


KERNELS = r"""
#include <array>
#include <cstddef>
#include <utility>
namespace at { namespace native {
template <typename T> struct FillFunctor { T value; };
template <typename T, int N> struct Array { T data[N]; };
template <int vec, typename F, typename A> void vectorized_elementwise_kernel(int, F, A) {}
using Fill = FillFunctor<float>;
using Chars = Array<char*, 1>;
template void vectorized_elementwise_kernel<4, Fill, Chars>(int, Fill, Chars);
template <bool B, unsigned U, long L, unsigned long long ULL, int I> void literals() {}
template void literals<true, 5u, -3l, 7ull, -1>();
template void literals<false, 0u, 0l, 0ull, 0>();
namespace { template <typename T> void softmax_warp_forward(T*, const T*, int) {} }
void use() { softmax_warp_forward<float>(nullptr, nullptr, 0); }
template <typename... Ts> void pack(Ts...) {}
template void pack<int, float, char>(int, float, char);
template void pack<>();
template <typename... Ts> void pack_refs(const Ts&...) {}
template void pack_refs<int, double>(const int&, const double&);
template <typename T> void qualified(T) {}
template void qualified<const volatile int*>(const volatile int*);
template void qualified<const float* __restrict__>(const float* __restrict__);
template <typename T> void cast_to(std::pair<T, std::size_t>, void (*)(T const&, T&&)) {}
template void cast_to<float>(std::pair<float, std::size_t>, void (*)(float const&, float&&));
}}
namespace 日本 { template <class T> void カーネル(T) {} template void カーネル<float>(float); }
void café(int) {}
// not demangled (the demangler raises): a lambda in a template argument, a lambda's call
// operator (local names), and a template argument written as an expression
template <class F> void launch(F f) { f(1.0f); }
void run() { launch([](float) {}); }
template <class T, std::size_t N> void arr(std::array<T, N> const&) {}
template void arr<float, 3>(std::array<float, 3> const&);
"""
NOT_DEMANGLED = {"_Z6launchIZ3runvEUlfE_EvT_", "_ZZ3runvENKUlfE_clEf", "_Z3arrIfLm3EEvRKSt5arrayIT_XT0_EE"}


@pytest.mark.skipif(GXX is None, reason="g++ not found")
def test_kernel_like_names_gcc_writes_demangle_as_cxxfilt_does(tmp_path: Path) -> None:
    assert GXX is not None
    (tmp_path / "k.cpp").write_text(KERNELS)
    subprocess.run([GXX, "-std=c++17", "-c", "k.cpp", "-o", "k.o"], cwd=tmp_path, check=True, timeout=120)
    symbols = subprocess.run(
        ["nm", "-P", "--defined-only", "k.o"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    names = sorted({line.split()[0] for line in symbols if line.startswith("_Z")})
    assert set(names) >= NOT_DEMANGLED and len(names) == 17
    for name, expected in zip(names, cxxfilt(names), strict=True):
        if name in NOT_DEMANGLED:
            assert demangle(name) is None, name
        else:
            assert squash(demangle(name) or name) == squash(expected), name


@pytest.mark.slow
def test_demangling_is_the_same_in_every_process() -> None:
    """itanium-demangler keeps qualifiers in a frozenset, whose order follows string hashing, which
    every process seeds anew: `int const volatile*` came out in any order."""
    names = ["_Z9qualifiedIPVKiEvT_", "_Z1fIPrKfEvv", "_Z1fIPrVKfEvv"]
    code = "import sys; from warpwatch.names.demangle import demangle; print([demangle(n) for n in sys.argv[1:]])"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code, *names],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(6)
    }
    assert outputs == {str(cxxfilt(names)) + "\n"}
