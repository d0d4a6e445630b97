"""Elementwise kernels: load tiles of every operand from HBM, compute on ScalarE/VectorE, store the result.

Contract: `map_kernel(em, out, operands, body)` covers the (strided) output view `out` with tiles; each
operand is a `View` already broadcast to `out.shape` (stride-0 dims are DMA broadcasts) or a Python float;
`body(em, out_tile, operand_tiles)` emits the compute for one tile (floats are passed through). The
`unary`/`binary` helpers build bodies for the ATen ops in `UNARY` and `BINARY`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nprof.arch.isa import Access, Engine
from nprof.compiler.emit import Emitter, Tile
from nprof.compiler.views import View, row_tiles

Operand = View | float
Body = Callable[[Emitter, Tile, list[Tile | float]], None]

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
    "bitwise_or": "logical_or", "logical_or": "logical_or", "remainder": "mod", "fmod": "mod",
}  # fmt: skip
_COMMUTATIVE = {"add", "multiply", "maximum", "minimum", "is_equal", "not_equal", "logical_and", "logical_or"}
_SWAPPED_CMP = {"is_ge": "is_le", "is_le": "is_ge", "is_gt": "is_lt", "is_lt": "is_gt"}


def map_kernel(em: Emitter, out: View, operands: Sequence[Operand], body: Body) -> None:
    views = [op for op in operands if isinstance(op, View)]
    for spec in row_tiles(out.shape, [out.strides, *(v.strides for v in views)]):
        # an operand constant along the free dims (e.g. a per-row mean) is loaded as a [P, 1] column
        column = [all(strides[k] == 0 for strides, _ in spec.free) for k in range(1, len(views) + 1)]
        use_columns = getattr(body, "accepts_columns", False) and not all(column)
        tiles: list[Tile | float] = []
        k = 1
        for op in operands:
            if isinstance(op, View):
                a = spec.access(k, op)
                if use_columns and column[k - 1]:
                    a = Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, ((0, 1),), 0, a.partition_stride)
                tiles.append(em.load(a))
                k += 1
            else:
                tiles.append(op)
        result = em.sbuf(spec.partitions, *spec.free_sizes)
        body(em, result, tiles)
        em.store(spec.access(0, out), result)


def copy_body(em: Emitter, out: Tile, ins: list[Tile | float]) -> None:
    src = ins[0]
    if isinstance(src, Tile):
        em.tensor_copy(out, src, engine=Engine.GPSIMD)
    else:
        em.memset(out, src)


def activation_body(func: str, scale: float = 1.0, bias: float = 0.0) -> Body:
    def body(em: Emitter, out: Tile, ins: list[Tile | float]) -> None:
        src = ins[0]
        assert isinstance(src, Tile)
        em.activation(out, src, func, scale=scale, bias=bias)

    return body


def reciprocal_body(em: Emitter, out: Tile, ins: list[Tile | float]) -> None:
    src = ins[0]
    assert isinstance(src, Tile)
    em.reciprocal(out, src)


def scalar_body(op0: str, operand0: float, op1: str | None = None, operand1: float | None = None) -> Body:
    def body(em: Emitter, out: Tile, ins: list[Tile | float]) -> None:
        src = ins[0]
        assert isinstance(src, Tile)
        em.tensor_scalar(out, src, op0, operand0, op1=op1, operand1=operand1)

    return body


def binary_body(alu: str, alpha: float = 1.0) -> Body:
    """out = a <alu> (alpha * b); either side may be a float (then TENSOR_SCALAR on VectorE)."""

    def body(em: Emitter, out: Tile, ins: list[Tile | float]) -> None:
        a, b = ins
        if isinstance(b, float) and alpha != 1.0:
            b = b * alpha
        if isinstance(b, Tile) and _is_column(b, out):  # per-partition operand: one TENSOR_SCALAR
            if alpha != 1.0:
                scaled = em.sbuf(b.p, 1)
                em.tensor_scalar(scaled, b, "multiply", alpha)
                b = scaled
            assert isinstance(a, Tile)
            em.tensor_scalar(out, a, alu, b)
            return
        if isinstance(a, Tile) and _is_column(a, out):
            assert isinstance(b, Tile)
            if alpha != 1.0:
                scaled = em.sbuf(*b.shape)
                em.tensor_scalar(scaled, b, "multiply", alpha)
                b = scaled
            swapped = _SWAPPED_CMP.get(alu, alu)
            reverse = alu not in _COMMUTATIVE and alu not in _SWAPPED_CMP
            em.tensor_scalar(out, b, swapped, a, reverse0=reverse)
            return
        if isinstance(a, Tile) and isinstance(b, Tile):
            if alpha != 1.0:
                scaled = em.sbuf(b.p, *b.shape[1:])
                em.tensor_scalar(scaled, b, "multiply", alpha)
                b = scaled
            em.tensor_tensor(out, a, b, alu)
        elif isinstance(a, Tile):
            em.tensor_scalar(out, a, alu, float(b))  # type: ignore[arg-type]
        elif isinstance(b, Tile):
            if alpha != 1.0:
                em.tensor_scalar(out, b, "multiply", alpha, op1=_SWAPPED_CMP.get(alu, alu), operand1=float(a),
                                 reverse1=alu not in _COMMUTATIVE and alu not in _SWAPPED_CMP)  # fmt: skip
            else:
                em.tensor_scalar(out, b, _SWAPPED_CMP.get(alu, alu), float(a),
                                 reverse0=alu not in _COMMUTATIVE and alu not in _SWAPPED_CMP)  # fmt: skip
        else:
            raise AssertionError("binary op on two constants is folded before lowering")

    body.accepts_columns = True  # type: ignore[attr-defined]
    return body


def _is_column(t: Tile, out: Tile) -> bool:
    return t.shape != out.shape and t.access.free_elements == 1


def where_body(em: Emitter, out: Tile, ins: list[Tile | float]) -> None:
    cond, a, b = ins
    tiles = []
    for v in (a, b):
        if isinstance(v, Tile):
            tiles.append(v)
        else:
            t = em.sbuf(out.p, *out.shape[1:])
            em.memset(t, v)
            tiles.append(t)
    if not isinstance(cond, Tile):
        em.tensor_copy(out, tiles[0 if cond else 1])
        return
    em.select(out, cond, tiles[0], tiles[1])


def clamp_body(lo: float | None, hi: float | None) -> Body:
    def body(em: Emitter, out: Tile, ins: list[Tile | float]) -> None:
        src = ins[0]
        assert isinstance(src, Tile)
        if lo is not None and hi is not None:
            em.tensor_scalar(out, src, "maximum", lo, op1="minimum", operand1=hi)
        elif lo is not None:
            em.tensor_scalar(out, src, "maximum", lo)
        else:
            em.tensor_scalar(out, src, "minimum", float(hi))  # type: ignore[arg-type]

    return body
