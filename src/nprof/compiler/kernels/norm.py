"""Layer normalisation forward: VectorE BN_STATS/BN_AGGR per row, ScalarE rsqrt, VectorE normalise + affine.

Contract: `layer_norm_kernel(em, out, mean, rstd, src, n_norm, weight, bias, eps)` normalises the last
`n_norm` dims of `src` (at most `FREE_MAX` elements per row); `mean`/`rstd` are the per-row statistics with
the normalised dims of size 1 (as ``aten.native_layer_norm`` returns them); `weight`/`bias` are Views of the
normalised shape or None. The backward pass is lowered from its ATen decomposition.
"""

from __future__ import annotations

from nprof.arch.isa import Access
from nprof.compiler.emit import Emitter
from nprof.compiler.views import FREE_MAX, View, row_tiles
from nprof.errors import UnsupportedOpError


def _stat_view(v: View, shape: tuple[int, ...]) -> View:
    strides = tuple(st if i < len(v.shape) and v.shape[i] != 1 else 0 for i, st in enumerate(v.strides))
    return View(v.tensor, v.dtype, shape, strides + (0,) * (len(shape) - len(strides)), v.offset)


def layer_norm_kernel(
    em: Emitter,
    out: View,
    mean: View,
    rstd: View,
    src: View,
    n_norm: int,
    weight: View | None,
    bias: View | None,
    eps: float,
) -> None:
    nd = len(src.shape)
    cols = list(range(nd - n_norm, nd))
    row = 1
    for d in cols:
        row *= src.shape[d]
    if row > FREE_MAX:
        raise UnsupportedOpError(f"layer_norm over {row} elements (at most {FREE_MAX} per row)")
    m_full = _stat_view(mean, src.shape)
    r_full = _stat_view(rstd, src.shape)
    operands = [out, src, m_full, r_full]
    if weight is not None:
        operands.append(weight.expand(src.shape))
    if bias is not None:
        operands.append(bias.expand(src.shape))
    for spec in row_tiles(src.shape, [v.strides for v in operands], cols):
        x = em.load(spec.access(1, src))
        stats = em.sbuf(x.p, 3)
        em.bn_stats(stats, x)
        mv = em.sbuf(x.p, 2)
        em.bn_aggr(mv, stats)
        mu = mv.cols(0, 1)
        rs = em.sbuf(x.p, 1)
        em.tensor_scalar(rs, mv.cols(1, 1), "add", eps)
        em.activation(rs, rs, "rsqrt")
        y = em.sbuf(*x.shape)
        em.tensor_scalar(y, x, "subtract", mu, op1="multiply", operand1=rs)
        k = 4
        for op, v in (("multiply", weight), ("add", bias)):
            if v is not None:
                t = em.load(spec.access(k, operands[k]))
                em.tensor_tensor(y, y, t, op)
                k += 1
        em.store(spec.access(0, out), y)
        for i, t in ((2, mu), (3, rs)):
            a = spec.access(i, operands[i])
            em.store(Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride), t)
