"""Kernel names -> bounded, readable, stable label values (warpwatch.names.labels).

The raw names below are real: each is copied from a trace under ../shared/traces/ (the trace
is named next to it), or read from that trace when it is too long to paste. The expected labels
are written by hand from the rules in the module doc.
"""

from __future__ import annotations

import random
import re
import tarfile
from pathlib import Path

import pytest

from support.paths import HTA, SHARED_TRACES
from warpwatch.names.demangle import demangle
from warpwatch.names.labels import (
    MAX_LABEL_LENGTH,
    KernelNamer,
    clean,
    kernel_label,
    label_text,
    middle_cut,
    name_hash,
)
from warpwatch.trace import read_trace

ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
SAMPLED = HTA / "timeline_analysis/sampled_rank-0.json.gz"
NCCL = HTA / "nccl_parser_config/nccl_data.json.gz"
MI250 = HTA / "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
HASHED = re.compile(r"~[0-9a-f]{8}$")


def names_in(path: Path) -> list[str]:
    return sorted({launch.name for launch in read_trace(path).launches})


def first_name(path: Path, prefix: str) -> str:
    return next(n for n in names_in(path) if n.startswith(prefix))


def squash(text: str) -> str:
    """A spelling without the spaces that separate no two words (`> >` and `>>` are the same)."""
    return re.sub(r"(?<![\w$]) | (?![\w$])", "", text)


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        # alexnet: the return type and the parameter list go; template arguments stay whole
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
            "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1>>",
        ),
        # nccl_data: `(anonymous namespace)` is part of the name, not a parameter list
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, "
            "float const*, int, int, int, bool const*, int, bool)",
            "(anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>",
        ),
        # sampled_rank-0
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align1>"
            "(cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align1::Params)",
            "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align1>",
        ),
        # rank0 (negative_queue_length_values_check)
        (
            "void cub::DeviceScanInitKernel<cub::ScanTileState<int, true> >(cub::ScanTileState<int, true>, int)",
            "cub::DeviceScanInitKernel<cub::ScanTileState<int, true>>",
        ),
        # triton_example and alexnet: plain names pass unchanged
        ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0"),
        ("ampere_sgemm_32x32_sliced1x4_tn", "ampere_sgemm_32x32_sliced1x4_tn"),
    ],
)
def test_a_kernel_that_fits_keeps_its_whole_name_and_template_arguments(raw: str, label: str) -> None:
    assert kernel_label(raw) == label
    assert not HASHED.search(label)


def test_a_return_type_before_the_name_is_dropped() -> None:
    raw = first_name(SAMPLED, "std::enable_if<!(false), void>::type internal::gemvx::kernel<")
    label = kernel_label(raw)
    assert (
        label
        == "kernel<int, int, float, float, float, float, false, true, true, false, 7, cublasGemvParams<…>>~"
        + name_hash(raw)
    )  # too long whole: namespaces, then the nested arguments went


def test_lambdas_become_the_op_they_are_in_and_its_dtype() -> None:
    """mi250: direct_copy_kernel_cuda's float lambda inside gpu_kernel_impl_nocast, 500+ characters."""
    raw = first_name(
        MI250,
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<"
        "at::native::direct_copy_kernel_cuda",
    )
    assert len(raw) > 500
    label = kernel_label(raw)
    assert label == (
        "at::native::elementwise_kernel<128, 2, gpu_kernel_impl_nocast<direct_copy_kernel_cuda::{lambda(float)#1}>>~"
        + name_hash(raw)
    )


def test_the_functor_of_an_elementwise_kernel_tells_kernels_apart() -> None:
    """The issue's H100 Qwen table showed four identical cut rows; sampled_rank-0 has 39 of these."""
    raws = [n for n in names_in(SAMPLED) if n.startswith("void at::native::vectorized_elementwise_kernel<4, ")]
    labels = {kernel_label(n) for n in raws}
    assert len(labels) == len(raws) == 39
    assert (
        "at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "at::detail::Array<char*, 1>>" in labels
    )
    assert any(
        label.startswith("at::native::vectorized_elementwise_kernel<4, masked_fill_kernel::{lambda(float, ")
        for label in labels
    )


