"""Kernel names are untrusted: any string gets a valid `kernel` label, in bounded time and memory.

Names that once hung the label code or raised out of it are labelled in a child process with a limit
on its address space and a timeout for each answer (`LabelWorker`), so that a regression fails here
instead of hanging the suite or swapping the machine. Expected labels are written by hand from the rules in the
`warpwatch.names.labels` module doc; demangled spellings are c++filt's (binutils 2.40).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import itanium_demangler
import pytest

from support.labels_worker import LabelWorker
from support.tracebuild import kernel, span, trace_doc, write
from warpwatch.names.demangle import demangle
from warpwatch.names.labels import KernelNamer, kernel_label, name_hash


@pytest.fixture(scope="module")
def worker() -> Iterator[LabelWorker]:
    child = LabelWorker(memory=1 << 30, timeout=20)
    yield child
    child.close()


# --- Item: one kernel name with a non-ASCII letter hung the label code until out of memory
# (the parser's loop took any letter for the start of a name that only an ASCII letter could begin).

SURROGATES = "void caf\udcc3\udca9_kernel<int>(int)"
"""Bytes that were not UTF-8 (`café` in Latin-1), kept as lone surrogates by a surrogateescape read."""


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        ("void at::native::café_kernel<float>(int)", "at::native::café_kernel<float>"),
        ("void at::native::cafe\u0301_kernel<float>(int)", "at::native::cafe\u0301_kernel<float>"),  # é as e + U+0301
        ("void at::ñ::k<int>(int)", "at::ñ::k<int>"),
        ("void 日本::カーネル<int, 2>(float*)", "日本::カーネル<int, 2>"),
        ("void ядро<float, 8>(float const*, int)", "ядро<float, 8>"),
        ("void k٣<int>(int)", "k٣<int>"),  # an Arabic-Indic digit continues a name
        ("triton_poi_fused_🔥_0", "triton_poi_fused_🔥_0"),  # an emoji is no letter: the name is its own core
        ("void k<🔥, é>(int)", "k<🔥, é>"),
        ("é", "é"),
        (SURROGATES, "caf_kernel<int>~" + name_hash(SURROGATES)),  # dropped characters: the hash
        # GCC 12 writes `void café(int)` and `void 日本::k<float>(float)` so: lengths in UTF-8 bytes
        ("_Z5caféi", "café"),
        ("_ZN6日本1kIfEEvT_", "日本::k<float>"),
    ],
)
def test_a_name_with_letters_of_any_script_gets_its_label_in_bounded_time_and_memory(
    worker: LabelWorker, raw: str, label: str
) -> None:
    assert worker.label(raw) == label


def test_mangled_lengths_count_utf8_bytes_as_cxxfilt_does() -> None:
    assert demangle("_Z5caféi") == "café(int)"  # c++filt _Z5caféi
    assert demangle("_ZN6日本1kIfEEvT_") == "void 日本::k<float>(float)"
    assert demangle("_Z4caféi") is None  # a length that cuts `é` in two: c++filt refuses it too
    assert kernel_label("_Z4caféi") == "_Z4caféi~" + name_hash("_Z4caféi")


# --- Item: a mangled name with a local lambda (torch's normal_ kernel) raised NotImplementedError
# out of the demangler and failed every round.

NORMAL = (
    "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu_17e44f7d43distribution_elementwise_grid_"
    "stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIffLm4EPNS_17CUDAGeneratorImplEZZZNS4_13"
    "normal_kernelIS7_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENKUlvE0_clEvEUlfE_EEvRNS_18TensorIteratorBaseET2_"
    "T3_EUlP24curandStatePhilox4_32_10E0_ZNS1_27distribution_nullary_kernelIffLi4ES7_SM_SF_EEvSH_SI_RKSJ_T4_"
    "EUlifE_EEviNS_15PhiloxCudaStateET1_SI_"
)
"""Verbatim from DeepSeek's published H800 training trace (github.com/deepseek-ai/profile-data,
train.json at 4496024, 4 launches). c++filt: `void at::native::(anonymous namespace)::
distribution_elementwise_grid_stride_kernel<float, 4, at::native::templates::cuda::normal_and_transform
<float, float, 4ul, ...>(...)::{lambda(curandStatePhilox4_32_10*)#2}, ...>(int, at::PhiloxCudaState, ...)`."""


def test_torchs_normal_kernel_with_local_lambdas_is_labelled_by_its_leading_name_and_hash() -> None:
    with pytest.raises(NotImplementedError):  # what failed every round
        itanium_demangler.parse(NORMAL)
    assert demangle(NORMAL) is None
    label = "at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel~" + name_hash(NORMAL)
    assert kernel_label(NORMAL) == label
    assert KernelNamer()(NORMAL) == label


@pytest.mark.parametrize(
    ("raw", "error", "label"),
    [
        # GCC 12 wrote these four (c++filt: `ns::run()::{lambda(float)#1}::operator()(float) const`,
        # `void launch<ns::run()::{lambda(float)#1}>(...)`, `decltype ({parm#1}+(1)) f<int>(int)`,
        # `void g<1>(A<(1)+(1)>)`)
        ("_ZZN2ns3runEvENKUlfE_clEf", NotImplementedError, "_ZZN2ns3runEvENKUlfE_clEf"),
        ("_Z6launchIZN2ns3runEvEUlfE_EvT_", NotImplementedError, "launch"),
        ("_Z1fIiEDTplfp_Li1EET_", NotImplementedError, "f"),
        ("_Z1gILi1EEv1AIXplT_Li1EEE", NotImplementedError, "g"),
        # garbage the demangler trips over in other ways
        ("_Z3fooUt_", NotImplementedError, "foo"),
        ("_Z0Bt", AttributeError, "_Z0Bt"),
        ("_ZIDc0C", KeyError, "_ZIDc0C"),
        ("_ZStSaaSS", TypeError, "std"),
    ],
)
def test_whatever_the_demangler_raises_the_name_is_labelled_by_its_leading_name_and_hash(
    raw: str, error: type[Exception], label: str
) -> None:
    with pytest.raises(error):
        itanium_demangler.parse(raw)
    assert demangle(raw) is None
    assert kernel_label(raw) == label + "~" + name_hash(raw)


def test_warpwatch_analyze_labels_every_kernel_of_a_trace_with_such_names(tmp_path: Path) -> None:
    """The real CLI over a trace holding the names that failed: exit 0, every kernel labelled."""
    names = [NORMAL, "void at::native::café_kernel<float>(int)", "_ZZN2ns3runEvENKUlfE_clEf", "plain_kernel"]
    events = [span(0, 1000)] + [kernel(n, ts=100.0 + 20 * k) for k, n in enumerate(names)]
    path = write(tmp_path / "names.json", trace_doc(events))
    proc = subprocess.run(
        [sys.executable, "-m", "warpwatch", "analyze", "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    (trace,) = json.loads(proc.stdout)["traces"]
    assert {k["name"]: k["label"] for k in trace["kernels"]} == {
        NORMAL: "at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel~" + name_hash(NORMAL),
        names[1]: "at::native::café_kernel<float>",
        names[2]: names[2] + "~" + name_hash(names[2]),
        "plain_kernel": "plain_kernel",
    }


# --- Names built to cost time or memory: each gets a bounded label with the hash


def _base36(n: int) -> str:
    digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    out = ""
    while True:
        n, d = divmod(n, 36)
        out = digits[d] + out
        if n == 0:
            return out


def template_bomb(levels: int) -> str:
    """`template<class T> void f(int*, F0, F1, ...)`, each Fk a pointer to a function taking the
    previous one twice (`PFv<S>_<S>_E`: back-references, S_ is f, S0_ is int*, and level k adds two
    entries, a function type and its pointer): 24 levels are 262 characters and 2^24 copies of
    `int*` demangled. Its template argument is what made the demangler copy every back-reference
    inside its own parse, before any size could be checked (92 s for 21 levels, doubling with each)."""
    name = "_Z1fIiEvPi"
    for level in range(levels):
        ref = f"S{_base36(2 * level)}_"  # entry 2*level + 1: level-1's pointer (int* for level 0)
        name += f"PFv{ref}{ref}E"
    return name


HOSTILE = [
    template_bomb(24),
    template_bomb(60),
    "_Z" + "1" * 5000,  # int() refuses a length of over 4,300 digits (ValueError)
    "_Z" + "N1a" * 10000,  # deep nesting, longer than any name that is demangled
    "_ZN" + "1a" * 2040 + "Ev",  # deep nesting that is demangled: 4,085 characters (12 s, now 1 s)
    "_Z" + "P" * 4000 + "i",  # recursion deeper than Python's limit inside the demangler
    "_Z" + "I" * 4000,
    "é<" * 30_000 + ">" * 30_000,  # nesting in a name the parser reads (under MAX_PARSED characters)
    "日本::" * 20_000,
    "é" * 100_000,  # over MAX_PARSED: cut and hashed
    "\u0301" * 50_000,  # combining marks with nothing to combine with
    "\udcff" * 10_000,  # nothing left once lone surrogates are removed
]


def test_names_built_to_cost_time_or_memory_get_a_bounded_label_with_the_hash(worker: LabelWorker) -> None:
    labels = [worker.label(raw) for raw in HOSTILE]
    for raw, label in zip(HOSTILE, labels, strict=True):
        assert 0 < len(label) <= 128 and label.endswith("~" + name_hash(raw)), raw[:40]
    assert labels[0] == "f~" + name_hash(HOSTILE[0])  # too large demangled: its leading name
    assert labels[1] == "f~" + name_hash(HOSTILE[1])
    assert labels[11] == "unnamed~" + name_hash(HOSTILE[11])


def test_a_name_with_thousands_of_template_arguments_is_labelled_in_bounded_time(worker: LabelWorker) -> None:
    """21,001 template arguments (63 KB, under MAX_PARSED): the last 256 (MAX_ELISIONS) become one
    `…`, which is still too long, so the middle is cut: 78 characters, `…`, the last 40. Eliding
    one more at a time rendered the name 256 times (27 s); the bound is generous (it takes 1 s)."""
    wide = "f<" + "a, " * 21_000 + "a>"
    head = "f<" + "a, " * 25 + "a"  # 2 + 75 + 1 = 78
    tail = ", " + "a, " * 12 + "…>"  # 2 + 36 + 2 = 40
    worker.timeout = 10
    assert worker.label(wide) == head + "…" + tail + "~" + name_hash(wide)
