"""The MX matmul rows of the compatibility run (`scripts/nki_compat.py`): inputs and numpy references (our
own, written from the OCP MX v1.0 formats and AWS's nisa.quantize_mx / nc_matmul_mx docs).

Data tiles are [K, F] items of 4 float8_e4m3fn values (value j in byte j of a uint32), scales one E8M0 byte
(2**(e - 127)) per 8 partitions x 1 item, passed contiguous [K / 8, F] as nki-samples' MX tutorial passes
them (its kernels spread them over SBUF quadrants).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _mx_tile(r: np.random.Generator, k: int, f: int) -> tuple[np.ndarray, np.ndarray]:
    """A random MXFP8 (e4m3fn) tile [k, f] of 4-value items as uint32 (value j in byte j) and its E8M0 scales
    [k / 8, f] as uint8, one per 8 partitions x 1 item (scales contiguous, as the tutorial passes them)."""
    import ml_dtypes

    values = r.uniform(-4, 4, (k, 4 * f)).astype(ml_dtypes.float8_e4m3fn)
    return values.view(np.uint8).view(np.uint32), r.integers(120, 131, (k // 8, f), dtype=np.uint8)


def mx_offline_inputs(d: dict[str, int], r: np.random.Generator) -> tuple[Any, ...]:
    """Stationary [128, 128] and moving [128, 512] MXFP8 tiles with their scales, and the x4 dtype."""
    import nprof.nki.language as nl

    st, st_scale = _mx_tile(r, 128, 128)
    mv, mv_scale = _mx_tile(r, 128, 512)
    return st, st_scale, mv, mv_scale, nl.float8_e4m3fn_x4


def _mx_values(data: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """[k, f, 4] real values: each byte as float8_e4m3fn times 2**(scale of its 8-partition group - 127)."""
    import ml_dtypes

    k, f = data.shape
    vals = np.ascontiguousarray(data).view(np.uint8).reshape(k, f, 4).view(ml_dtypes.float8_e4m3fn)
    return vals.astype(np.float64) * np.exp2(np.repeat(scale.astype(np.float64), 8, axis=0) - 127)[:, :, None]


def mx_matmul_ref(st: np.ndarray, st_scale: np.ndarray, mv: np.ndarray, mv_scale: np.ndarray, _: Any) -> np.ndarray:
    """out[m, n] = sum over partitions p and item values j of stationary[p, m, j] * moving[p, n, j] (dequantized)."""
    return np.einsum("pmj,pnj->mn", _mx_values(st, st_scale), _mx_values(mv, mv_scale))


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x [K, 4F] quantized as QuantizeMX does (AWS nisa.quantize_mx): per group of 8 partitions x 4 consecutive
    values, X = 2**(floor(log2(amax)) - 7) (float8_e4m3fn: Emax 8; an all-zero group 2**-127), values / X as
    float8_e4m3fn; returns (items [K, F] uint32, scales [K / 8, F] uint8)."""
    import ml_dtypes

    k, f4 = x.shape
    groups = np.abs(x.astype(np.float64)).reshape(k // 8, 8, f4 // 4, 4).max(axis=(1, 3))
    safe = np.where(groups > 0, groups, 1.0)
    exp = np.where(groups > 0, np.floor(np.log2(safe)) - 7, -127).astype(np.int64)
    per_value = np.repeat(np.repeat(exp, 8, axis=0), 4, axis=1)
    q = (x.astype(np.float64) / np.exp2(per_value)).astype(ml_dtypes.float8_e4m3fn)
    return q.view(np.uint8).view(np.uint32), (exp + 127).astype(np.uint8)


def mx_on_device_inputs(d: dict[str, int], r: np.random.Generator) -> tuple[Any, ...]:
    """An MXFP8 stationary [128, 128] with its scales, a bf16 moving [128, 2048] to quantize on chip, the two
    x4 dtypes."""
    import ml_dtypes

    import nprof.nki.language as nl

    st, st_scale = _mx_tile(r, 128, 128)
    moving = r.uniform(-3, 3, (128, 2048)).astype(ml_dtypes.bfloat16)
    return st, st_scale, moving, nl.float8_e4m3fn_x4, nl.float8_e4m3fn_x4


def mx_on_device_ref(st: np.ndarray, st_scale: np.ndarray, moving: np.ndarray, *_: Any) -> np.ndarray:
    """The offline reference with the moving operand quantized by `quantize_rows`."""
    mv, mv_scale = quantize_rows(moving)
    return mx_matmul_ref(st, st_scale, mv, mv_scale, None)


def mx_strided_inputs(d: dict[str, int], r: np.random.Generator) -> tuple[Any, ...]:
    """Unquantized bf16 stationary [512, 128] and moving [512, 512] (K = 512: 4 x 128 partitions), the x4 dtype
    and the tutorial's `use_tensor_copy` flag (d["copy"])."""
    import ml_dtypes

    import nprof.nki.language as nl

    st = r.uniform(-3, 3, (512, 128)).astype(ml_dtypes.bfloat16)
    mv = r.uniform(-3, 3, (512, 512)).astype(ml_dtypes.bfloat16)
    return st, mv, nl.float8_e4m3fn_x4, bool(d["copy"])


def mx_strided_ref(st: np.ndarray, mv: np.ndarray, *_: Any) -> np.ndarray:
    """Both operands laid out for MX (row p of the k-th 128-row quarter becomes value k of partition p's item:
    [K, F] -> [K / 4, 4F] with item (p, f) = rows p, 128 + p, 256 + p, 384 + p of column f), quantized by
    `quantize_rows`, multiplied."""

    def layout(x: np.ndarray) -> np.ndarray:
        k, f = x.shape
        return x.reshape(4, k // 4, f).transpose(1, 2, 0).reshape(k // 4, 4 * f)

    (a, sa), (b, sb) = quantize_rows(layout(st)), quantize_rows(layout(mv))
    return mx_matmul_ref(a, sa, b, sb, None)
