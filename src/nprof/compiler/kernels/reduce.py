"""Reductions and softmax (NKI): rows on partitions, the reduced dims on the free axis.

Contract:
* `reduce_kernel(out, src, dims, op, scale=1.0)`: ``out`` (the kept dims, any keepdim size-1 dims squeezed
  out) = ``scale * reduce_op(src over dims)`` with op "add", "max" or "min". Sums over leading dims go to
  TensorE (`sum_rows_kernel`); otherwise kept dims go on partitions and the reduced dims are the free dims of
  each tile (VectorE TENSOR_REDUCE), partial results of rows longer than a tile combined on VectorE. A
  reduction to a single value puts the reduced elements on partitions, reduces each partition, transposes
  the column on TensorE and reduces again.
* `argmax_kernel(values, indices, src, dim)`: row max and first index of it (``max.dim``, ``argmax``).
* `softmax_kernel(out, src, dim, log)`: softmax / log_softmax along `dim` (at most `FREE_MAX` elements):
  VectorE row max (negated), ScalarE exp with the -max bias and a fused row sum, then VectorE reciprocal and
  scale (softmax) or ScalarE log and one VectorE subtract (log_softmax).
"""

from __future__ import annotations

from collections.abc import Sequence

from nprof.arch.isa import Access, Space
from nprof.compiler import tilechoice
from nprof.compiler.kernels.hbm import flat, load, store
from nprof.compiler.kernels.matmul import sum_rows_kernel
from nprof.compiler.regather_check import nonfinite_checked
from nprof.compiler.views import FREE_MAX, PMAX, TileSpec, View, numel, row_tiles, view_access
from nprof.errors import UnsupportedOpError
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki import trace
from nprof.nki.tensor import NkiTensor

_ALU = {"add": "add", "max": "maximum", "min": "minimum"}  # combining partial results


def _reduce_free(x: NkiTensor, op: str) -> NkiTensor:
    return nisa.tensor_reduce(op, flat(x), axis=1, keepdims=True)


def reduce_kernel(out: View, src: View, dims: Sequence[int], op: str, scale: float = 1.0) -> None:
    nd = len(src.shape)
    red = sorted({d % nd for d in dims}) if dims else list(range(nd))
    kept = [d for d in range(nd) if d not in red]
    if op == "add" and red == list(range(len(red))) and kept:  # leading dims: a ones-vector matmul on TensorE
        if _sum_groups(out, src, len(red), scale):
            return
        rows = src.reshape([numel(src.shape[d] for d in red), numel(src.shape[d] for d in kept)])
        flat_out = out.reshape([1, rows.shape[1]]) if rows is not None else None
        if rows is not None and flat_out is not None and rows.strides[1] == 1:
            sum_rows_kernel(flat_out, rows, scale)
            return
    if all(src.shape[d] == 1 for d in kept):
        _reduce_all(out, src, op, scale)
        return
    if _short_rows(out, src, red, op, scale):
        return
    if len(red) == 1 and _grouped_rows(out, src, red[0], op, scale):
        return
    perm = src.permute(kept + red)
    out_strides = tuple(out.strides[i] if i < len(kept) else 0 for i in range(nd))
    out_full = View(out.tensor, out.dtype, perm.shape, out_strides, out.offset)
    partial: dict[tuple[int, int], tuple[NkiTensor, TileSpec]] = {}
    for spec in row_tiles(perm.shape, [out_full.strides, perm.strides], list(range(len(kept), nd))):
        r = _reduce_free(load(spec.access(1, perm)), op)
        key = (spec.offsets[0], spec.partitions)
        if key in partial:
            partial[key] = (nisa.tensor_tensor(partial[key][0], r, _ALU[op]), spec)
        else:
            partial[key] = (r, spec)
    for acc, spec in partial.values():
        res = acc if scale == 1.0 else nisa.tensor_scalar(acc, "multiply", scale)
        a = spec.access(0, out_full)
        store(Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride), res)


