"""The kernels `scripts/nki_compat.py` runs: where each lives, its inputs, and a numpy reference (our own).

Each `Case` names a public file (in a source tree that `nki_compat.py` extracts
into a temp dir), the kernel function in it, how to build its inputs at the
published ("full") size and at a quick ("small") size, and a plain numpy
reference. `expect` is a fragment of the error a kernel must be refused with
(kernels the NKI docs show as invalid). `PYTEST` lists the unit-test files
run with pytest (their own numpy references).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# source name -> (mirror directory, git ref, sub-path extracted)
SOURCES = {
    "sdk": ("/work/.mirror/aws-neuron+aws-neuron-sdk/repo", "v2.26.0", "general/nki"),
    "samples": ("/work/.mirror/aws-neuron+nki-samples/repo", "HEAD", ""),
    # the last nki-samples commit with the reference kernels (removed in c4b806e) and their unit tests
    "samples-ref": ("/work/.mirror/aws-neuron+nki-samples/repo", "c4b806e^", ""),
}


@dataclass
class Case:
    """One kernel run: `func` of `path` in `source`, inputs from `make(dims, rng)`, checked against `ref`."""

    name: str
    source: str
    path: str
    func: str
    make: Callable[[dict[str, int], np.random.Generator], tuple[Any, ...]]
    ref: Callable[..., Any]
    small: dict[str, int] = field(default_factory=dict)
    full: dict[str, int] = field(default_factory=dict)
    grid: tuple[int, ...] = ()
    expect: str = ""  # a fragment of the error real NKI gives (the kernel is invalid)
    jit: bool = False  # the public function is undecorated (its driver wraps it): run it through nki.jit
    tol: float = 2e-2  # max |out - ref| / max |ref|
    more: Callable[[Any], tuple[Any, ...]] | None = None  # more arguments, made from the loaded public module
    decode: Callable[[Any], Any] | None = None  # the output as the reference gives it (e.g. packed bytes decoded)


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.random(shape, dtype=np.float32)


def _sym(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.random(shape, dtype=np.float32) - 0.5) * 2


def softmax_rows(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention_qt(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Attention tutorial layout: q, k, v are [d_head, seqlen]; out [seqlen, d_head]."""
    return softmax_rows(q.T.astype(np.float64) @ k) @ v.T


def sd_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Stable-diffusion attention: q, k, v [seqlen, d]; scores scaled by 1/8."""
    return softmax_rows((q.astype(np.float64) * 0.125) @ k.T) @ v


def layernorm(x: np.ndarray, eps: float, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def rmsnorm(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    return a / np.sqrt((a * a).mean(axis=1, keepdims=True)) * g


def mamba(delta: np.ndarray, u: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Selective scan: h_t = exp(delta_t * A) h_{t-1} + delta_t * B_t * u_t; y_t = sum_n C_t h_t."""
    batch, channels, seq = delta.shape
    out = np.zeros((batch, channels, seq))
    for bi in range(batch):
        d_a = np.exp(delta[bi][:, None, :] * a[:, :, None])  # [C, N, S]
        d_bu = delta[bi][:, None, :] * b[bi][None, :, :] * u[bi][:, None, :]
        h = np.zeros(d_a.shape[:2])
        for t in range(seq):
            h = d_a[:, :, t] * h + d_bu[:, :, t]
            out[bi, :, t] = (h * c[bi][None, :, t]).sum(axis=1)
    return out


