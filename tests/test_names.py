"""Kernel names -> bounded, readable, stable label values (warpwatch.names).

The raw names below are real: each is copied from a trace under ../shared/traces/ (the trace
is named next to it), or read from that trace when it is too long to paste.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import HTA
from warpwatch.names import (
    MAX_LABEL_LENGTH,
    KernelNamer,
    name_hash,
    normalize_kernel_name,
)
from warpwatch.trace import read_trace

ALEXNET = HTA / "critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
SAMPLED = HTA / "timeline_analysis/sampled_rank-0.json.gz"
NCCL = HTA / "nccl_parser_config/nccl_data.json.gz"
MI250 = HTA / "amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"


def names_in(path: Path) -> list[str]:
    return sorted({launch.name for launch in read_trace(path).launches})


def first_name(path: Path, prefix: str) -> str:
    return next(n for n in names_in(path) if n.startswith(prefix))


@pytest.mark.parametrize(
    ("raw", "label"),
    [
        # alexnet: template arguments and the parameter list go, the qualified name stays
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
         "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
         "at::native::vectorized_elementwise_kernel"),
        # nccl_data: `(anonymous namespace)` is part of the name, not a parameter list
        ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, "
         "float const*, int, int, int, bool const*, int, bool)",
         "(anonymous namespace)::softmax_warp_forward"),
        # sampled_rank-0: a single type-name template argument is the kernel's identity and stays
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align1>"
         "(cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align1::Params)",
         "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nt_align1>"),
        # rank0 (negative_queue_length_values_check): the kept argument is itself normalised
        ("void cub::DeviceScanInitKernel<cub::ScanTileState<int, true> >(cub::ScanTileState<int, true>, int)",
         "cub::DeviceScanInitKernel<cub::ScanTileState>"),
        # triton_example and alexnet: plain names pass unchanged
        ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0"),
        ("ampere_sgemm_32x32_sliced1x4_tn", "ampere_sgemm_32x32_sliced1x4_tn"),
    ],
)
def test_signatures_become_their_qualified_name(raw: str, label: str) -> None:
    assert normalize_kernel_name(raw) == label


def test_a_return_type_before_the_name_is_dropped() -> None:
    raw = first_name(SAMPLED, "std::enable_if<!(false), void>::type internal::gemvx::kernel<")
    assert len(raw) > 400
    assert normalize_kernel_name(raw) == "internal::gemvx::kernel"


def test_lambdas_inside_template_arguments_do_not_leak_into_the_label() -> None:
    raw = first_name(MI250, "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<")
    assert "{lambda" in raw
    assert normalize_kernel_name(raw) == "at::native::elementwise_kernel"


def test_a_mangled_name_becomes_its_leading_qualified_name() -> None:
    raw = first_name(NCCL, "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution")
    assert len(raw) > 1000
    assert normalize_kernel_name(raw) == "cutlass_cudnn_train::Kernel"


def test_a_long_name_is_cut_and_ends_in_a_stable_hash_of_the_full_name() -> None:
    # alexnet: 156 characters, no template arguments to remove
    raw = ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4"
           "_warpsize2x2x1_g1_tensor16x8x8_alignc4_execute_kernel_cudnn")
    label = normalize_kernel_name(raw)
    assert len(label) == MAX_LABEL_LENGTH
    assert label == raw[: MAX_LABEL_LENGTH - 9] + "~" + name_hash(raw)
    assert name_hash(raw) == "a30f052a"  # BLAKE2s: the same on every machine and in every run


def test_control_characters_are_removed() -> None:
    assert normalize_kernel_name("void my\x00kernel\x7f<int, 2>(int)\n") == "mykernel"
    assert normalize_kernel_name("\x1bampere\x07_sgemm_32x32_sliced1x4_tn\x00") == "ampere_sgemm_32x32_sliced1x4_tn"


def test_an_empty_name_gets_a_placeholder() -> None:
    assert normalize_kernel_name("") == "unnamed"


def test_the_namer_keeps_labels_distinct_for_distinct_names() -> None:
    """alexnet holds two instantiations of fft2d_r2c_32x32: the first one seen keeps the bare label."""
    a, b = [n for n in names_in(ALEXNET) if n.startswith("void fft2d_r2c_32x32<")][:2]
    namer = KernelNamer()
    assert namer(a) == "fft2d_r2c_32x32"
    assert namer(b) == "fft2d_r2c_32x32~" + name_hash(b)
    assert namer(a) == "fft2d_r2c_32x32"  # stable on later calls
    assert namer(b) == "fft2d_r2c_32x32~" + name_hash(b)


def test_other_is_reserved_for_folded_kernels() -> None:
    assert KernelNamer()("other") == "other~" + name_hash("other")


def test_the_namer_memory_is_bounded() -> None:
    namer = KernelNamer(max_entries=10)
    for i in range(100):
        namer(f"kernel_{i}")
    assert len(namer) == 10


@pytest.mark.parametrize("trace", [ALEXNET, SAMPLED, NCCL, MI250], ids=lambda p: p.parent.name)
def test_every_real_name_gets_a_short_printable_distinct_label(trace: Path) -> None:
    namer = KernelNamer()
    raws = names_in(trace)
    labels = [namer(n) for n in raws]
    assert len(set(labels)) == len(raws)
    for label in labels:
        assert 0 < len(label) <= MAX_LABEL_LENGTH
        assert label.isprintable()
        assert "(" not in label.replace("(anonymous namespace)", "")
