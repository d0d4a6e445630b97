"""Index-driven kernels for the Hugging Face ops (NKI): flat gathers, embedding bags, linear index sums.

Contract:
* `weighted_sum_kernel(out, terms, bias)`: ``out = bias + sum(w * t for t, w in terms)`` elementwise, each
  term a View broadcast to ``out.shape``; negative index values ``t < 0`` count from the end: a term given as
  ``(t, w, size)`` adds ``w * (t + size * (t < 0))``. Used to turn index tensors into flat element offsets.
* `bag_matrix_kernel(a, bag_size, offset2bag, offsets, n, last_offset, mean)`: the [B, N] bag-membership
  matrix ``a[b, j] = (offsets[b] <= j < next[b])`` (divided by the bag's size when `mean`, empty bags
  stay 0), the sizes ``next - offsets`` and, if `offset2bag` is not None, each index's bag
  ``sum_b(j >= offsets[b]) - 1`` (a ones-vector matmul on TensorE). ``next[b]`` is ``offsets[b + 1]``, or
  `n` for the last bag unless `last_offset` (``include_last_offset=True``: offsets has B + 1 entries).
Gathers themselves reuse `onehot.embedding_kernel` (one-hot rows times the table on TensorE), the device
having no indirect DMA here.
"""

from __future__ import annotations

from collections.abc import Sequence

from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.views import View, row_tiles, view_access
from nprof.nki import isa as nisa
from nprof.nki import language as nl

Term = tuple[View, float, int]  # (index values, weight, size of the indexed dim: 0 = never negative)


def weighted_sum_kernel(out: View, terms: Sequence[Term], bias: float) -> None:
    views = [t for t, _, _ in terms]
    for spec in row_tiles(out.shape, [out.strides, *(v.strides for v in views)]):
        acc = None
        for k, (view, weight, size) in enumerate(terms):
            x = load(spec.access(k + 1, view))
            if size:  # x + size * (x < 0)
                x = nisa.tensor_tensor(x, nisa.tensor_scalar(x, "is_lt", 0.0, op1="multiply", operand1=float(size)),
                                       "add")  # fmt: skip
            acc = (
                nisa.tensor_scalar(x, "multiply", float(weight), op1="add", operand1=float(bias))
                if acc is None
                else nisa.tensor_tensor(acc, nisa.tensor_scalar(x, "multiply", float(weight)), "add")
            )
        assert acc is not None
        store(spec.access(0, out), acc)


def bag_matrix_kernel(
    a: View, bag_size: View, offset2bag: View | None, offsets: View, n: int, last_offset: bool, mean: bool
) -> None:
    bags = a.shape[0]
    count = offsets.shape[0]
    chunk = 512
    for b0 in range(0, bags, 128):
        bt = min(128, bags - b0)
        start = load(view_access(offsets, 0, (b0,), (bt,), ()))
        nxt = nisa.memset((bt, 1), float(n), nl.float32)
        known = min(bt, count - (b0 + 1))  # rows whose next offset is in the tensor
        if known > 0:
            nxt[0:known, :] = load(view_access(offsets, 0, (b0 + 1,), (known,), ()))
        size = nisa.tensor_tensor(nxt, start, "subtract")
        store(view_access(bag_size, 0, (b0,), (bt,), ()), size)
        inv = nisa.reciprocal(nisa.tensor_scalar(size, "maximum", 1.0)) if mean else None
        for j0 in range(0, n, chunk):
            jt = min(chunk, n - j0)
            ramp = nisa.iota(nl.arange(bt)[:, None] * 0 + nl.arange(jt)[None, :] + j0, dtype=nl.float32)
            ge = nisa.tensor_scalar(ramp, "is_ge", start)
            member = nisa.tensor_tensor(ge, nisa.tensor_scalar(ramp, "is_lt", nxt), "multiply")
            if inv is not None:
                member = nisa.tensor_scalar(member, "multiply", inv)
            store(view_access(a, 0, (b0, j0), (bt, jt), (1,)), member)
    if offset2bag is None:
        return
    for j0 in range(0, n, chunk):
        jt = min(chunk, n - j0)
        acc = nl.ndarray((1, jt), dtype=nl.float32, buffer=nl.psum)
        for i, b0 in enumerate(range(0, bags, 128)):
            bt = min(128, bags - b0)
            start = load(view_access(offsets, 0, (b0,), (bt,), ()))
            ramp = nisa.iota(nl.arange(bt)[:, None] * 0 + nl.arange(jt)[None, :] + j0, dtype=nl.float32)
            ones = nisa.memset((bt, 1), 1.0, nl.float32)
            if i == 0:
                acc[...] = nisa.nc_matmul(ones, nisa.tensor_scalar(ramp, "is_ge", start))
            else:
                acc += nisa.nc_matmul(ones, nisa.tensor_scalar(ramp, "is_ge", start))
        store(view_access(offset2bag, 0, (0, j0), (1, jt), (1,)), nisa.tensor_scalar(acc, "subtract", 1.0))
