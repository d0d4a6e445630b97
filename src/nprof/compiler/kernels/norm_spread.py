"""Batch-norm backward of few channels spread over all 128 partitions (NKI).

Contract: `spread_factor(shape)` is k > 1 when a contiguous [N, C, *spatial] tensor of C <= `SPREAD_MAX_C`
channels (128 % C == 0) can lie on C * k = 128 partitions, channel c on partitions c * k .. c * k + k - 1, partition
c * k + j holding the j-th of k equal parts of every image's plane of channel c (one HBM access: partition
stride plane / k), and one such tile fits a block; else 1. `batch_norm_backward_spread(grads, g, x, weight,
stats, train, eps, k)` is `kernels.norm.batch_norm_backward_kernel` in that layout: the elementwise passes
run on 128 partitions instead of C (VectorE time per element is per partition: 8x faster for 16 channels).
Values cross partitions only by TensorE transposes (data moves, no multiplication): a per-channel sum is
the transpose of the k partitions' partial sums, a VectorE sum of each channel's k columns and a transpose
back (`per_channel`); a per-channel value reaches its k partitions as the transpose of its column repeated k
times (`spread`). Several columns move together. No channel's value is ever multiplied by another's 0/1
selection weight, so an inf or NaN in one channel stays in that channel (0 x inf would spread NaN), as in
eager. Same formulas as the one-partition-per-channel kernel; the sums over a channel's elements are added
in another order (k partial sums), within fp32 rounding of the other kernel's.
"""

from __future__ import annotations

from nprof.arch.isa import Access, Space
from nprof.compiler.kernels.hbm import flat, load, store
from nprof.compiler.views import View, numel
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki.tensor import NkiTensor

P = 128
BLOCK = 8192  # elements per partition the spread tile may take (as `kernels.norm.BN_BLOCK`)
SPREAD_MAX_C = 32  # channels up to which the backward spreads: with 64 (2 partitions each) the saving on
# VectorE was smaller than the reloads its layout costs the next kernel (resnet18 backward 958 -> 1003 us)


def spread_factor(shape: tuple[int, ...]) -> int:
    """k such that C * k = 128 partitions hold the channels (see module doc), or 1."""
    n, c, plane = shape[0], shape[1], numel(shape[2:])
    if c > SPREAD_MAX_C or P % c:
        return 1
    k = P // c
    return k if plane % k == 0 and n * plane // k <= BLOCK else 1


def spread_access(v: View, k: int) -> Access:
    """[C * k, N, plane / k] of a contiguous [N, C, *spatial] view (see module doc)."""
    n, c, plane = v.shape[0], v.shape[1], numel(v.shape[2:])
    part = plane // k
    return Access(Space.HBM, v.tensor, v.dtype, v.offset, c * k, ((c * plane, n), (1, part)), 0, part)


def per_channel(partial: NkiTensor, k: int) -> NkiTensor:
    """[C * k, m] partial sums (channel c on partitions c * k..) -> [C, m] channel sums (see module doc)."""
    c = partial.shape[0] // k
    rows = nisa.nc_transpose(partial)  # [m, C * k]
    sums = nisa.tensor_reduce("add", rows.unflatten_free((c, k)), axis=2)  # [m, C]
    return nisa.tensor_copy(nisa.nc_transpose(sums))


def spread(col: NkiTensor, k: int) -> NkiTensor:
    """[C, m] per-channel values -> [C * k, m], channel c's row on partitions c * k.. (see module doc)."""
    row = nisa.nc_transpose(col)  # [m, C] in PSUM, read once by the repeating copy
    p0, e0, dims = row.access_key()
    repeated = NkiTensor(row.base, p0, e0, (*dims, (0, 0, k)), ())  # [m, C, k]: each value k times
    wide = nisa.tensor_copy(repeated).flatten_free()  # [m, C * k]
    assert wide is not None
    return nisa.tensor_copy(nisa.nc_transpose(wide))


def respread(res: NkiTensor, k: int) -> NkiTensor:
    """A channels-on-partitions tile [C, N, plane] (plane % k == 0, plane / k <= 128, C * k <= 128) in the
    spread layout [C * k, N, plane / k] (module doc), moved across partitions by TensorE transposes only (data
    moves, exact): per image, each of the k parts transposed into the columns (c, part) of one PSUM tile, then
    that [plane / k, C * k] tile transposed back."""
    c, n, plane = res.shape
    part = plane // k
    out = nl.ndarray((c * k, n, part), dtype=nl.float32, buffer=nl.sbuf)
    for img in range(n):
        cols = nl.ndarray((part, c * k), dtype=nl.float32, buffer=nl.psum)
        for b in range(k):
            nisa.nc_transpose(res[:, img, b * part : (b + 1) * part], dst=cols[:, b : c * k : k])
        nisa.tensor_copy(nisa.nc_transpose(nisa.tensor_copy(cols)), dst=out[:, img, :])
    return out


def _columns(p: int, m: int) -> NkiTensor:
    """A [p, m] tile whose columns the kernel fills one by one (one transpose then moves them all)."""
    return nl.ndarray((p, m), dtype=nl.float32, buffer=nl.sbuf)