def test_composable_kernel_keeps_its_kernel_type() -> None:
    """A CK tile FMHA kernel as ROCm names it (the form the issue saw fold into `ck_tile::kentry~…`)."""
    raw = (
        "void ck_tile::kentry<256, 2, ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<"
        "ck_tile::BlockFmhaPipelineProblem<ck_tile::half_t, ck_tile::half_t, ck_tile::half_t, float, float, "
        "ck_tile::half_t, unsigned short, float, ck_tile::half_t, ck_tile::half_t, ck_tile::TileFmhaShape<"
        "ck_tile::sequence<128, 128, 32, 128, 32, 128>>, false>>, ck_tile::Default2DEpilogue<"
        "ck_tile::Default2DEpilogueProblem<float, ck_tile::half_t, false, false, true>>>>"
        "(ck_tile::FmhaFwdKernel<>::FmhaFwdBatchModeKargs)"
    )
    label = kernel_label(raw)
    assert label.startswith("kentry<256, 2, FmhaFwdKernel<BlockFmhaPipelineQRKSVSAsync<")
    assert label.endswith("~" + name_hash(raw))
    assert len(label) <= MAX_LABEL_LENGTH


def test_a_mangled_name_is_demangled() -> None:
    raw = first_name(NCCL, "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution")
    assert len(raw) > 1000
    text = demangle(raw)
    assert text is not None
    assert text.startswith(
        "void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::conv::kernel::"
        "ImplicitGemmConvolution<cutlass_cudnn_train::conv::threadblock::ImplicitGemmMultistage<"
        "cutlass_cudnn_train::gemm::GemmShape<128, 128, 32>, "
    )  # literals as c++filt prints them
    label = kernel_label(raw)
    assert label.startswith("Kernel<ImplicitGemmConvolution<")
    assert label.endswith("~" + name_hash(raw)) and len(label) <= MAX_LABEL_LENGTH


def test_a_mangled_name_and_its_demangled_spelling_get_the_same_label() -> None:
    assert (
        kernel_label("_ZN2at6native18elementwise_kernelILi128ELi4EEEvi")
        == kernel_label("void at::native::elementwise_kernel<128, 4>(int)")
        == "at::native::elementwise_kernel<128, 4>"
    )


def test_a_mangled_name_that_would_expand_exponentially_is_not_demangled() -> None:
    """Each level is a pointer to a function taking the previous level twice (back-references):
    24 levels are 260 characters mangled and over 500 MB demangled."""
    mangled = "_Z1fPi"
    subst = ["S_"] + [f"S{i:X}_" for i in range(200)]
    last = 0
    for level in range(24):
        mangled += f"PFv{subst[last]}{subst[last]}E"
        last = 2 * level + 2
    assert len(mangled) < 300
    assert demangle(mangled) is None
    assert kernel_label(mangled) == "f~" + name_hash(mangled)


def test_a_long_plain_name_is_cut_in_the_middle_and_ends_in_a_stable_hash() -> None:
    # alexnet: 156 characters, no template arguments to remove
    raw = (
        "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4"
        "_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn"
    )
    label = kernel_label(raw)
    assert len(label) == MAX_LABEL_LENGTH
    room = MAX_LABEL_LENGTH - 9
    head = (room - 1) * 2 // 3
    assert label == raw[:head] + "…" + raw[-(room - 1 - head) :] + "~" + name_hash(raw)
    assert name_hash(raw) == "a30f052a"  # BLAKE2s: the same on every machine and in every run


def test_dropped_characters_add_the_hash() -> None:
    assert kernel_label("void my\x00kernel\x7f<int, 2>(int)\n") == "mykernel<int, 2>~" + name_hash(
        "void my\x00kernel\x7f<int, 2>(int)\n"
    )
    assert kernel_label("foo<int") == "foo<int>~" + name_hash("foo<int")  # unbalanced: not reproduced as is