def pool2d(x: np.ndarray, k: int, how: str) -> np.ndarray:
    c, h, w = x.shape
    blocks = x.reshape(c, h // k, k, w // k, k)
    return blocks.mean(axis=(2, 4)) if how == "mean" else blocks.max(axis=(2, 4))


def _bf16(x: np.ndarray) -> np.ndarray:
    import ml_dtypes

    return x.astype(ml_dtypes.bfloat16)


def _matmul_case(name: str, source: str, path: str, func: str, small: dict[str, int], full: dict[str, int]) -> Case:
    """The tutorial's driver: bfloat16 operands, result in bfloat16."""
    return Case(
        name, source, path, func,
        lambda d, r: (_bf16(_rand(r, d["K"], d["M"])), _bf16(_rand(r, d["K"], d["N"]))),
        lambda lhs_t, rhs: lhs_t.astype(np.float64).T @ rhs.astype(np.float64),
        small, full,
    )  # fmt: skip


def _mamba_case(name: str, source: str, path: str, func: str) -> Case:
    def make(d: dict[str, int], r: np.random.Generator) -> tuple[Any, ...]:
        b, c, s, n = d["B"], d["C"], d["S"], d["N"]
        return _rand(r, b, c, s) * 0.1, _sym(r, b, c, s), -_rand(r, c, n), _sym(r, b, n, s), _sym(r, b, n, s)

    return Case(name, source, path, func, make, mamba, {"B": 1, "C": 128, "S": 512, "N": 4},
                {"B": 1, "C": 256, "S": 2048, "N": 16})  # fmt: skip


def _attention_case(name: str, source: str, path: str, func: str, seq_full: int) -> Case:
    return Case(
        name, source, path, func,
        lambda d, r: (_sym(r, 128, d["S"]), _sym(r, 128, d["S"]), _sym(r, 128, d["S"])),
        attention_qt, {"S": min(seq_full, 512)}, {"S": seq_full},
    )  # fmt: skip


MM = "examples/matrix_multiplication/matrix_multiplication_nki_kernels.py"
MM_B2 = "src/nki_samples/tutorials/matrix_multiplication/matrix_multiplication_nki_kernels.py"
ATT = "examples/attention/attention_kernels.py"
ATT_B2 = "src/nki_samples/tutorials/attention_fwd_performance/attention_kernels.py"
MAMBA = "examples/fused_mamba/mamba_nki_kernels.py"
MAMBA_B2 = "src/nki_samples/tutorials/fused_mamba/mamba_nki_kernels.py"
BIG = {"M": 4096, "K": 1024, "N": 2048}


def _tutorial_cases(src: str, mm: str, att: str, mamba_path: str, prefix: str) -> list[Case]:
    """The matmul, attention and mamba tutorials (same kernels in both API generations)."""
    cases = [
        _matmul_case(f"{prefix}matmul_basic", src, mm, "nki_matmul_basic_", {"M": 64, "K": 128, "N": 512},
                     {"M": 64, "K": 128, "N": 512}),
        _matmul_case(f"{prefix}matmul_tiled", src, mm, "nki_matmul_tiled_", {"M": 256, "K": 256, "N": 1024}, BIG),
        _matmul_case(f"{prefix}matmul_hoist_load", src, mm, "nki_matmul_hoist_load_",
                     {"M": 256, "K": 256, "N": 1024}, BIG),
        _matmul_case(f"{prefix}matmul_block_free", src, mm, "nki_matmul_block_free_dimension_",
                     {"M": 256, "K": 256, "N": 2048}, BIG),
        _matmul_case(f"{prefix}matmul_fully_optimized", src, mm, "nki_matmul_fully_optimized_",
                     {"M": 2048, "K": 1024, "N": 1024}, {"M": 4096, "K": 1024, "N": 2048}),
    ]  # fmt: skip
    for v in ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v8a", "v9", "v10", "v11"):
        cases.append(_attention_case(f"{prefix}attn_fwd_{v}", src, att, f"attn_fwd_{v}", 128 if v in ("v1", "v2")
                                     else 4096))  # fmt: skip
    for v in ("v1", "v2", "v3"):
        cases.append(_mamba_case(f"{prefix}mamba_{v}", src, mamba_path, f"mamba_{v}"))
    return cases


def _sdk_small_cases() -> list[Case]:
    ex = "examples/"
    exp_case = dict(make=lambda d, r: (_rand(r, d["P"], d["F"]),), ref=np.exp)
    return [
        Case("getting_started", "sdk", ex + "getting_started_baremetal.py", "nki_tensor_add_kernel",
             lambda d, r: (_rand(r, 4, 3), _rand(r, 4, 3)), np.add),
        Case("tensor_add_spmd", "sdk", ex + "tensor_addition/spmd_tensor_addition_nki_kernels.py", "nki_tensor_add",
             lambda d, r: (_rand(r, 256, 1024), _rand(r, 256, 1024)), np.add),
        Case("tensor_add_spmd_nc2", "sdk", ex + "tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py",
             "nki_tensor_add_nc2", lambda d, r: (_rand(r, 512, 2048), _rand(r, 512, 2048)), np.add),
        Case("transpose2d", "sdk", ex + "transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_",
             lambda d, r: (_rand(r, 5, 12), (3, 4)),
             lambda a, s: a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12)),
        Case("avgpool2d", "sdk", ex + "average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel",
             lambda d, r: (_rand(r, 2, 6, 6), 2), lambda x, k: pool2d(x, k, "mean")),
        Case("index_case1_split", "sdk", ex + "index-case-1.py", "tensor_split_kernel_",
             lambda d, r: (_rand(r, 4, 5),), lambda x: (x[:, 0::2], x[:, 1::2])),
        Case("index_case3_maxpool", "sdk", ex + "index-case-3.py", "tensor_maxpool_kernel_",
             lambda d, r: (_rand(r, 2, 6, 6), 2), lambda x, k: pool2d(x, k, "max")),
        Case("layout_pass", "sdk", ex + "layout-pass.py", "tensor_exp_kernel_", **exp_case, small={"P": 128, "F": 512}),
        Case("layout_loop", "sdk", ex + "layout-loop.py", "tensor_exp_kernel_", **exp_case, small={"P": 256, "F": 512}),
        Case("layout_dynamic_loop", "sdk", ex + "layout-dynamic-loop.py", "tensor_exp_kernel_", **exp_case,
             small={"P": 250, "F": 512}),
        Case("layout_violation", "sdk", ex + "layout-violation.py", "tensor_exp_kernel_", **exp_case,
             small={"P": 256, "F": 512}, expect="partition"),
        Case("prof_kernel", "sdk", ex + "prof-kernel.py", "tensor_exp_kernel_", **exp_case,
             small={"P": 250, "F": 512}),
        Case("mm_nisa_spmd", "sdk", ex + "mm-nisa-spmd.py", "matmul_128x128x512_spmd",
             lambda d, r: (_rand(r, 128, 512), _rand(r, 128, 1024)), lambda a, b: a.T.astype(np.float64) @ b,
             grid=(4, 2)),
        Case("mm_nl_spmd", "sdk", ex + "mm-nl-spmd.py", "matmul_128x128x512_spmd",
             lambda d, r: (_rand(r, 512, 128), _rand(r, 128, 1024)), lambda a, b: a.astype(np.float64) @ b,
             grid=(4, 2)),
        Case("rmsnorm", "sdk", ex + "rmsnorm/rmsnorm_nki_kernels.py", "nki_rmsnorm_kernel",
             lambda d, r: (_rand(r, d["R"], d["C"]), _rand(r, d["C"])), rmsnorm, {"R": 250, "C": 512},
             {"R": 250, "C": 512}),
        Case("rmsnorm_c1024", "sdk", ex + "rmsnorm/rmsnorm_nki_kernels.py", "nki_rmsnorm_kernel",
             lambda d, r: (_rand(r, d["R"], d["C"]), _rand(r, d["C"])), rmsnorm, {"R": 128, "C": 1024},
             {"R": 250, "C": 2048}),
        # test_nki_isa_dma_transpose.py defines these two kernels but no test (its pytest run collects nothing)
        Case("dma_transpose_hbm2sb", "sdk", "test/test_nki_isa_dma_transpose.py", "nki_dma_transpose_2d_hbm2sb",
             lambda d, r: (_rand(r, 32, 64),), lambda a: a.T),
        Case("dma_transpose_sb2sb", "sdk", "test/test_nki_isa_dma_transpose.py", "nki_dma_transpose_2d_sb2sb",
             lambda d, r: (_rand(r, 32, 64),), lambda a: a.T),
        Case("sd_attention", "sdk", ex + "sd_attention/sd_attention_nki_kernels.py",
             "fused_self_attn_for_SD_small_head_size",
             lambda d, r: (_rand(r, d["S"], 64), _rand(r, d["S"], 64), _rand(r, d["S"], 64)), sd_attention,
             {"S": 512}, {"S": 4096}),
    ]  # fmt: skip


