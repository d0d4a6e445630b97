"""Numerics of the MX (OCP Microscaling v1.0) instructions of NeuronCore-v4: MX matmul and QuantizeMX.

Formats (NKI API reference: `nki.language` MX dtypes, `nisa.nc_matmul_mx`, `nisa.quantize_mx`; the NKI
"Trainium3 Architecture Guide"; the OCP MX v1.0 spec):

* packed data: `mxfp8_e4m3_x4` / `mxfp8_e5m2_x4` hold four float8 values in 32 bits, value j in byte j
  (little-endian); `mxfp4_e2m1_x4` holds four float4_e2m1 values in 16 bits, value j in bits 4j..4j+3.
* scales: one 8-bit E8M0 exponent per scaling group, value 2**(byte - 127) (255: NaN); stored as
  `float8_e8m0fnu` or `uint8` (same bits).
* a scaling group is 32 values: 8 partitions x the 4 values of one packed element. The scale of data
  partition p (relative to the data tile) sits in scale partition (p // 32) * 32 + (p % 32) // 8 (each
  32-partition quadrant keeps its 4 scale rows at its own top), same free index as the data.

`mx_matmul(ins, mem)`: MATMUL with ins (stationary [K, M] x4, moving [K, N] x4, stationary scale, moving
scale): out[m, n] = sum over p, j of st[p, m, j] * 2**(s_st(p, m) - 127) * mv[p, n, j] * 2**(s_mv(p, n) - 127),
accumulated in float32 (into the destination when `accumulate`).

`moving_fmax(preset, dst_dtype)`: the largest moving free size of a matmul into a `dst_dtype` PSUM tile: on
NeuronCore-v4 the whole PSUM of a partition (NKI API reference, `nisa.nc_matmul` / `nisa.nc_matmul_mx`, "Tile
size": up to 4096 for float32 `dst` or 8192 for bfloat16, "matching the size of 8x PSUM banks (the entire
PSUM)"), before it one PSUM bank of fp32 (`nl.tile_size.gemm_moving_fmax`, 512).

`quantize_mx(ins, mem)`: QUANTIZE_MX of a bf16/fp16 [P, 4F] tile into a [P, F] x4 tile and its scales, the
scale of a group X = 2**(floor(log2(amax)) - (Emax - 1)) (Emax 8 for e4m3fn, 15 for e5m2; an all-zero group
2**-127), each value divided by X and rounded to the element type (nearest even, saturating at its largest
finite value).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Instruction
from nprof.arch.presets import Preset
from nprof.device.memory import Memory

ELEMENT = {  # packed MX type -> (element numpy type, values per item, bits per value)
    "mxfp8_e4m3_x4": (ml_dtypes.float8_e4m3fn, 4, 8),
    "mxfp8_e5m2_x4": (ml_dtypes.float8_e5m2, 4, 8),
    "mxfp4_e2m1_x4": (ml_dtypes.float4_e2m1fn, 4, 4),
}
EMAX = {"mxfp8_e4m3_x4": 8, "mxfp8_e5m2_x4": 15}  # largest unbiased exponent of the element type (quantize_mx)


def moving_fmax(preset: Preset, dst_dtype: str) -> int:
    """The largest moving free size of one matmul writing `dst_dtype` (see module doc)."""
    if preset.core == "NeuronCore-v4":
        return preset.psum_partition_bytes // ITEMSIZE.get(dst_dtype, 4)
    return preset.gemm_moving_fmax


def _raw(mem: Memory, acc: Access) -> np.ndarray:
    """The Access's items as unsigned integers of their size, shape [P, F]."""
    v = np.ascontiguousarray(mem.view(acc))
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[v.dtype.itemsize]
    return v.view(bits).reshape(acc.partitions, -1)


