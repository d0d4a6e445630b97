"""The MX instructions of NeuronCore-v4 (trn3 preset): `nisa.nc_matmul_mx` and `nisa.quantize_mx`.

Signatures and rules are those of AWS's NKI API reference (`nki.isa.nc_matmul_mx`, `nki.isa.quantize_mx`)
and the NKI "Trainium3 Architecture Guide"; the formats and numerics are in `nprof.device.mx`.

* `nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None, tile_size=None,
  accumulate=None, name=None)`: one LDWEIGHTS (stationary data and scale) and one MATMUL with four inputs.
  Data tiles are x4 MX types in SBUF with the same partition count (a multiple of 32, at most 128); the
  stationary free size is even and at most 128, the moving one at most the whole PSUM of a partition (4096 for
  an fp32 `dst`, 8192 for bf16: `nprof.device.mx.moving_fmax`); scales are uint8 / float8_e8m0fnu SBUF tiles with
  the data's free size, spread over quadrants (`nprof.device.mx.scale_rows`); `dst` is an fp32 or bf16 PSUM
  tile [M, N]. `accumulate=None` infers the flag as `nc_matmul(dst=...)` does. Row tiling
  (`tile_position`/`tile_size`) is checked as AWS defines it (`nprof.nki.pe_tiling`).
  The cost is a BF16 matmul of N columns: each processing
  element multiplies the 4 values of an item per cycle (the guide's 4x MX throughput).
* `quantize_mx(dst, src, dst_scale, name=None)`: one VectorE QUANTIZE_MX; `src` bf16/fp16 [P, 4F] (P a
  multiple of 32, at most 128), `dst` [P, F] float8_e4m3fn_x4 / float8_e5m2_x4, `dst_scale` uint8 /
  float8_e8m0fnu with enough partitions for the quadrant layout, free size F.

Both refuse (KernelError) on any other preset than NeuronCore-v4: "Available only on NeuronCore-v4 and newer".
"""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import PACKED_MX, Engine, Opcode, Space, attrs
from nprof.device.mx import moving_fmax
from nprof.nki import compute as _c
from nprof.nki import trace as _trace
from nprof.nki.pe_tiling import check_tiling, tile_tag
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor, OnChip

_SCALES = ("uint8", "float8_e8m0fnu")


def nc_matmul_mx(dst: NkiTensor, stationary: NkiTensor, moving: NkiTensor, stationary_scale: NkiTensor,
                 moving_scale: NkiTensor, tile_position: Any = None, tile_size: Any = None, accumulate: Any = None,
                 name: Any = None) -> NkiTensor:  # fmt: skip
    """MX matmul into PSUM `dst` (see module doc)."""
    builder = _v4("nc_matmul_mx")
    st, mv = _data(stationary, "stationary"), _data(moving, "moving")
    k, m = st.shape[0], _c._numel_free(st)
    n = _c._numel_free(mv)
    if mv.shape[0] != k or k % 32 or k > builder.preset.pmax:
        raise kernel_error(f"nc_matmul_mx: stationary {st.shape} and moving {mv.shape} need the same partition "
                           f"count, a multiple of 32 up to {builder.preset.pmax}")  # fmt: skip
    nmax = moving_fmax(builder.preset, getattr(dst, "dtype_name", "float32"))
    if m % 2 or m > builder.preset.gemm_stationary_fmax or n > nmax:
        raise kernel_error(f"nc_matmul_mx: stationary free size {m} must be even and <= "
                           f"{builder.preset.gemm_stationary_fmax}, moving free size {n} <= {nmax} (the whole PSUM "
                           f"for a {getattr(dst, 'dtype_name', 'float32')} dst); tile the matmul")  # fmt: skip
    tile = tile_tag(check_tiling("nisa.nc_matmul_mx", tile_position, tile_size, k, m, builder.preset.core,
                                 rows_only=True))  # fmt: skip
    sts, mvs = _scale(stationary_scale, "stationary_scale", st), _scale(moving_scale, "moving_scale", mv)
    if not isinstance(dst, NkiTensor) or dst.space is not Space.PSUM or dst.dtype_name not in ("float32", "bfloat16"):
        raise kernel_error("nc_matmul_mx dst must be an fp32 or bf16 PSUM tile (nl.ndarray(..., buffer=nl.psum))")
    if (dst.shape[0], _c._numel_free(dst)) != (m, n):
        raise kernel_error(f"nc_matmul_mx dst {dst.shape} must be [{m}, {n}] (stationary free x moving free)")
    written = _c.MM_WRITTEN.setdefault(dst.base, set()) if isinstance(dst.base, OnChip) else set()
    acc = dst.access_key() in written if accumulate is None else bool(accumulate)
    written.add(dst.access_key())
    builder.flush()
    st_acc, sts_acc = st.access(), sts.access()
    builder.emit(Engine.TENSOR, Opcode.LDWEIGHTS, (), (st_acc, sts_acc), attrs(pe_tile=tile))
    builder.emit(Engine.TENSOR, Opcode.MATMUL, (dst.access(),), (st_acc, mv.access(), sts_acc, mvs.access()),
                 attrs(accumulate=acc, pe_tile=tile))  # fmt: skip
    builder._stationary = None  # the array holds MX weights now: the next nc_matmul loads its own
    return dst


