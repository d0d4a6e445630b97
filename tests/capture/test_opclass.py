"""Engine categories and FLOP formulas of real-hardware ops."""

from __future__ import annotations

import pytest

from nprof.capture.opclass import engine_of, op_flops


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("aten::addmm", "tensor"),
        ("aten::linear", "tensor"),
        ("aten::bmm", "tensor"),
        ("aten::baddbmm", "tensor"),
        ("aten::einsum", "tensor"),
        ("aten::conv2d", "tensor"),
        ("AddmmBackward0", "tensor"),
        ("ampere_sgemm_128x64_tn", "tensor"),
        ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize96x64x32", "tensor"),
        ("aten::gelu", "scalar"),
        ("aten::relu_", "scalar"),
        ("aten::silu", "scalar"),
        ("aten::_softmax", "scalar"),
        ("aten::exp", "scalar"),
        ("GeluBackward0", "scalar"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>", "scalar"),
        ("aten::add_", "vector"),
        ("aten::sum", "vector"),
        ("aten::native_layer_norm", "vector"),
        ("aten::copy_", "vector"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps>>", "vector"),
        ("aten::expand", "other"),
        ("aten::as_strided", "other"),
        ("aten::empty", "other"),
        ("aten::upsample_bilinear2d", "other"),
        ("aten::_convert_indices_from_coo_to_csr", "other"),
        ("cudaLaunchKernel", "other"),
    ],
)
def test_engine_of(name: str, engine: str) -> None:
    assert engine_of(name) == engine


def test_matmul_family_flops() -> None:
    assert op_flops("aten::mm", [[32, 64], [64, 128]]) == 2 * 32 * 64 * 128
    assert op_flops("aten::addmm", [[128], [32, 64], [64, 128], [], []]) == 2 * 32 * 64 * 128
    assert op_flops("aten::bmm", [[4, 8, 16], [4, 16, 32]]) == 2 * 4 * 8 * 16 * 32
    assert op_flops("aten::baddbmm", [[4, 8, 32], [4, 8, 16], [4, 16, 32], [], []]) == 2 * 4 * 8 * 16 * 32
    assert op_flops("aten::matmul", [[3, 4, 8, 16], [16, 32]]) == 2 * 12 * 8 * 16 * 32
    assert op_flops("aten::linear", [[5, 7, 64], [128, 64], [128]]) == 2 * 35 * 64 * 128
    assert op_flops("aten::dot", [[100], [100]]) == 200


def test_conv_and_attention_flops() -> None:
    conc = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]
    out = (32 + 2 - 3) // 2 + 1
    assert op_flops("aten::conv2d", [[8, 3, 32, 32], [16, 3, 3, 3], [16], [], [], [], []], conc) == (
        2 * 8 * 16 * out * out * 3 * 9
    )
    grouped = ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "False", "[0, 0]", "4"]
    assert op_flops("aten::convolution", [[1, 8, 10, 10], [8, 2, 3, 3], [], [], [], [], [], [], []], grouped) == (
        2 * 1 * 8 * 8 * 8 * 2 * 9
    )
    q = [2, 4, 16, 8]
    assert op_flops("aten::scaled_dot_product_attention", [q, q, q]) == 2 * (2 * 8 * 16 * 16 * 8)


def test_unknown_or_shapeless_ops_have_no_flops() -> None:
    assert op_flops("aten::gelu", [[32, 128]]) == 0
    assert op_flops("aten::mm", None) == 0
    assert op_flops("aten::mm", [[], []]) == 0
    assert op_flops("aten::addmm", [["x"], "y"]) == 0