def unpack(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Packed MX items [P, F] (as unsigned integers) -> their values [P, F, 4] as float32."""
    elem, n, bits = ELEMENT[dtype]
    mask = (1 << bits) - 1
    codes = np.stack([(raw >> (bits * j)) & mask for j in range(n)], axis=-1).astype(np.uint8)
    return codes.view(elem).astype(np.float32)


def pack(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values [P, F, 4] already representable in the element type -> packed items [P, F] (unsigned ints)."""
    elem, n, bits = ELEMENT[dtype]
    codes = values.astype(elem).view(np.uint8).astype(np.uint32) & ((1 << bits) - 1)
    out = np.zeros(codes.shape[:-1], np.uint32)
    for j in range(n):
        out |= codes[..., j] << (bits * j)
    return out


def scale_rows(partitions: int) -> np.ndarray:
    """For each data partition, the partition of its scale (see module doc)."""
    p = np.arange(partitions)
    return (p // 32) * 32 + (p % 32) // 8


def _scales(mem: Memory, acc: Access, partitions: int) -> np.ndarray:
    """The scale of every data element's group, [K, F] float32 (2**(byte - 127), NaN for 255)."""
    raw = _raw(mem, acc).astype(np.int32)
    rows = scale_rows(partitions)
    if rows.max(initial=0) >= raw.shape[0]:
        raise ValueError(f"MX scale tile has {raw.shape[0]} partitions; data of {partitions} partitions needs "
                         f"{rows.max() + 1}")  # fmt: skip
    exp = raw[rows]
    return np.where(exp == 255, np.float32(np.nan), np.ldexp(np.float32(1.0), exp - 127).astype(np.float32))


def mx_matmul(ins: Instruction, mem: Memory) -> None:
    """MATMUL of MX operands (see module doc)."""
    st, mv, st_scale, mv_scale = ins.ins
    a = unpack(_raw(mem, st), st.dtype) * _scales(mem, st_scale, st.partitions)[:, :, None]
    b = unpack(_raw(mem, mv), mv.dtype) * _scales(mem, mv_scale, mv.partitions)[:, :, None]
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"contraction sizes differ: stationary K={a.shape[0]}, moving K={b.shape[0]}")
    k = a.shape[0] * 4  # contraction over partitions and the 4 values of each item
    result = a.transpose(0, 2, 1).reshape(k, -1).T @ b.transpose(0, 2, 1).reshape(k, -1)
    out = ins.outs[0]
    if ins.attr("accumulate", False):
        result = mem.read(out).reshape(result.shape).astype(np.float32) + result
    mem.write(out, result.reshape(out.shape))


def quantize_mx(ins: Instruction, mem: Memory) -> None:
    """QUANTIZE_MX (see module doc): ins (src [P, 4F]); outs (data [P, F] x4, scale)."""
    src, (data, scale) = ins.ins[0], ins.outs
    x = mem.read(src).reshape(src.partitions, -1, 4).astype(np.float32)  # [P, F, 4]
    p, f = x.shape[:2]
    if p % 8:
        raise ValueError(f"quantize_mx: {p} partitions are not whole groups of 8")
    amax = np.abs(x).max(axis=2).reshape(p // 8, 8, f).max(axis=1)  # [P/8, F]
    with np.errstate(divide="ignore"):
        exp = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1))) - (EMAX[data.dtype] - 1), -127)
    exp = np.clip(exp, -127, 127).astype(np.int32)
    group = np.repeat(exp, 8, axis=0)  # [P, F]
    elem = ELEMENT[data.dtype][0]
    top = float(ml_dtypes.finfo(elem).max)
    q = np.clip(x / np.ldexp(np.float32(1.0), group)[:, :, None], -top, top)
    _store_raw(mem, data, pack(q, data.dtype))
    scale_bytes = _raw(mem, scale).copy()  # rows of other groups' scales (packed scale tiles) are kept
    rows = scale_rows(p)[::8]
    if rows.max(initial=0) >= scale_bytes.shape[0]:
        raise ValueError(f"quantize_mx: the scale tile has {scale_bytes.shape[0]} partitions, needs {rows.max() + 1}")
    scale_bytes[rows] = (exp + 127).astype(np.uint8)
    _store_raw(mem, scale, scale_bytes)


def _store_raw(mem: Memory, acc: Access, items: np.ndarray) -> None:
    """Write unsigned-integer items into the Access's memory bit for bit."""
    v = mem.view(acc)
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32}[v.dtype.itemsize]
    v[...] = items.astype(bits).reshape(v.shape).view(v.dtype)