def _layernorm_cases() -> list[Case]:
    path = "examples/layernorm/layernorm_nki_kernel.py"

    def make(d: dict[str, int], r: np.random.Generator) -> tuple[Any, ...]:
        return _rand(r, d["R"], d["C"]), 1e-5, _rand(r, d["C"]), _rand(r, d["C"])

    return [Case(f"layernorm_{v}", "sdk", path, f"nki_layernorm_kernel_{v}", make, layernorm, {"R": 256, "C": 1024},
                 {"R": 4096, "C": 8192}) for v in ("v1", "v2")]  # fmt: skip


def _beta2_small_cases() -> list[Case]:
    tut = "src/nki_samples/tutorials/"
    return [
        Case("b2_tensor_add", "samples", tut + "tensor_addition/tensor_addition_nki_kernels.py", "nki_tensor_add",
             lambda d, r: (_rand(r, 256, 1024), _rand(r, 256, 1024)), np.add),
        Case("b2_tensor_add_spmd", "samples", tut + "tensor_addition/spmd_tensor_addition_nki_kernels.py",
             "nki_tensor_add", lambda d, r: (_rand(r, 256, 1024), _rand(r, 256, 1024)), np.add),
        Case("b2_transpose2d", "samples", tut + "transpose2d/transpose2d_nki_kernels.py", "tensor_transpose2D_kernel_",
             lambda d, r: (_rand(r, 5, 12), (3, 4)),
             lambda a, s: a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12)),
        Case("b2_avgpool2d", "samples", tut + "average_pool2d/average_pool2d_nki_kernels.py", "tensor_avgpool_kernel",
             lambda d, r: (_rand(r, 2, 6, 6), 2), lambda x, k: pool2d(x, k, "mean")),
    ]  # fmt: skip


CASES: list[Case] = [
    *_sdk_small_cases(),
    *_layernorm_cases(),
    *_tutorial_cases("sdk", MM, ATT, MAMBA, ""),
    *_beta2_small_cases(),
    *_tutorial_cases("samples", MM_B2, ATT_B2, MAMBA_B2, "b2_"),
]

# unit-test files run with pytest in the extracted tree: (source, directory, extra pytest arguments)
PYTEST = [
    ("samples-ref", "test/unit", ("--simulation-only",)),
    ("sdk", "test", ()),
]
