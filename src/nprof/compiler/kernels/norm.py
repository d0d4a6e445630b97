"""Layer normalisation forward (NKI): VectorE BN_STATS/BN_AGGR per row, ScalarE rsqrt, VectorE normalise + affine.

Contract: `layer_norm_kernel(out, mean, rstd, src, n_norm, weight, bias, eps)` normalises the last `n_norm`
dims of `src` (at most `FREE_MAX` elements per row); `mean`/`rstd` are the per-row statistics with the
normalised dims of size 1 (as ``aten.native_layer_norm`` returns them); `weight`/`bias` are Views of the
normalised shape or None. The backward pass is lowered from its ATen decomposition.
"""

from __future__ import annotations

from nprof.arch.isa import Access
from nprof.compiler.kernels.hbm import flat, load, store
from nprof.compiler.views import FREE_MAX, View, row_tiles
from nprof.errors import UnsupportedOpError
from nprof.nki import isa as nisa


def _stat_view(v: View, shape: tuple[int, ...]) -> View:
    strides = tuple(st if i < len(v.shape) and v.shape[i] != 1 else 0 for i, st in enumerate(v.strides))
    return View(v.tensor, v.dtype, shape, strides + (0,) * (len(shape) - len(strides)), v.offset)


def _column(a: Access) -> Access:
    return Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride)


def layer_norm_kernel(
    out: View, mean: View, rstd: View, src: View, n_norm: int, weight: View | None, bias: View | None, eps: float
) -> None:
    nd = len(src.shape)
    cols = list(range(nd - n_norm, nd))
    row = 1
    for d in cols:
        row *= src.shape[d]
    if row > FREE_MAX:
        raise UnsupportedOpError(f"layer_norm over {row} elements (at most {FREE_MAX} per row)")
    operands = [out, src, _stat_view(mean, src.shape), _stat_view(rstd, src.shape)]
    affine = [(op, v.expand(src.shape)) for op, v in (("multiply", weight), ("add", bias)) if v is not None]
    operands += [v for _, v in affine]
    for spec in row_tiles(src.shape, [v.strides for v in operands], cols):
        x = flat(load(spec.access(1, src)))
        mv = nisa.bn_aggr(nisa.bn_stats(x))  # [P, 2]: mean, variance
        mu = mv[:, 0:1]
        rs = nisa.activation(op="rsqrt", data=nisa.tensor_scalar(mv[:, 1:2], "add", eps))
        y = nisa.tensor_scalar(x, "subtract", mu, op1="multiply", operand1=rs)
        for k, (op, v) in enumerate(affine):
            y = nisa.tensor_tensor(y, flat(load(spec.access(4 + k, v))), op)
        store(spec.access(0, out), y)
        store(_column(spec.access(2, operands[2])), mu)
        store(_column(spec.access(3, operands[3])), rs)