def batch_norm_backward_spread(grads: tuple[View | None, ...], g: View, x: View, weight: View | None,
                               stats: tuple[View, View], train: bool, eps: float, k: int) -> None:  # fmt: skip
    """See module doc; arguments as `kernels.norm.batch_norm_backward_kernel`'s."""
    dx, dw, db = grads
    c = x.shape[1]
    n = x.shape[0] * numel(x.shape[2:])

    def column(v: View) -> NkiTensor:
        return flat(load(Access(Space.HBM, v.tensor, v.dtype, v.offset, c, ((1, 1),), 0, v.strides[0])))

    gt, xt = flat(load(spread_access(g, k))), flat(load(spread_access(x, k)))
    mean, rstd = column(stats[0]), column(stats[1])
    if not train:
        rstd = nisa.activation(op="rsqrt", data=nisa.tensor_scalar(rstd, "add", eps))
    mean_p = spread(mean, k)
    centred = nisa.tensor_scalar(xt, "subtract", mean_p)
    partial = _columns(P, 2)
    nisa.tensor_reduce("add", gt, axis=1, keepdims=True, dst=partial[:, 0:1])
    nisa.tensor_reduce("add", nisa.tensor_tensor(gt, centred, "multiply"), axis=1, keepdims=True, dst=partial[:, 1:2])
    sums = per_channel(partial, k)  # [C, 2]: sum(g), sum(g * (x - mean))
    sum_g, dot = sums[:, 0:1], sums[:, 1:2]
    scale = rstd if weight is None else nisa.tensor_tensor(rstd, column(weight), "multiply")
    if dx is not None:
        if train:
            narrow = _columns(c, 3)  # proj, grad_mean, scale per channel
            nisa.tensor_tensor(nisa.tensor_scalar(dot, "multiply", 1.0 / n), nisa.tensor_tensor(rstd, rstd, "multiply"),
                               "multiply", dst=narrow[:, 0:1])  # fmt: skip
            nisa.tensor_scalar(sum_g, "multiply", 1.0 / n, dst=narrow[:, 1:2])
            nisa.tensor_copy(scale, dst=narrow[:, 2:3])
            wide = spread(narrow, k)  # [128, 3]
            p = nisa.tensor_scalar(xt, "subtract", mean_p, op1="multiply", operand1=wide[:, 0:1])
            res = nisa.tensor_scalar(nisa.tensor_tensor(gt, p, "subtract"), "subtract", wide[:, 1:2],
                                     op1="multiply", operand1=wide[:, 2:3])  # fmt: skip
        else:
            res = nisa.tensor_scalar(gt, "multiply", spread(scale, k))
        into = spread_access(dx, k)
        store(into, res.unflatten_free(into.shape[1:]))
    if dw is not None:
        store(Access(Space.HBM, dw.tensor, dw.dtype, dw.offset, c, ((1, 1),), 0, dw.strides[0]),
              nisa.tensor_tensor(dot, rstd, "multiply"))  # fmt: skip
    if db is not None:
        store(Access(Space.HBM, db.tensor, db.dtype, db.offset, c, ((1, 1),), 0, db.strides[0]), sum_g)


def batch_norm_spread(out: View, x: View, weight: View | None, bias: View | None, eps: float,
                      k: int) -> tuple[NkiTensor, NkiTensor, NkiTensor]:  # fmt: skip
    """Training batch-norm forward of a contiguous [N, C, *spatial] x in the spread layout (module doc): per
    partition BN_STATS/BN_AGGR give its part's mean m_p and variance v_p (equal counts), the channel's
    mean is the mean of its k m_p and its variance the mean of v_p + (m_p - mean)^2 (the exact pooled
    variance); out = x * scale + shift with scale = weight * rstd, shift = bias - mean * scale, one ScalarE
    pass on 128 partitions, stored in the spread pattern. Returns the per-channel [C, 1] (mean, biased
    variance, rstd) for the running and saved statistics."""
    from nprof.nki.isa import BN_STATS_FMAX

    c = x.shape[1]
    xt = flat(load(spread_access(x, k)))
    free = xt.shape[1]
    chunks = -(-free // BN_STATS_FMAX)
    stats = nl.ndarray((P, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
    for j, f0 in enumerate(range(0, free, BN_STATS_FMAX)):
        nisa.bn_stats(xt[:, f0 : min(f0 + BN_STATS_FMAX, free)], dst=stats[:, 6 * j : 6 * j + 6])
    mv = nisa.bn_aggr(stats)  # [128, 2]: each partition's mean and variance
    mean = nisa.tensor_scalar(per_channel(mv[:, 0:1], k), "multiply", 1.0 / k)
    apart = nisa.tensor_tensor(mv[:, 0:1], spread(mean, k), "subtract")
    pooled = nisa.tensor_tensor(apart, apart, "multiply")
    var = nisa.tensor_scalar(per_channel(nisa.tensor_tensor(pooled, mv[:, 1:2], "add"), k), "multiply", 1.0 / k)
    rstd = nisa.activation(op="rsqrt", data=nisa.tensor_scalar(var, "add", eps))

    def column(v: View) -> NkiTensor:
        return flat(load(Access(Space.HBM, v.tensor, v.dtype, v.offset, c, ((1, 1),), 0, v.strides[0])))

    affine = _columns(c, 2)  # scale, shift per channel
    scale = affine[:, 0:1]
    if weight is None:
        nisa.tensor_copy(rstd, dst=scale)
    else:
        nisa.tensor_tensor(column(weight), rstd, "multiply", dst=scale)
    moved = nisa.tensor_tensor(mean, scale, "multiply")
    if bias is None:
        nisa.tensor_scalar(moved, "multiply", -1.0, dst=affine[:, 1:2])
    else:
        nisa.tensor_tensor(column(bias), moved, "subtract", dst=affine[:, 1:2])
    wide = spread(affine, k)
    y = nisa.activation(op="copy", data=xt, scale=wide[:, 0:1], bias=wide[:, 1:2])
    into = spread_access(out, k)
    store(into, y.unflatten_free(into.shape[1:]))
    return mean, var, rstd
