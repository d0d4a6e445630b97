"""More of the compatibility run (`scripts/nki_compat.py`): the kernels outside the tutorials, public files run
as scripts, import stubs, and the known outcomes of public unit tests (our code and our numpy references).

* `EXTRA_CASES`: nki-samples' reference kernels without a unit test, its contributed kernels, the beta-2
  multi-core tensor add and the MX matmul tutorial, and the SDK's profiling examples.
* `SCRIPTS`: public files whose own module-level code is their check (run with python in their directory;
  they pass when they exit 0 and print no "False").
* `STUBS`: empty modules written into the extracted tree so that files importing a framework only for their
  host-side driver (torch_xla's device, torch_neuronx, loguru's logger) can be imported; the kernels never
  touch them. A kernel that needs them fails as before. `nprof_compat_seed` (ours) is a pytest plugin the
  public unit tests run with: numpy's global RNG seeded 0 before each test, so a test drawing unseeded random
  inputs gets the same inputs in every compatibility run (the table is repeatable; nothing else changes).
* `PYTEST_KNOWN`: public unit-test files that cannot pass for a reason outside nprof, with that reason (shown,
  and counted as "tests n/a" or "tests differs", only when the failure line matches); `PYTEST_FULL`: files
  with no test marked for simulation, run without `--simulation-only` (nothing in them needs hardware);
  `PYTEST_TIMEOUT`: files given a longer limit than `--timeout`, with the reason (shown in the row);
  `PYTEST_SPLIT`: files run one test case per pytest process, a row per case (counted as "test cases").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from nki_compat_cases import Case, _bf16, _rand, _sym, softmax_rows
from nki_compat_mx import (
    mx_matmul_ref,
    mx_offline_inputs,
    mx_on_device_inputs,
    mx_on_device_ref,
    mx_strided_inputs,
    mx_strided_ref,
)  # fmt: skip

STUBS = {
    "torch_xla/__init__.py": "",
    "torch_xla/core/__init__.py": "",
    "torch_xla/core/xla_model.py": "def xla_device(*args, **kwargs):\n    raise RuntimeError('no XLA device here')\n",
    "torch_neuronx/__init__.py": "",
    "loguru/__init__.py": "import logging\n\nlogger = logging.getLogger('loguru-stub')\n",
    "nprof_compat_seed.py": (
        "import numpy as np\nimport pytest\n\n\n@pytest.fixture(autouse=True)\ndef _seed_numpy():\n"
        "    np.random.seed(0)\n"
    ),
}


def write_stubs(tree: Path) -> Path:
    """The stub modules under tree/_stubs (see module doc); returns that directory."""
    root = tree / "_stubs"
    for rel, text in STUBS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def upsample2x(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Linear 2x upsampling along `axes`, align_corners=False (source coordinate (o + 0.5) / 2 - 0.5, edges
    clamped): bilinear / trilinear interpolation, separable."""
    out = x.astype(np.float64)
    for axis in axes:
        n = out.shape[axis]
        pos = np.clip((np.arange(2 * n) + 0.5) / 2 - 0.5, 0, n - 1)
        lo = np.floor(pos).astype(int)
        hi = np.minimum(lo + 1, n - 1)
        w = (pos - lo).reshape([-1 if a == axis else 1 for a in range(out.ndim)])
        out = np.take(out, lo, axis=axis) * (1 - w) + np.take(out, hi, axis=axis) * w
    return out


