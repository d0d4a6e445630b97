"""Layer and batch normalisation forward (NKI): VectorE BN_STATS/BN_AGGR, ScalarE rsqrt, normalise + affine.

Contract: `layer_norm_kernel(out, mean, rstd, src, n_norm, weight, bias, eps)` normalises the last `n_norm`
dims of `src` (at most `FREE_MAX` elements per row); `mean`/`rstd` are the per-row statistics with the
normalised dims of size 1 (as ``aten.native_layer_norm`` returns them); `weight`/`bias` are Views of the
normalised shape or None. `batch_norm_kernel` is training batch norm in one kernel (statistics, normalise,
affine and the running-statistics update; see its doc). The backward passes are lowered from their ATen
decompositions.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nprof.arch.isa import Access, Space
from nprof.compiler.kernels.hbm import flat, load, store
from nprof.compiler.kernels.norm_spread import (
    batch_norm_backward_spread,
    batch_norm_spread,
    spread_access,
    spread_factor,
)
from nprof.compiler.regather_check import nonfinite_checked
from nprof.compiler.views import FREE_MAX, View, numel, row_tiles
from nprof.errors import UnsupportedOpError
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki import trace
from nprof.nki.isa import BN_STATS_FMAX
from nprof.nki.tensor import NkiTensor


def _stat_view(v: View, shape: tuple[int, ...]) -> View:
    strides = tuple(st if i < len(v.shape) and v.shape[i] != 1 else 0 for i, st in enumerate(v.strides))
    return View(v.tensor, v.dtype, shape, strides + (0,) * (len(shape) - len(strides)), v.offset)


def _column(a: Access) -> Access:
    return Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride)


def _row_stats(x: NkiTensor) -> NkiTensor:
    """BN_STATS of an SBUF [P, F] tile in chunks of at most `BN_STATS_FMAX` elements: [P, 6 * chunks], the input
    of one BN_AGGR (a layer norm over more than 512 elements per row)."""
    f = x.shape[1]
    starts = range(0, f, BN_STATS_FMAX)
    if len(starts) == 1:
        return nisa.bn_stats(x)
    stats = nl.ndarray((x.shape[0], 6 * len(starts)), dtype=nl.float32, buffer=nl.sbuf)
    for j, k in enumerate(starts):
        nisa.bn_stats(x[:, k : min(k + BN_STATS_FMAX, f)], dst=stats[:, 6 * j : 6 * j + 6])
    return stats


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
        # [P, 2]: mean, variance; a non-finite one (an inf or NaN in the row, or a variance overflowing) runs the
        # call eagerly: eager's mean of a row holding an inf is NaN or inf by its position, the backward reads it
        mv = nonfinite_checked(nisa.bn_aggr(_row_stats(x)))
        mu = mv[:, 0:1]
        rs = nisa.activation(op="rsqrt", data=nisa.tensor_scalar(mv[:, 1:2], "add", eps))
        y = nisa.tensor_scalar(x, "subtract", mu, op1="multiply", operand1=rs)
        for k, (op, v) in enumerate(affine):
            y = nisa.tensor_tensor(y, flat(load(spec.access(4 + k, v))), op)
        store(spec.access(0, out), y)
        store(_column(spec.access(2, operands[2])), mu)
        store(_column(spec.access(3, operands[3])), rs)


BN_BLOCK = 2048  # elements per partition one batch-norm block loads (8 KiB fp32)


def _channel_blocks(x: View, c0: int, cc: int) -> list[Access]:
    """HBM accesses [cc, elements] covering channels c0..c0+cc of a contiguous [N, C, *spatial] view, each at
    most `BN_BLOCK` elements per partition: groups of whole images, or runs within one image."""
    n, c = x.shape[0], x.shape[1]
    hw = numel(x.shape[2:])
    base = x.offset + c0 * hw
    if hw <= BN_BLOCK:
        per = max(1, BN_BLOCK // hw)
        return [Access(Space.HBM, x.tensor, x.dtype, base + i * c * hw, cc, ((c * hw, min(per, n - i)), (1, hw)), 0,
                       hw) for i in range(0, n, per)]  # fmt: skip
    return [Access(Space.HBM, x.tensor, x.dtype, base + i * c * hw + h, cc, ((1, min(BN_BLOCK, hw - h)),), 0, hw)
            for i in range(n) for h in range(0, hw, BN_BLOCK)]  # fmt: skip


def _col(v: View, c0: int, cc: int) -> Access:
    """Elements c0..c0+cc of a 1-D view as a column [cc, 1] (one per partition)."""
    return Access(Space.HBM, v.tensor, v.dtype, v.offset + c0 * v.strides[0], cc, ((1, 1),), 0, v.strides[0])


def batch_norm_kernel(outs: tuple[View, View, View, View, View], x: View, weight: View | None, bias: View | None,
                      running: tuple[View, View], momentum: float, eps: float) -> None:  # fmt: skip
    """Training batch norm of x [N, C, *spatial] in one kernel per 128 channels (channels on partitions):
    VectorE BN_STATS over every block then one BN_AGGR give the batch mean and (biased) variance; rsqrt on
    ScalarE; the affine folds into a per-channel scale = weight * rstd and shift = bias - mean * scale, so the
    normalisation is one ScalarE ACTIVATE (x * scale + shift) per block, blocks kept in SBUF between the two
    passes. `outs` = (out, save_mean, save_rstd, new running_mean, new running_var), as
    ``aten._native_batch_norm_legit_functional`` returns them (running var updated with the unbiased
    variance, n / (n - 1))."""
    out = outs[0]
    count = x.shape[0] * numel(x.shape[2:])
    k = spread_factor(tuple(x.shape)) if x.is_contiguous and out.is_contiguous else 1
    holds = getattr(trace.current(), "holds", None)
    if k > 1 and holds is not None and holds(spread_access(x, k)):  # the producer left x spread: stay spread
        mean, var, rstd = batch_norm_spread(out, x, weight, bias, eps, k)
        _statistics(outs, running, (mean, var, rstd), count, momentum, (0, x.shape[1]))
        return
    for c0 in range(0, x.shape[1], 128):
        cc = min(128, x.shape[1] - c0)
        blocks = _channel_blocks(x, c0, cc)
        chunks = sum(-(-a.free_elements // BN_STATS_FMAX) for a in blocks)
        stats = nl.ndarray((cc, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        j = 0
        for a in blocks:
            t = flat(load(a))
            for k in range(0, a.free_elements, BN_STATS_FMAX):
                nisa.bn_stats(t[:, k : min(k + BN_STATS_FMAX, a.free_elements)], dst=stats[:, 6 * j : 6 * j + 6])
                j += 1
        mv = nisa.bn_aggr(stats)
        mean, var = mv[:, 0:1], mv[:, 1:2]
        rstd = nisa.activation(op="rsqrt", data=nisa.tensor_scalar(var, "add", eps))
        scale = rstd if weight is None else nisa.tensor_tensor(flat(load(_col(weight, c0, cc))), rstd, "multiply")
        moved = nisa.tensor_tensor(mean, scale, "multiply")
        if bias is None:
            shift = nisa.tensor_scalar(moved, "multiply", -1.0)
        else:
            shift = nisa.tensor_tensor(flat(load(_col(bias, c0, cc))), moved, "subtract")
        for a in blocks:
            y = nisa.activation(op="copy", data=flat(load(a)), scale=scale, bias=shift)
            into = dataclasses.replace(a, tensor=out.tensor, offset=a.offset - x.offset + out.offset)
            store(into, y.unflatten_free(into.shape[1:]))  # in the pattern's shape: kept in SBUF for the consumer
        _statistics(outs, running, (mean, var, rstd), count, momentum, (c0, cc))


def _statistics(outs: tuple[View, ...], running: tuple[View, View], stats: tuple[NkiTensor, NkiTensor, NkiTensor],
                count: int, momentum: float, chunk: tuple[int, int]) -> None:  # fmt: skip
    """Store channels chunk[0].. (chunk[1] of them) of the new running statistics (running var updated with
    the unbiased variance) and the saved mean and rstd, from the [cc, 1] columns (mean, biased var, rstd)."""
    _, save_mean, save_rstd, new_mean, new_var = outs
    mean, var, rstd = stats
    c0, cc = chunk
    unbiased = nisa.tensor_scalar(var, "multiply", count / max(count - 1, 1))
    for dst, stat, run in ((new_mean, mean, running[0]), (new_var, unbiased, running[1])):
        kept = nisa.tensor_scalar(flat(load(_col(run, c0, cc))), "multiply", 1.0 - momentum)
        store(_col(dst, c0, cc), nisa.tensor_tensor(nisa.tensor_scalar(stat, "multiply", momentum), kept, "add"))
    store(_col(save_mean, c0, cc), mean)
    store(_col(save_rstd, c0, cc), rstd)


def _reduced(blocks: list[Access], per_block: Any) -> NkiTensor:
    """Sum over `blocks` of the [cc, 1] columns `per_block(access)` returns."""
    total = None
    for a in blocks:
        part = per_block(a)
        total = part if total is None else nisa.tensor_tensor(total, part, "add")
    assert total is not None
    return total


def batch_norm_backward_kernel(grads: tuple[View | None, ...], g: View, x: View, weight: View | None,
                               stats: tuple[View, View], train: bool, eps: float) -> None:  # fmt: skip
    """``aten.native_batch_norm_backward`` in one kernel per 128 channels, with its decomposition's formulas:
    sum_g = sum(g), dot = sum(g * (x - mean)) (one pass over the blocks), then grad_input = ((g - (x - mean)
    * dot / n * rstd^2) - sum_g / n) * rstd * weight in training, g * rstd * weight otherwise (a second pass,
    blocks kept in SBUF); grad_weight = dot * rstd, grad_bias = sum_g. `stats` = (save_mean, save_invstd) in
    training, (running_mean, running_var) otherwise; `grads` = (grad_input, grad_weight, grad_bias) Views or
    None where not asked."""
    k = spread_factor(tuple(x.shape)) if x.is_contiguous and g.is_contiguous else 1
    if k > 1 and (grads[0] is None or grads[0].is_contiguous):  # few channels: on all partitions
        batch_norm_backward_spread(grads, g, x, weight, stats, train, eps, k)
        return
    dx, dw, db = grads
    n = x.shape[0] * numel(x.shape[2:])
    for c0 in range(0, x.shape[1], 128):
        cc = min(128, x.shape[1] - c0)
        gblocks, xblocks = _channel_blocks(g, c0, cc), _channel_blocks(x, c0, cc)
        mean = flat(load(_col(stats[0], c0, cc)))
        rstd = flat(load(_col(stats[1], c0, cc)))
        if not train:
            rstd = nisa.activation(op="rsqrt", data=nisa.tensor_scalar(rstd, "add", eps))
        pairs = list(zip(gblocks, xblocks, strict=True))
        sum_g = _reduced(gblocks, lambda a: nisa.tensor_reduce("add", flat(load(a)), axis=1, keepdims=True))

        def dot_of(pair: tuple[Access, Access], mean: NkiTensor = mean) -> NkiTensor:
            centred = nisa.tensor_scalar(flat(load(pair[1])), "subtract", mean)
            return nisa.tensor_reduce("add", nisa.tensor_tensor(flat(load(pair[0])), centred, "multiply"), axis=1,
                                      keepdims=True)  # fmt: skip

        dot = _reduced(pairs, dot_of)  # type: ignore[arg-type]
        scale = rstd if weight is None else nisa.tensor_tensor(rstd, flat(load(_col(weight, c0, cc))), "multiply")
        if dx is not None:
            proj = nisa.tensor_tensor(nisa.tensor_scalar(dot, "multiply", 1.0 / n), nisa.tensor_tensor(rstd, rstd,
                                      "multiply"), "multiply")  # fmt: skip
            grad_mean = nisa.tensor_scalar(sum_g, "multiply", 1.0 / n)
            for ga, xa in pairs:
                gt = flat(load(ga))
                if train:
                    p = nisa.tensor_scalar(flat(load(xa)), "subtract", mean, op1="multiply", operand1=proj)
                    res = nisa.tensor_scalar(nisa.tensor_tensor(gt, p, "subtract"), "subtract", grad_mean,
                                             op1="multiply", operand1=scale)  # fmt: skip
                else:
                    res = nisa.tensor_scalar(gt, "multiply", scale)
                dst = dataclasses.replace(ga, tensor=dx.tensor, offset=ga.offset - g.offset + dx.offset)
                store(dst, res.unflatten_free(dst.shape[1:]))
        if dw is not None:
            store(_col(dw, c0, cc), nisa.tensor_tensor(dot, rstd, "multiply"))
        if db is not None:
            store(_col(db, c0, cc), sum_g)