def _sum_groups(out: View, src: View, lead: int, scale: float) -> bool:
    """A sum over the `lead` leading dims of a contiguous [R, T..., C] `src` whose R * T rows of C elements
    fit one tile (the batch sum of a [B, T, C] gradient, as a position embedding's backward takes it): one
    matmul of the natural [R * T, C] tile (usually still in SBUF) with a 0/1 selection S[(r, t), t'] = (t ==
    t'), giving the [T, C] sums on T partitions (stored as such, where the consumer reads them); exact for
    finite values only (0 x inf = NaN in other sums), so its result is checked as a regather's is
    (`nprof.compiler.regather_check`) and a program lowered without regathers does not use it. False
    (nothing emitted) when it does not apply."""
    cols = src.shape[-1]
    groups = numel(src.shape[lead:-1]) if len(src.shape) > lead else 1
    rows = numel(src.shape)
    if (len(src.shape) <= lead + 1 or not src.is_contiguous or not out.is_contiguous or rows // cols > PMAX
            or cols > 512 or groups == 1 or scale != 1.0
            or not getattr(trace.current(), "regathers", True)):  # fmt: skip  # the program run when a check failed
        return False
    n = rows // cols
    x = load(Access(Space.HBM, src.tensor, src.dtype, src.offset, n, ((1, cols),), 0, cols))
    ramp = nisa.iota(nl.arange(n)[:, None] + nl.arange(groups)[None, :] * -1 + groups * n, dtype=nl.float32)
    sel = nisa.tensor_scalar(ramp, "mod", float(groups), op1="is_equal", operand1=0.0)  # (p - t') % T == 0
    acc = nl.ndarray((groups, cols), dtype=nl.float32, buffer=nl.psum)
    acc[...] = nisa.nc_matmul(sel, x)
    from nprof.compiler.kernels import engines

    check = getattr(trace.current(), "check", None)  # an inf puts 0 x inf = NaN in other sums: checked as regathers
    if check is not None:
        res = nl.ndarray((groups, cols), dtype=nl.float32, buffer=nl.sbuf)
        check.evacuate(acc, res)
    else:
        res = engines.copy(acc)
    store(Access(Space.HBM, out.tensor, out.dtype, out.offset, groups, ((1, cols),), 0, cols), res)
    return True


def _grouped_rows(out: View, src: View, dim: int, op: str, scale: float) -> bool:
    """A reduction along one dim of `src` whose producer left it in SBUF with several whole rows per partition
    (`row_specs`): each tile [P, G, N] reduced along its rows into [P, G], stored as such. False (nothing
    emitted) when there is no such tiling."""
    strides = list(out.strides)
    strides.insert(dim, 0)
    full = View(out.tensor, out.dtype, src.shape, tuple(strides), out.offset)
    n = src.shape[dim]
    specs = row_specs(full, src, dim, [])
    if not specs or all(numel(spec.free_sizes) == n for spec in specs):
        return False
    for spec in specs:
        res = nisa.tensor_reduce(op, _rows3(load(spec.access(1, src)), n), axis=2)
        if scale != 1.0:
            res = nisa.tensor_scalar(res, "multiply", scale)
        a = spec.access(0, full)
        free = a.free[:-1] or ((0, 1),)
        store(Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, free, 0, a.partition_stride),
              res.unflatten_free(tuple(size for _, size in free)) if len(free) > 1 else res)  # fmt: skip
    return True


SHORT_ROW = 8  # reduced elements per row up to which rows are packed several per partition
SHORT_ROWS_MIN = 8 * PMAX  # ... when there are at least this many rows (else the row tiles are few)