def rotary(q: np.ndarray, k: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """[2, B, H, S, D]: q and k rotated, x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1]."""

    def rot(x: np.ndarray) -> np.ndarray:
        half = x.shape[-1] // 2
        turned = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos[:, None] + turned * sin[:, None]

    return np.stack([rot(q.astype(np.float64)), rot(k.astype(np.float64))])


def _rope_inputs(d: dict[str, int], r: np.random.Generator) -> tuple[Any, ...]:
    b, h, s, dh = d["B"], d["H"], d["S"], d["D"]
    angles = np.arange(s)[:, None] * (1.0 / 10000 ** (np.arange(0, dh, 2) / dh))[None, :]
    emb = np.concatenate([angles, angles], axis=-1)
    cos = np.broadcast_to(np.cos(emb), (b, s, dh)).astype(np.float32)
    sin = np.broadcast_to(np.sin(emb), (b, s, dh)).astype(np.float32)
    return _sym(r, b, h, s, dh), _sym(r, b, h, s, dh), cos, sin


def double_row_inputs(d: dict[str, int], r: np.random.Generator) -> tuple[Any, ...]:
    """lhs [M, K] bf16, rhs quantized to fp8 per column and laid out as the kernel expects ([K/2, 2N]: K tiles
    2j and 2j+1 side by side per 512-wide N tile), its scale [128, N], and the three block sizes."""
    import ml_dtypes

    m, k, n = 128 * d["TM"], 128 * d["TK"], 512 * d["TN"]
    lhs = _bf16(_rand(r, m, k))
    rhs = r.random((k, n))
    scale = np.abs(rhs).max(axis=0, keepdims=True) / 240.0
    quant = (rhs / scale).astype(ml_dtypes.float8_e4m3)
    paired = quant.reshape(k // 256, 2, 128, n // 512, 512).transpose(0, 2, 3, 1, 4).reshape(k // 2, 2 * n)
    return lhs, paired, _bf16(np.broadcast_to(scale, (128, n)).astype(np.float32)), d["TM"], d["TN"], d["TK"]


def double_row_ref(lhs: np.ndarray, paired: np.ndarray, scale: np.ndarray, *_: int) -> np.ndarray:
    """lhs @ (the dequantized rhs): `paired` laid back out as [K, N], times its column scale."""
    k2, n2 = paired.shape
    rhs = paired.astype(np.float64).reshape(k2 // 128, 128, n2 // 1024, 2, 512).transpose(0, 3, 1, 2, 4)
    rhs = rhs.reshape(2 * k2, n2 // 2) * scale[0].astype(np.float64)
    return lhs.astype(np.float64) @ rhs


RMSQ_BOUND = 1.0  # the rmsnorm_quant row's clipping bound (kargs.lower_bound)
FP8_E4M3_RANGE = 240.0  # the largest value rmsnorm_quant scales rows to


def rmsnorm_quant_ref(x: np.ndarray, gamma: np.ndarray, kargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """(rows normalised by their RMS, times gamma, clipped to +-lower_bound; each row's dequantization scale:
    its clipped absolute maximum / 240, at least 1e-6). The fp8 rounding of the quantized values (3 mantissa
    bits: up to 1/16 relative) is what the row's tolerance (0.07) allows."""
    x = x.astype(np.float64)
    y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + kargs.eps) * gamma
    bound = kargs.lower_bound
    if bound > 0:
        y = np.clip(y, -bound, bound)
    scale = np.maximum(np.abs(y).max(axis=-1) / FP8_E4M3_RANGE, 1e-6)
    return y, scale


def rmsnorm_quant_decode(out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """rmsnorm_quant's output [..., H + 4] fp8 decoded: (the H quantized values times their row's scale, the
    scale), the scale being the row's last 4 bytes read as one little-endian fp32."""
    out = np.asarray(out)
    scale = np.ascontiguousarray(out[..., -4:]).view(np.uint8).view("<f4")[..., 0].astype(np.float64)
    return out[..., :-4].astype(np.float64) * scale[..., None], scale


REF = "src/nki_samples/reference/"
CONTRIB = "contributed/"
EXTRA_CASES: list[Case] = [
    Case("ref_tutorial_add_nx8", "samples-ref", REF + "tutorial.py", "add_kernel_nx8x128x512",
         lambda d, r: (_rand(r, 2, 8, 128, 512), _rand(r, 2, 8, 128, 512), 2 * 8 * 128 * 512),
         lambda a, b, n: a + b, grid=(2,)),
    Case("ref_double_row_matmul", "samples-ref", REF + "double_row_matmul.py", "quantized_double_row_matmul",
         double_row_inputs, double_row_ref, {"TM": 1, "TN": 1, "TK": 4}, {"TM": 2, "TN": 2, "TK": 16}),
    Case("ref_softmax", "samples-ref", "src/nki_samples/tutorials/softmax/softmax_nki_kernels.py",
         "nki_softmax_kernel", lambda d, r: (_sym(r, d["R"], d["C"]),), softmax_rows, {"R": 250, "C": 512}),
    Case("ref_rotary", "samples-ref", "src/nki_samples/tutorials/rotary/rotary_nki_kernels.py",
         "nki_apply_rotary_embedding", _rope_inputs, rotary, {"B": 1, "H": 2, "S": 200, "D": 64}, grid=(1, 2)),
    Case("b2_tensor_add_spmd_nc2", "samples",
         "src/nki_samples/tutorials/tensor_addition/spmd_multiple_nc_tensor_addition_nki_kernels.py",
         "nki_tensor_add_nc2", lambda d, r: (_rand(r, 512, 2048), _rand(r, 512, 2048)), np.add),
    Case("contrib_matmul", "samples", CONTRIB + "matmul.py", "matmul",
         lambda d, r: (_rand(r, d["K"], d["M"]).astype(np.float16), _rand(r, d["K"], d["N"]).astype(np.float16)),
         lambda a, b: a.astype(np.float64).T @ b, {"K": 1024, "M": 512, "N": 2048},
         {"K": 1024, "M": 4096, "N": 2048}, jit=True),
    Case("contrib_maxpool_stride1", "samples", CONTRIB + "maxpooling.py", "max_pooling_2d_stride_1",
         lambda d, r: (_rand(r, d["H"], d["W"]), 3),
         lambda x, k: np.lib.stride_tricks.sliding_window_view(x, (k, k)).max(axis=(2, 3)),
         {"H": 200, "W": 96}, {"H": 448, "W": 448}),
    Case("contrib_bilinear_2x", "samples", CONTRIB + "interpolate_bilinear_fwd.py", "interpolate_bilinear_2x_fwd",
         lambda d, r: (_rand(r, 2, d["C"], d["H"], d["H"]),), lambda x: upsample2x(x, (2, 3)),
         {"C": 64, "H": 32}, {"C": 64, "H": 128}),
    Case("contrib_trilinear_2x", "samples", CONTRIB + "interpolate_trilinear_fwd.py",
         "interpolate_trilinear_2x_fwd", lambda d, r: (_rand(r, 2, 64, d["S"], d["S"], d["S"]),),
         lambda x: upsample2x(x, (2, 3, 4)), {"S": 8}, {"S": 23}),
    Case("prof_kernel_benchmark", "sdk", "examples/prof-kernel-benchmark.py", "tensor_exp_kernel_",
         lambda d, r: (_rand(r, 250, 512),), np.exp),
    # imports two neuronxcc internals without an API page (nprof.nki.compiler.backends) and
    # language.constants.sizeinbytes; stores each row's fp32 dequantization scale as 4 fp8 bytes through an on-chip
    # tile.view(fp8) (nprof.nki.dtype_views). Compared after decoding: the dequantized rows and the scales.
    Case("ref_rmsnorm_quant", "samples-ref", REF + "rmsnorm_quant/rmsnorm_quant.py", "rmsnorm_quant_kernel",
         lambda d, r: (_sym(r, 2, d["S"], 512), _rand(r, 512)), rmsnorm_quant_ref, {"S": 100}, {"S": 1000},
         more=lambda m: (m.RmsNormQuantKernelArgs(lower_bound=RMSQ_BOUND),), decode=rmsnorm_quant_decode, tol=0.07),
    Case("ref_rmsnorm_quant_spmd", "samples-ref", REF + "rmsnorm_quant/rmsnorm_quant.py", "rmsnorm_quant_kernel",
         lambda d, r: (_sym(r, 2, d["S"], 512), _rand(r, 512)), rmsnorm_quant_ref, {"S": 100}, {"S": 1000},
         grid=(2,), more=lambda m: (m.RmsNormQuantKernelArgs(lower_bound=0.0),), decode=rmsnorm_quant_decode,
         tol=0.07),
    # trn3 (NeuronCore-v4) MX matmul of offline-quantized MXFP8 tiles (nprof.nki.isa_mx, nprof.device.mx)
    Case("mx_matmul_offline_quantized", "samples", "src/nki_samples/tutorials/mxfp-matmul/mx_kernels.py",
         "kernel_offline_quantized_mx_matmul", mx_offline_inputs, mx_matmul_ref),
    Case("mx_matmul_on_device_quantize", "samples", "src/nki_samples/tutorials/mxfp-matmul/mx_kernels.py",
         "kernel_on_device_quantize_matmul_mx", mx_on_device_inputs, mx_on_device_ref),
    Case("mx_matmul_strided_tensor_copy", "samples", "src/nki_samples/tutorials/mxfp-matmul/mx_kernels.py",
         "kernel_copy_strided_quantize_matmul_mx", mx_strided_inputs, mx_strided_ref, {"copy": 1}),
    Case("mx_matmul_strided_dma", "samples", "src/nki_samples/tutorials/mxfp-matmul/mx_kernels.py",
         "kernel_copy_strided_quantize_matmul_mx", mx_strided_inputs, mx_strided_ref, {"copy": 0}),
]  # fmt: skip

# public files whose module-level code is their own check: (row name, source, path)
SCRIPTS = [
    ("script:sdk_test_attention", "sdk", "examples/attention/test_attention.py"),
    ("script:b2_test_attention", "samples", "src/nki_samples/tutorials/attention_fwd_performance/test_attention.py"),
    ("script:contrib_pipelined_attention", "samples", "contributed/pipelined_attention.py"),
    ("script:prof_kernel_benchmark", "sdk", "examples/prof-kernel-benchmark.py"),
    ("script:prof_kernel_profile", "sdk", "examples/prof-kernel-profile.py"),
]

# public files run as scripts that cannot pass for a reason outside nprof: name -> (label, fragment of the
# failure line that must match, why)
SCRIPT_KNOWN = {
    "script:contrib_pipelined_attention": (
        "n/a",
        "SPMD grid must be positive",
        "launches flash_fwd[0](...): a launch grid of 0 instances (NKI's SPMD docs: the compiler turns the grid "
        "into loops, so nothing would run and the output would never be written); its loop also passes "
        "nl.affine_range(precise_schedule=True), which is in no public NKI API (the file says it is tested only "
        "against internal nightly builds). nprof refuses both with the kernel's file:line",
    ),
}

_BF16_BITS = "8 significant bits, a relative error up to 3.9e-3"
# name -> (label, fragment of the first failure line that must match, why)
PYTEST_KNOWN = {
    "sdk:test_nki_isa_dma_transpose": (
        "n/a",
        "no tests ran",
        "the file defines two kernels and no test (pytest collects nothing); they run as rows dma_transpose_*",
    ),
    "samples-ref:test_double_row_matmul": (
        "n/a",
        "/sys/devices/virtual/dmi/id/product_name",
        "hardware-only: each test returns unless /sys/devices/virtual/dmi/id/product_name names a trn2 "
        "instance, and without that file the file's helper calls warnings.warn with `warnings` not imported; "
        "the kernel runs as row ref_double_row_matmul",
    ),
    "sdk:test_nki_isa_activation": (
        "differs",
        "False is not true",
        f"activation(np.square, b, bias=c, scale=2.0, dtype=nl.bfloat16): nprof writes the bf16 result as asked "
        f"({_BF16_BITS}; it equals the round-to-nearest-even bf16 of the fp32 reference bit for bit); the test "
        "compares it with that fp32 reference at numpy's default rtol=1e-5, which passes only if the cast to "
        "bf16 is skipped. The exp half (fp32 out) matches exactly",
    ),
    "sdk:test_nki_isa_dropout": (
        "differs",
        "True is not false",
        "test_dropout draws its per-partition drop probabilities as np.random.random_sample*100, unseeded: a "
        "partition with p >= 1 is all dropped (p = 1 drops everything) whatever the random numbers, so the "
        "output is all zeros with probability (0.99 + 0.01/513)**128 = 0.277 per run on any faithful dropout "
        "(hardware or nprof; measured 18 of 60 runs with nprof) and its 'not all zeros' assert fails; it passes "
        "on NKI's simulator only because that does not simulate dropout (the test's own comment)",
    ),
}
PYTEST_FULL = {"samples-ref:test_neuron_profile"}
PYTEST_TIMEOUT = {
    "samples-ref:test_flash_attn_bwd": (
        900.0,
        "per case (8192 x 8 heads: 12.9 GB peak RSS, ~95 s CPU measured alone; its own numpy reference builds fp32 "
        "score matrices of seqlen^2 x heads, 2.1 GB each)",
    ),
}
# files run one test case per pytest (a row each, counted as "test cases"): name -> why
PYTEST_SPLIT = {
    "samples-ref:test_flash_attn_bwd": "16 simulation cases of 10-100 s CPU each, their own numpy reference "
    "included: a row per case shows each one's outcome instead of one file-wide timeout",
}
