"""Elementwise kernels (NKI): load tiles of every operand from HBM, compute on ScalarE/VectorE, store.

Contract: `map_kernel(out, operands, body)` covers the (strided) output view `out` with tiles; each operand
is a `View` already broadcast to `out.shape` (stride-0 dims are DMA broadcasts) or a Python float;
`body(tiles, shape)` returns the result tile for one tile position (floats are passed through). An operand
constant along a tile's free dims (e.g. a per-row mean) is loaded as a [P, 1] column when the body accepts
columns, and used as a per-partition scalar. `UNARY`/`BINARY` map ATen ops to NKI activation / ALU names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from nprof.arch.isa import Access
from nprof.compiler import tilechoice
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.views import View, row_tiles
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki import trace
from nprof.nki.tensor import NkiTensor

Operand = View | float
Value = NkiTensor | float
Body = Callable[[list[Value], tuple[int, ...]], NkiTensor]

# ATen unary op -> ScalarE activation function
ACTIVATIONS = {
    "relu": "relu", "exp": "exp", "log": "log", "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "erf": "erf", "abs": "abs", "neg": "negative", "sign": "sign",
    "sin": "sin", "cos": "cos",
}  # fmt: skip

# ATen binary op -> ALU op of TENSOR_TENSOR / TENSOR_SCALAR
BINARY = {
    "add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "maximum": "maximum",
    "minimum": "minimum", "pow": "power", "eq": "is_equal", "ne": "not_equal", "ge": "is_ge", "gt": "is_gt",
    "le": "is_le", "lt": "is_lt", "bitwise_and": "logical_and", "logical_and": "logical_and",
    "bitwise_or": "logical_or", "logical_or": "logical_or", "remainder": "mod", "fmod": "fmod",
}  # fmt: skip
# ALU ops whose results are 0/1 (kept in SBUF even when stored as bool: `hbm.store(exact=True)`)
BOOLEAN_ALU = frozenset({"is_equal", "not_equal", "is_ge", "is_gt", "is_le", "is_lt", "logical_and", "logical_or"})
_COMMUTATIVE = {"add", "multiply", "maximum", "minimum", "is_equal", "not_equal", "logical_and", "logical_or"}
_SWAPPED_CMP = {"is_ge": "is_le", "is_le": "is_ge", "is_gt": "is_lt", "is_lt": "is_gt"}


def map_kernel(out: View, operands: Sequence[Operand], body: Body) -> None:
    views = [op for op in operands if isinstance(op, View)]
    default = _spread_tiles(out, views) or list(row_tiles(out.shape, [out.strides, *(v.strides for v in views)],
                                                          fold=True))  # fmt: skip
    specs = tilechoice.tiles_for(out, views, default, periodic=True) or default
    for spec in specs:
        column = [all(strides[k] == 0 for strides, _ in spec.free) for k in range(1, len(views) + 1)]
        use_columns = getattr(body, "accepts_columns", False) and not all(column)
        tiles: list[Value] = []
        k = 1
        for op in operands:
            if isinstance(op, View):
                a = spec.access(k, op)
                if use_columns and column[k - 1]:
                    a = Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride)
                strided = body is not copy_body
                tiles.append(_periodic(a, spec.partitions) if spec.period(k) else _operand(a, strided=strided))
                k += 1
            else:
                tiles.append(op)
        exact = getattr(body, "boolean", False)
        store(spec.access(0, out), body(tiles, (spec.partitions, *spec.free_sizes)), exact=exact)


def _periodic(a: Access, parts: int) -> NkiTensor:
    """The operand tile of `parts` partitions whose rows repeat the `a.partitions` rows of `a` (an operand
    broadcast along the outer part of the partition run, `views.TileSpec.periods`): its distinct elements (one
    per broadcast free position) loaded, repeated down the partitions on TensorE (`_replicated`), then seen with
    the zero strides of `a` on chip."""
    zero = {i for i, (stride, size) in enumerate(a.free) if stride == 0 and size > 1}
    compact = tuple((stride, 1 if i in zero else size) for i, (stride, size) in enumerate(a.free))
    tile = _replicated(load(Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, compact, 0,
                                   a.partition_stride)), parts)  # fmt: skip
    if not zero:
        return tile
    p0, e0, dims = tile.access_key()
    sizes = [size for _, size in a.free]
    free = tuple((0, 0, sizes[i]) if i in zero else dim for i, dim in enumerate(dims[1:]))
    return NkiTensor(tile.base, p0, e0, (dims[0], *free), ())


def _replicated(tile: NkiTensor, parts: int) -> NkiTensor:
    """`tile` [P, F...] repeated down `parts` partitions (row p holds row p % P), moved only by TensorE transposes
    (data moves, no arithmetic: infinities and NaNs stay as they are, which a 0/1 matmul would not keep): per
    128 columns, tile.T [F, P] copied to SBUF repeated along its free axis [F, parts / P, P], and transposed back
    to [parts, F]."""
    from nprof.compiler.kernels import engines

    rows = tile.shape[0]
    flat = tile.flatten_free()
    if flat is None:
        flat = engines.copy(tile).flatten_free()
    assert flat is not None
    n = flat.shape[1]
    res = nl.ndarray((parts, n), dtype=nl.float32, buffer=nl.sbuf)
    for c0 in range(0, n, 128):
        c = min(128, n - c0)
        back = nisa.nc_transpose(flat[:, c0 : c0 + c])  # [c, rows] in PSUM
        wide = nl.ndarray((c, parts // rows, rows), dtype=nl.float32, buffer=nl.sbuf)
        engines.copy(back.unflatten_free((1, rows)).expand((c, parts // rows, rows)), dst=wide)
        engines.copy(nisa.nc_transpose(wide.flatten_free()), dst=res[:, c0 : c0 + c])
    return res.unflatten_free(tuple(tile.shape[1:])) if len(tile.shape) > 2 else res


def _spread_tiles(out: View, views: list[View]) -> list[Any] | None:
    """The tiling of a contiguous [N, C, H, W] output of few channels in the spread layout of
    `kernels.norm_spread` (C * k = 128 partitions, each a block of rows of every image), when every operand can
    follow it: the layout the spread convolutions and batch norms keep in SBUF, and 128 partitions for a
    ReLU backward or residual add where the plain tiling would use C (or N * C); else None."""
    from nprof.compiler.kernels.norm_spread import spread_access, spread_factor
    from nprof.compiler.views import retile

    if len(out.shape) != 4 or out.offset != 0 or not out.is_contiguous:
        return None
    k = spread_factor(tuple(out.shape))
    if k <= 1:
        return None
    a = spread_access(out, k)
    return retile([a], *tilechoice.split_dims([a], out.shape, [out.strides, *(v.strides for v in views)]))


def _operand(a: Access, strided: bool) -> NkiTensor:
    """`load(a, strided)`, except that an operand broadcast along free dims (stride 0: an expand) that no kept
    tile holds is loaded once per distinct element and seen with zero strides on chip: a DMA reading the same
    element again for every position of a broadcast dim moves one element per chunk (the DMA cost model charges
    every contiguous chunk its overhead: a [128, 4, 16] expand of 512 values read as 8192 chunks took 14 us)."""
    zero = {i for i, (stride, size) in enumerate(a.free) if stride == 0 and size > 1}
    lookup = getattr(trace.current(), "lookup", None)
    if not zero or not strided or lookup is None or lookup(a, contiguous=False) is not None:
        return load(a, strided=strided)
    compact = tuple((stride, 1 if i in zero else size) for i, (stride, size) in enumerate(a.free))
    tile = load(Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, compact, 0, a.partition_stride))
    p0, e0, dims = tile.access_key()
    if len(dims) != 1 + len(a.free):
        return load(a, strided=strided)
    sizes = [size for _, size in a.free]
    free = tuple((0, 0, sizes[i]) if i in zero else dim for i, dim in enumerate(dims[1:]))
    return NkiTensor(tile.base, p0, e0, (dims[0], *free), ())


def copy_body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
    src = ins[0]
    if isinstance(src, NkiTensor):
        return src  # the loaded tile goes straight back out
    return nisa.memset(shape, float(src), nl.float32)


def activation_body(func: str, scale: float = 1.0, bias: float = -0.0) -> Body:
    """func(x * scale + bias) on ScalarE. The default bias is -0.0, not 0.0: ``x + -0.0`` is x for every x, while
    ``-0.0 + 0.0`` is +0.0, which turned eager's ``rsqrt(-0.0) = -inf`` (and sqrt's gradient at -0.0) into +inf."""

    def body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
        return nisa.activation(op=func, data=ins[0], scale=scale, bias=bias)

    return body


def gelu_body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
    """Exact gelu as eager's CPU kernel gives it: ``y = gelu(x)`` (the activation), then ``2y - y`` on VectorE,
    which is y except where ``2y`` overflows (x > FLT_MAX / 2: eager's inf) and at x = +inf (inf - inf: eager's
    NaN; gelu(-inf) is already NaN). One more VectorE pass than the bare activation."""
    y = nisa.activation(op="gelu", data=ins[0], bias=-0.0)
    return nisa.scalar_tensor_tensor(data=y, op0="multiply", operand0=2.0, op1="subtract", operand1=y)


def reciprocal_body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
    return nisa.reciprocal(ins[0])


def scalar_body(op0: str, operand0: float, op1: str | None = None, operand1: float | None = None) -> Body:
    def body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
        return nisa.tensor_scalar(ins[0], op0, operand0, op1=op1, operand1=operand1)

    body.boolean = op1 is None and op0 in BOOLEAN_ALU  # type: ignore[attr-defined]
    return body


def _is_column(t: Any, shape: tuple[int, ...]) -> bool:
    return isinstance(t, NkiTensor) and t.shape != shape and all(s == 1 for s in t.shape[1:])


def binary_body(alu: str, alpha: float = 1.0) -> Body:
    """a <alu> (alpha * b); a float side or a [P, 1] column side becomes a TENSOR_SCALAR operand."""
    swapped = _SWAPPED_CMP.get(alu, alu)
    reverse = alu not in _COMMUTATIVE and alu not in _SWAPPED_CMP

    def body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
        a, b = ins
        if isinstance(b, float):
            return nisa.tensor_scalar(a, alu, b * alpha)
        if alpha != 1.0:
            b = nisa.tensor_scalar(b, "multiply", alpha)
        if isinstance(a, float) or _is_column(a, shape):
            return nisa.tensor_scalar(b, swapped, a, reverse0=reverse)
        if _is_column(b, shape):
            return nisa.tensor_scalar(a, alu, b)
        return nisa.tensor_tensor(a, b, alu)

    body.accepts_columns = True  # type: ignore[attr-defined]
    body.boolean = alu in BOOLEAN_ALU  # type: ignore[attr-defined]
    return body


def mod_body(alu: str) -> Body:
    """remainder ("mod") or fmod ("fmod") as eager's vectorised CPU kernels give them: NaN wherever ``a / b``
    overflows (they compute ``a - floor(a / b) * b``: 1.0 % 1e-40 is NaN), else the exact ALU result. Two more
    VectorE passes: ``q = a / b`` and ``q * 0 + r`` (NaN exactly where q is +-inf)."""
    plain, divide = binary_body(alu), binary_body("divide")

    def body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
        r, q = plain(ins, shape), divide(ins, shape)
        return nisa.scalar_tensor_tensor(data=q, op0="multiply", operand0=0.0, op1="add", operand1=r)

    body.accepts_columns = True  # type: ignore[attr-defined]
    return body


def where_body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
    cond, a, b = ins
    if not isinstance(cond, NkiTensor):
        chosen = a if cond else b
        return chosen if isinstance(chosen, NkiTensor) else nisa.memset(shape, float(chosen), nl.float32)
    return nl.where(cond, a, b)


def clamp_body(lo: float | None, hi: float | None) -> Body:
    def body(ins: list[Value], shape: tuple[int, ...]) -> NkiTensor:
        if lo is not None and hi is not None:
            return nisa.tensor_scalar(ins[0], "maximum", lo, op1="minimum", operand1=hi)
        if lo is not None:
            return nisa.tensor_scalar(ins[0], "maximum", lo)
        return nisa.tensor_scalar(ins[0], "minimum", float(hi))  # type: ignore[arg-type]

    return body