def _short_rows(out: View, src: View, red: list[int], op: str, scale: float) -> bool:
    """Many short rows (the reduced dims trailing, at most `SHORT_ROW` elements, at least `SHORT_ROWS_MIN` rows;
    `src` and `out` contiguous): R whole rows per partition, so 128 * R rows move in one load and one store (a
    global average pool of a 1x1 map would otherwise take one DMA each way per 128 rows); the rest, fewer than
    128 * R rows, one row per partition. Each row is reduced over the same elements as one row per partition
    would be. False when the layout does not apply (nothing emitted). Longer or fewer rows keep one row per
    partition: the [128, 1] results a consumer's row tiles read (a softmax backward's row sums) stay windows of
    the kept tile."""
    nd = len(src.shape)
    length = numel(src.shape[d] for d in red)
    rows = numel(src.shape) // max(length, 1)
    if (red != list(range(nd - len(red), nd)) or length > SHORT_ROW or rows < SHORT_ROWS_MIN or not src.is_contiguous
            or not out.is_contiguous or numel(out.shape) != rows):  # fmt: skip
        return False
    per = min(FREE_MAX // length, rows // PMAX)
    r0 = 0
    while r0 < rows:
        parts, r = (PMAX, per) if rows - r0 >= PMAX * per else (min(PMAX, rows - r0), 1)
        a = Access(Space.HBM, src.tensor, src.dtype, src.offset + r0 * length, parts, ((1, r * length),), 0, r * length)
        res = nisa.tensor_reduce(op, flat(load(a)).unflatten_free((r, length)), axis=2)
        if scale != 1.0:
            res = nisa.tensor_scalar(res, "multiply", scale)
        store(Access(Space.HBM, out.tensor, out.dtype, out.offset + r0, parts, ((1, r),), 0, r), res)
        r0 += parts * r
    return True


def _reduce_all(out: View, src: View, op: str, scale: float) -> None:
    acc: NkiTensor | None = None
    for spec in row_tiles(src.shape, [src.strides]):
        col = _reduce_free(load(spec.access(0, src)), op)
        if col.shape[0] > 1:
            col = _reduce_free(nisa.nc_transpose(col), op)
        acc = col if acc is None else nisa.tensor_tensor(acc, col, _ALU[op])
    assert acc is not None
    if scale != 1.0:
        acc = nisa.tensor_scalar(acc, "multiply", scale)
    store(view_access(View(out.tensor, out.dtype, (1,), (0,), out.offset), None, (0,), (1,), (0,)), acc)


def row_specs(out: View, src: View, dim: int, fallback: list[TileSpec]) -> list[TileSpec]:
    """Tiles for a row-wise kernel along `dim` of `src` writing `out` (same shape): the tiling with which the
    producer of `src` stored it (its tiles are then still in SBUF, `tilechoice.tiles_for`) when every tile of it
    holds whole rows as its innermost free dim, else `fallback` (which must hold whole rows so)."""
    specs = tilechoice.tiles_for(out, [src], fallback)
    n = src.shape[dim]
    if specs is None or specs is fallback:
        return fallback
    for spec in specs:
        strides, size = spec.free[-1]
        if size != n or strides != (out.strides[dim], src.strides[dim]):
            return fallback
        if any(st == (out.strides[dim], src.strides[dim]) for st, _ in spec.free[:-1]) or n == 1:
            return fallback
    return specs


def _rows3(x: NkiTensor, n: int) -> NkiTensor:
    """A loaded tile of whole rows of `n` elements as [P, rows per partition, n]."""
    f = flat(x)
    return f.unflatten_free((f.shape[1] // n, n))


def _rows_along(src: View, dim: int, what: str) -> tuple[int, list[int]]:
    """(the length of `dim` in `src`, the axis order putting `dim` last); UnsupportedOpError naming `what` when
    that length is past one tile row (FREE_MAX)."""
    nd = len(src.shape)
    dim %= max(nd, 1)
    n = src.shape[dim]
    if n > FREE_MAX:
        raise UnsupportedOpError(f"{what} over {n} elements (at most {FREE_MAX} per row)")
    return n, [d for d in range(nd) if d != dim] + [dim]


def softmax_kernel(out: View, src: View, dim: int, log: bool) -> None:
    """Softmax / log_softmax along `dim`. One row per partition ([P, N] tiles: the row max and the exp's row
    sum are per-partition operands); when the producer of `src` left it in SBUF with several rows per partition
    (an attention score tile [T, heads, T] after its mask add), those tiles are used as they are, with the row
    statistics [P, G, 1] read along the rows by a zero stride."""
    nd = len(src.shape)
    n, order = _rows_along(src, dim, "softmax")
    s = src.permute(order)
    o = out.permute(order)
    default = list(row_tiles(s.shape, [o.strides, s.strides], [nd - 1]))
    for spec in row_specs(out, src, dim % max(nd, 1), default):
        x = flat(load(spec.access(1, src)))
        res = _softmax_rows(x, log) if x.shape[1] == n else _softmax_grouped(_rows3(x, n), log)
        store(spec.access(0, out), res.unflatten_free(spec.free_sizes) if len(spec.free) > 1 else res)


def _softmax_rows(x: NkiTensor, log: bool) -> NkiTensor:
    """Softmax of each partition's row of [P, N]."""
    negmax = nisa.tensor_reduce("max", x, axis=1, negate=True, keepdims=True)
    total = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    e = nisa.activation(op="exp", data=x, bias=negmax, reduce_op="add", reduce_res=total)
    if log:
        logsum = nisa.activation(op="log", data=total)
        return nisa.tensor_scalar(x, "add", negmax, op1="subtract", operand1=logsum)
    return nisa.tensor_scalar(e, "multiply", nisa.reciprocal(total))


def _softmax_grouped(x: NkiTensor, log: bool) -> NkiTensor:
    """Softmax of each row of [P, G, N] (G rows per partition), as a contiguous [P, G * N] tile."""
    from nprof.nki.compute import broadcast_operand

    top = nisa.tensor_reduce("max", x, axis=2, keepdims=True)
    shifted = nisa.tensor_tensor(x, broadcast_operand(top, x.shape), "subtract")
    e = nisa.activation(op="exp", data=shifted)
    total = nisa.tensor_reduce("add", e, axis=2, keepdims=True)
    if log:
        res = nisa.tensor_tensor(shifted, broadcast_operand(nisa.activation(op="log", data=total), x.shape),
                                 "subtract")  # fmt: skip
    else:
        res = nisa.tensor_tensor(e, broadcast_operand(nisa.reciprocal(total), x.shape), "multiply")
    return flat(res)


def argmax_kernel(values: View | None, indices: View | None, src: View, dim: int) -> None:
    """Row max and the index of its first occurrence along `dim` (at most `FREE_MAX` elements; a NaN is the max,
    as in eager): VectorE max, a mask of the elements equal to the row max or NaN, and a max over
    ``mask * (BIG - j)`` with j from a GpSimdE iota."""
    nd = len(src.shape)
    size, order = _rows_along(src, dim, "max/argmax")
    s = src.permute(order)
    outs = [v for v in (values, indices) if v is not None]
    full = [View(v.tensor, v.dtype, s.shape, (*v.strides, 0), v.offset) for v in outs]
    big = float(1 << 23)
    for spec in row_tiles(s.shape, [s.strides, *(f.strides for f in full)], [nd - 1]):
        x = flat(load(spec.access(0, s)))
        top = nisa.tensor_reduce("max", x, axis=1, keepdims=True)
        results = [top]
        if indices is not None:
            # the first NaN is the max when there is one, as in eager: x == top is false everywhere in a row whose
            # max is NaN, x != x only at NaNs (and never in a row without one), so their sum is the 0/1 hit mask
            nan = nisa.tensor_tensor(x, x, "not_equal")
            hit = nisa.scalar_tensor_tensor(data=x, op0="is_equal", operand0=top, op1="add", operand1=nan)
            ramp = nisa.iota(nl.arange(x.shape[0])[:, None] * 0 + nl.arange(size)[None, :], dtype=nl.float32)
            score = nisa.tensor_tensor(hit, nisa.tensor_scalar(ramp, "subtract", big, reverse0=True), "multiply")
            best = nisa.tensor_reduce("max", score, axis=1, keepdims=True)
            results.append(nisa.tensor_scalar(best, "subtract", big, reverse0=True))
        for k, (view, res) in enumerate(zip(full, results if values is not None else results[1:], strict=True)):
            a = spec.access(1 + k, view)
            store(Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride), res)


def scan_kernel(out: View, src: View, dim: int) -> None:
    """Inclusive sum along `dim` (at most `FREE_MAX` elements), each tile of rows loaded once: a doubling scan
    (Hillis-Steele) of ceil(log2 n) shifted VectorE adds in SBUF, ``y[k:] = y[k:] + y[:-k]`` into a fresh tile
    (the first k elements copied along), stored once; exact for inf/NaN, unlike a matmul by triangular ones. A float
    result holding +-inf/NaN runs the call eagerly (`regather_check.nonfinite_checked`): its order overflows."""
    nd = len(src.shape)
    n, order = _rows_along(src, dim, "cumsum")
    s, o = src.permute(order), out.permute(order)
    for spec in row_tiles(s.shape, [s.strides, o.strides], [nd - 1]):
        cur = flat(load(spec.access(0, s)))
        k = 1
        while k < n:
            nxt = nisa.tensor_copy(cur)
            nisa.tensor_tensor(cur[:, k:n], cur[:, 0 : n - k], "add", dst=nxt[:, k:n])
            cur, k = nxt, 2 * k
        # checked: the doubling order overflows where eager's sequential sum cancels (3e38 + 3e38 - 3e38 - ...:
        # inf or NaN where eager is finite); a non-finite result runs the call eagerly, with a warning
        store(spec.access(1, o), nonfinite_checked(cur) if src.dtype == "float32" else cur)