def test_empty_and_reserved_names() -> None:
    assert kernel_label("") == "unnamed~" + name_hash("")
    assert kernel_label("other") == "other~" + name_hash("other")


def test_hostile_names_stay_bounded() -> None:
    for raw in ("<" * 100_000, "a<" * 50_000 + ">" * 50_000, "x" * 2_000_000, "(" * 10_000, "_Z" + "N" * 10_000):
        label = kernel_label(raw)
        assert 0 < len(label) <= MAX_LABEL_LENGTH and HASHED.search(label)


def test_label_text_cuts_long_values_with_a_hash() -> None:
    assert label_text("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    long = "x" * 300
    assert label_text(long) == middle_cut(long, MAX_LABEL_LENGTH - 9) + "~" + name_hash(long)


def test_the_namer_cache_is_bounded() -> None:
    namer = KernelNamer(max_entries=10)
    for i in range(100):
        namer(f"kernel_{i}")
    assert len(namer) == 10


# --- Every shared trace


def _trace_files(tmp: Path) -> list[Path]:
    files = sorted(p for p in SHARED_TRACES.rglob("*") if p.name.endswith((".json", ".json.gz")))
    with tarfile.open(SHARED_TRACES / "facebookresearch__param/et_replay/tests/inputs/dlrm_kineto.tar.gz") as tf:
        tf.extractall(tmp, members=[m for m in tf.getmembers() if m.name.endswith(".json")], filter="data")
    return files + sorted(tmp.rglob("*.json"))


@pytest.fixture(scope="module")
def shared_names(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The kernel names of each shared trace (each trace is one process)."""
    return {str(p): names_in(p) for p in _trace_files(tmp_path_factory.mktemp("dlrm"))}


def _core(raw: str) -> str:
    """What a label without hash must be: the name without return type and parameter list, written
    here with plain string scanning (independently of the module's parser)."""
    text = clean(raw)
    if not text.endswith(")"):
        return text
    depth = 0
    for k in range(len(text) - 1, -1, -1):  # the parameter list: the last top-level (...)
        depth += {")": 1, "(": -1}.get(text[k], 0)
        if depth == 0:
            break
    text = text[:k]
    depth = 0
    for k in range(len(text) - 1, -1, -1):  # the return type: up to the last top-level space
        c = text[k]
        depth += {">": 1, "<": -1, ")": 1, "(": -1}.get(c, 0)
        if c == " " and depth == 0 and not text[:k].endswith("(anonymous") and not text[k + 1 :].startswith(">"):
            return text[k + 1 :]
    return text


@pytest.mark.slow
def test_every_shared_trace_labels_are_unique_per_process_stable_and_hashed_only_when_cut(
    shared_names: dict[str, list[str]],
) -> None:
    total = hashed = 0
    everywhere: dict[str, str] = {}
    for path, raws in shared_names.items():
        labels = {raw: kernel_label(raw) for raw in raws}
        assert len(set(labels.values())) == len(raws), path  # distinct kernels, distinct labels
        for order in range(3):  # any order of first sight gives the same labels
            shuffled = raws[:]
            random.Random(order).shuffle(shuffled)
            namer = KernelNamer()
            assert {raw: namer(raw) for raw in shuffled} == labels
        for raw, label in labels.items():
            assert 0 < len(label) <= MAX_LABEL_LENGTH and label.isprintable(), raw
            assert everywhere.setdefault(raw, label) == label  # the same in every file
            if HASHED.search(label):
                hashed += 1
                assert label.endswith("~" + name_hash(raw))
            else:
                text = demangle(raw) or raw
                assert squash(label) == squash(_core(text)), raw  # nothing dropped but noise
        total += len(raws)
    print(f"\nshared traces: {total} labels (per process), {hashed} with a hash ({hashed / total:.1%})")
    assert hashed < total / 2