def quantize_mx(dst: NkiTensor, src: NkiTensor, dst_scale: NkiTensor, name: Any = None) -> NkiTensor:
    """QuantizeMX of `src` into `dst` and `dst_scale` (see module doc)."""
    builder = _v4("quantize_mx")
    x = _c.tile(src, "quantize_mx src")
    if x.dtype_name not in ("bfloat16", "float16") or x.space is not Space.SBUF:
        raise kernel_error(f"quantize_mx src must be a bf16 or fp16 SBUF tile, got {x.dtype_name} in {x.space}")
    p, f4 = x.shape[0], _c._numel_free(x)
    if p % 32 or p > builder.preset.pmax or f4 % 4:
        raise kernel_error(f"quantize_mx src {x.shape}: partitions must be a multiple of 32 up to "
                           f"{builder.preset.pmax} and the free size a multiple of 4")  # fmt: skip
    out = _data(dst, "quantize_mx dst")
    if out.dtype_name == "mxfp4_e2m1_x4":
        raise kernel_error("quantize_mx writes MXFP8 (float8_e4m3fn_x4 or float8_e5m2_x4); FP4 is not supported")
    if out.shape[0] != p or _c._numel_free(out) != f4 // 4:
        raise kernel_error(f"quantize_mx dst {out.shape} must be [{p}, {f4 // 4}] (the src free size / 4)")
    scale = _scale(dst_scale, "quantize_mx dst_scale", out)
    builder.emit(Engine.VECTOR, Opcode.QUANTIZE_MX, (out.access(), scale.access()), (x.access(),))
    return dst


def _v4(func: str) -> Any:
    builder = _trace.current()
    if builder.preset.core != "NeuronCore-v4":
        raise kernel_error(f"nisa.{func} is available only on NeuronCore-v4 (trn3); this kernel is traced for "
                           f"{builder.preset.name} — use @nki.jit(platform_target='trn3')")  # fmt: skip
    return builder


def _data(x: Any, what: str) -> NkiTensor:
    t = _c.tile(x, what, packed_ok=True)
    if t.dtype_name not in PACKED_MX or t.space is not Space.SBUF:
        raise kernel_error(f"{what} must be an SBUF tile of float8_e5m2_x4, float8_e4m3fn_x4 or float4_e2m1fn_x4, "
                           f"got {t.dtype_name} in {t.space}")  # fmt: skip
    return t


def _scale(x: Any, what: str, data: NkiTensor) -> NkiTensor:
    t = _c.tile(x, what)
    if t.dtype_name not in _SCALES or t.space is not Space.SBUF:
        raise kernel_error(f"{what} must be an SBUF tile of float8_e8m0fnu or uint8, got {t.dtype_name}")
    k = data.shape[0]
    need = (k - 1) // 32 * 32 + min(k, 32) // 8  # the quadrant layout (nprof.device.mx.scale_rows)
    if t.shape[0] < need or _c._numel_free(t) != _c._numel_free(data):
        raise kernel_error(f"{what} {t.shape} must have at least {need} partitions (4 per 32-partition quadrant of "
                           f"the data) and the data's free size {_c._numel_free(data)}")  # fmt: skip
    return t
