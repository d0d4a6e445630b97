"""Lowering of on-chip computations to ISA instructions (shared by `nl` and `nisa`).

Each function takes tiles (`NkiTensor` views of SBUF/PSUM), scalars and an
optional `mask`, allocates its result tile (SBUF unless told otherwise) and
records exactly the instructions the real compiler would: activations on
ScalarE (ACTIVATE), tile-tile arithmetic on VectorE (TENSOR_TENSOR),
tile-scalar and tile-with-[P,1] arithmetic on VectorE (TENSOR_SCALAR),
reductions on VectorE (TENSOR_REDUCE), memsets/iota/affine_select on GpSimdE.
Free-axis broadcasting reads the smaller operand with a zero stride; a
[1, F] operand is broadcast across partitions through TensorE (a ones
stationary times the row), as the hardware has no cross-partition path on
VectorE. A mask narrows every operand to the mask's box.
"""

from __future__ import annotations

import math
import numbers
import weakref
from typing import Any

from nprof.arch.isa import PACKED_MX, Engine, Opcode, Space, attrs
from nprof.nki import trace
from nprof.nki.dtypes import dtype_name, promote
from nprof.nki.index import Predicate
from nprof.nki.indirection import GROUP, TensorIndirection
from nprof.nki.masks import mask_box, note_mask, operand_box
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor, OnChip, partition_first

COMMUTATIVE = {"add", "multiply", "maximum", "minimum", "is_equal", "not_equal", "logical_and", "logical_or"}
COMMUTATIVE |= {"bitwise_and", "bitwise_or", "abs_max"}
_SWAP = {"is_gt": "is_lt", "is_lt": "is_gt", "is_ge": "is_le", "is_le": "is_ge"}


def is_scalar(x: Any) -> bool:
    return (isinstance(x, numbers.Number) and not isinstance(x, bool)) or isinstance(x, bool)


def dname(dtype: Any) -> str:
    try:
        return dtype_name(dtype)
    except ValueError as err:
        raise kernel_error(str(err)) from None


_HBM = Space.HBM  # (module constant: an enum member's attribute lookup is slow on hot paths)
MM_WRITTEN: weakref.WeakKeyDictionary[OnChip, set[Any]] = weakref.WeakKeyDictionary()
"""PSUM regions (access keys per tile) a beta-2 `nc_matmul(dst, ...)` wrote since the tile was last read."""


def consumed(t: NkiTensor) -> None:
    """`t` is read by an instruction: the next beta-2 matmul into its PSUM tile starts a new sum."""
    if MM_WRITTEN.data and isinstance(t.base, OnChip) and t.base in MM_WRITTEN:  # type: ignore[attr-defined]  # (.data, CPython's dict inside: no weakref made)
        del MM_WRITTEN[t.base]


def tile(x: Any, what: str = "operand", masked_ok: bool = False, packed_ok: bool = False) -> NkiTensor:
    """`x` as an on-chip tile read as an operand; KernelError for HBM tensors and other values, and for an
    operand-masked view (`tile[mask]`) unless `masked_ok` (matmul operands: the only ones NKI masks so)."""
    if isinstance(x, NkiTensor):
        if x._base.space is _HBM:
            raise kernel_error(
                f"{what} {x.name!r} is in HBM; compute engines read SBUF/PSUM — nl.load it into a tile first"
            )
        if not masked_ok and operand_box(x) is not None:
            raise kernel_error(
                f"{what}: operand masking (tile[mask]) applies to matmul operands only (NKI API Masking); "
                "pass mask= to this instruction instead"
            )
        if x._base.dtype in PACKED_MX and not packed_ok:
            raise packed_error(what, x.dtype_name)
        builder = trace.current()
        if builder._pending is not None and builder.is_pending(x):
            builder.flush()
        if MM_WRITTEN.data:  # type: ignore[attr-defined]
            consumed(x)
        return x
    if isinstance(x, TensorIndirection):  # `t.indirect(index)`: its columns gathered first (nprof.nki.indirection)
        return x.gathered(GROUP["vector"])
    if hasattr(x, "dyn_attrs"):  # an IndirectView (nprof.nki.indirect)
        raise kernel_error(f"{what} cannot be indexed with runtime values: {NOT_A_TILE}")
    raise kernel_error(f"{what} must be a tile, got {type(x).__name__}")


NOT_A_TILE = (
    "a tensor indexed with runtime values can only be moved by nl.load / nl.store / nisa.dma_copy / "
    "nl.atomic_rmw (HBM) or nisa.tensor_copy_dynamic_src / tensor_copy_dynamic_dst (on chip)"
)


def new_tile(shape: tuple[int, ...], dtype: str, space: Space = Space.SBUF, name: str = "") -> NkiTensor:
    return trace.current().alloc(tuple(shape), dtype, space, name)


def emit(engine: Engine, opcode: Opcode, outs: list[NkiTensor], ins: list[NkiTensor], **kw: Any) -> None:
    """Emit one instruction over views (skipped when a mask left nothing to do)."""
    views = [*outs, *ins]
    for v in views:
        for _, _, size in v._dims:
            if not size:
                return
    views = partition_first(views)  # whole multi-block tiles: partition axis first
    accs = tuple([v.access() for v in views])
    n = len(outs)
    trace.current().emit(engine, opcode, accs[:n], accs[n:], attrs(**kw) if kw else ())


def apply_mask(mask: Predicate | None, shape: tuple[int, ...], *views: NkiTensor) -> list[NkiTensor]:
    if mask is None:
        return list(views)
    box = mask_box(mask, shape)
    if views and views[0].shape == shape:
        note_mask(views[0], box)  # the result (first view) holds values only inside the box
    out = []
    for v in views:
        if v.shape == shape:
            out.append(v.restrict(box))
        else:  # a broadcast [P, 1] operand: narrow the partition axis only
            vb = [
                (lo, hi) if size == full else (0, size)
                for (lo, hi), size, full in zip(box, v.shape, shape, strict=False)
            ]
            out.append(v.restrict(vb + [(0, s) for s in v.shape[len(vb) :]]))
    return out


def packed_error(what: str, dtype: str) -> Exception:
    """The KernelError for packed MX data used where values are read or computed."""
    from nprof.nki.dtypes import PACKED_NKI_NAMES

    name = PACKED_NKI_NAMES.get(dtype, dtype)
    return kernel_error(f"{what} is packed MX data ({name}): only nisa.nc_matmul_mx, nisa.quantize_mx and "
                        "copies to the same dtype use it; unpack it on the host or quantize with nisa.quantize_mx")


def result_tile(out: Any, shape: tuple[int, ...], dtype: str, space: Space = Space.SBUF,
                packed_ok: bool = False) -> NkiTensor:  # fmt: skip
    """The destination of a result of `shape`: a new tile, or `out` (a dst= view with the same partitions
    and free-element count is read in the result's shape). Packed MX destinations only with `packed_ok`."""
    packed = dtype if out is None else getattr(out, "dtype_name", "")
    if packed in PACKED_MX and not packed_ok:
        raise packed_error("the destination", packed)
    if out is None:
        return new_tile(shape, dtype, space)
    if not isinstance(out, NkiTensor) or out.is_hbm:
        raise kernel_error(f"dst must be an SBUF or PSUM tile, got {getattr(out, 'name', type(out).__name__)!r}")
    if out.shape == shape:
        return out
    flat = out.flatten_free() if out.shape[:1] == shape[:1] and out.ndim >= 1 else None
    if flat is None or (flat.shape[1:2] != (math.prod(shape[1:]),) and not (len(shape) == 1 and flat.ndim == 1)):
        raise kernel_error(f"result has shape {shape} but the destination has shape {out.shape}")
    return flat.unflatten_free(tuple(shape[1:])) if len(shape) > 1 else flat


# -- elementwise ------------------------------------------------------------------------------
def activation(
    func: str,
    x: Any,
    *,
    scale: Any = 1.0,
    bias: Any = None,
    dtype: Any = None,
    mask: Predicate | None = None,
    reduce_op: str | None = None,
    reduce_res: NkiTensor | None = None,
    out: NkiTensor | None = None,
) -> NkiTensor:
    """ACTIVATE on ScalarE: func(x * scale + bias), optionally reducing into `reduce_res` [P, 1]."""
    x = tile(x, "activation input")
    res = result_tile(out, x.shape, dname(dtype) if dtype is not None else x.dtype_name)
    ins = [x]
    kw: dict[str, Any] = {"func": func}
    bias_t = None if bias is None or is_scalar(bias) else tile(bias, "bias")
    scale_t = None if is_scalar(scale) else tile(scale, "scale")
    if scale_t is not None and bias_t is None:  # ins[2] needs ins[1]: materialise the scalar bias
        bias_t = full_tile((x.shape[0], 1), 0.0 if bias is None else float(bias), "float32")
    for t, what in ((bias_t, "bias"), (scale_t, "scale")):
        if t is not None and (t.shape[0] != x.shape[0] or any(s != 1 for s in t.shape[1:])):
            raise kernel_error(f"activation {what} must be a scalar or a [{x.shape[0]}, 1] tile, got {t.shape}")
    if bias_t is not None:
        ins.append(bias_t)
    else:
        kw["bias"] = 0.0 if bias is None else float(bias)
    if scale_t is not None:
        ins.append(scale_t)
    else:
        kw["scale"] = float(scale)
    outs = [res]
    if reduce_op is not None:
        if reduce_res is None:
            raise kernel_error("activation with reduce_op needs reduce_res= (a [P, 1] tile)")
        rr = tile(reduce_res, "reduce_res")
        if rr.shape[0] != x.shape[0] or any(s != 1 for s in rr.shape[1:]):
            raise kernel_error(f"reduce_res must be a [{x.shape[0]}, 1] tile, got {rr.shape}")
        outs.append(rr)
        kw["reduce_op"] = reduce_op
    views = apply_mask(mask, x.shape, *outs, *ins)
    emit(Engine.SCALAR, Opcode.ACTIVATE, views[: len(outs)], views[len(outs) :], **kw)
    return res


def full_tile(shape: tuple[int, ...], value: float, dtype: str, engine: Engine = Engine.GPSIMD) -> NkiTensor:
    t = new_tile(shape, dtype)
    emit(engine, Opcode.MEMSET, [t], [], value=float(value))
    return t


def broadcast_operand(x: NkiTensor, shape: tuple[int, ...]) -> NkiTensor:
    """`x` read as `shape`: zero strides on free axes, TensorE broadcast across partitions."""
    if x.shape == shape:
        return x
    if len(x.shape) != len(shape):
        raise kernel_error(f"cannot broadcast a tile of shape {x.shape} to {shape}: ranks differ")
    for a, b in zip(x.shape, shape, strict=True):
        if a != b and a != 1:
            raise kernel_error(f"cannot broadcast a tile of shape {x.shape} to {shape}")
    if x.shape[0] == 1 and shape[0] > 1:
        x = partition_broadcast(x, shape[0])
    return x.expand(shape)


def partition_broadcast(row: NkiTensor, parts: int) -> NkiTensor:
    """A [parts, F...] tile holding `row` ([1, F...]) on every partition: ones[1, parts].T @ row (in PSUM;
    rows wider than one matmul: an SBUF tile, see `nprof.nki.broadcast`)."""
    free = row.shape[1:]
    n = 1
    for s in free:
        n *= s
    builder = trace.current()
    if n > builder.preset.gemm_moving_fmax:  # one matmul per 512 columns, gathered in SBUF
        from nprof.nki.broadcast import wide_partition_broadcast

        return wide_partition_broadcast(row, parts)
    dt = row.dtype_name if row.dtype_name in ("bfloat16", "float16", "float32") else "float32"
    if dt != row.dtype_name:
        row = copy(row, dtype=dt)
    ones = full_tile((1, parts), 1.0, dt)
    flat_row = row.flatten_free()
    if flat_row is None:
        flat_row = copy(row).flatten_free()
    assert flat_row is not None
    res = trace.current().alloc((parts, n), "float32", Space.PSUM, lazy=True)
    builder.set_pending(ones, flat_row, res)
    builder.flush()
    return res.unflatten_free(free)


def binary(
    op: str, a: Any, b: Any, *, dtype: Any = None, mask: Predicate | None = None, out: NkiTensor | None = None
) -> Any:
    """`a <op> b` for tiles and scalars (see module doc for the lowering)."""
    if is_scalar(a) and is_scalar(b):
        raise kernel_error(f"nl.{op} of two scalars: compute it in Python")
    if is_scalar(a):
        if op in COMMUTATIVE:
            return tensor_scalar(b, op, a, dtype=dtype, mask=mask, out=out)
        if op in _SWAP:
            return tensor_scalar(b, _SWAP[op], a, dtype=dtype, mask=mask, out=out)
        return tensor_scalar(b, op, a, reverse0=True, dtype=dtype, mask=mask, out=out)
    if is_scalar(b):
        return tensor_scalar(a, op, b, dtype=dtype, mask=mask, out=out)
    a, b = tile(a), tile(b)
    if a.ndim != b.ndim and a.shape[:1] == b.shape[:1]:  # a [P] vector broadcasts along the free axes
        a, b = a.pad_free(b.ndim), b.pad_free(a.ndim)
    shape = tuple(max(x, y) for x, y in zip(a.shape, b.shape, strict=False)) if a.ndim == b.ndim else None
    if shape is None:
        raise kernel_error(f"nl.{op}: tiles of shapes {a.shape} and {b.shape} do not broadcast (ranks differ)")
    dt = dname(dtype) if dtype is not None else promote(a.dtype_name, b.dtype_name)
    column = [t.shape[0] == shape[0] and all(s == 1 for s in t.shape[1:]) and t.shape != shape for t in (a, b)]
    if column[1]:  # the other operand may need broadcasting too ([P, 1] + [1, F])
        return tensor_scalar(broadcast_operand(a, shape), op, b, dtype=dt, mask=mask, out=out)
    if column[0]:
        rev = op not in COMMUTATIVE and op not in _SWAP
        return tensor_scalar(broadcast_operand(b, shape), _SWAP.get(op, op), a, reverse0=rev, dtype=dt, mask=mask,
                             out=out)  # fmt: skip
    return tensor_tensor(broadcast_operand(a, shape), broadcast_operand(b, shape), op, dtype=dt, mask=mask, out=out)


def tensor_tensor(
    a: NkiTensor, b: NkiTensor, op: str, *, dtype: Any = None, mask: Predicate | None = None,
    out: NkiTensor | None = None, engine: Engine = Engine.VECTOR,
) -> NkiTensor:  # fmt: skip
    a, b = tile(a), tile(b)
    if a.shape != b.shape:  # free axes of size 1 broadcast (NKI API reference, nisa.tensor_tensor: "if you need
        # broadcasting capability in the free dimension ... consider tensor_scalar ... better performance")
        same = a.ndim == b.ndim and a.shape[0] == b.shape[0]
        if not same or any(x != y and 1 not in (x, y) for x, y in zip(a.shape[1:], b.shape[1:], strict=True)):
            raise kernel_error(f"tensor_tensor operands differ in shape: {a.shape} vs {b.shape}")
        shape = (a.shape[0], *(max(x, y) for x, y in zip(a.shape[1:], b.shape[1:], strict=True)))
        a, b = a.expand(shape), b.expand(shape)
    dt = dname(dtype) if dtype is not None else promote(a.dtype_name, b.dtype_name)
    res = result_tile(out, a.shape, dt)
    o, x, y = apply_mask(mask, a.shape, res, a, b)
    emit(engine, Opcode.TENSOR_TENSOR, [o], [x, y], op=op)
    return res


def tensor_scalar(
    data: Any, op0: str, operand0: Any, reverse0: bool = False, op1: str | None = None, operand1: Any = None,
    reverse1: bool = False, *, dtype: Any = None, mask: Predicate | None = None, out: NkiTensor | None = None,
    engine: Engine = Engine.VECTOR,
) -> NkiTensor:  # fmt: skip
    """(data <op0> operand0) <op1> operand1 with scalar or per-partition [P, 1] operands."""
    data = tile(data, "tensor_scalar data")
    dt = dname(dtype) if dtype is not None else data.dtype_name
    res = result_tile(out, data.shape, dt)
    kw: dict[str, Any] = {"op0": op0, "reverse0": bool(reverse0) or None}
    ins = [data]
    operands = [(operand0, "operand0")] + ([(operand1, "operand1")] if op1 is not None else [])
    vectors = [not is_scalar(v) for v, _ in operands]
    for k, (value, key) in enumerate(operands):
        if vectors[k] or (k == 0 and len(vectors) > 1 and vectors[1]):
            t = tile(value, key) if vectors[k] else full_tile((data.shape[0], 1), float(value), "float32")
            if t.shape[0] != data.shape[0] or any(s != 1 for s in t.shape[1:]):
                raise kernel_error(f"{key} must be a scalar or a [{data.shape[0]}, 1] tile, got {t.shape}")
            ins.append(t)
        else:
            kw[key] = float(value)
    if op1 is not None:
        kw.update(op1=op1, reverse1=bool(reverse1) or None)
    views = apply_mask(mask, data.shape, res, *ins)
    emit(engine, Opcode.TENSOR_SCALAR, views[:1], views[1:], **kw)
    return res


def copy(x: Any, *, dtype: Any = None, mask: Predicate | None = None, out: NkiTensor | None = None,
         engine: Engine = Engine.VECTOR) -> NkiTensor:  # fmt: skip
    x = tile(x, "copy source", packed_ok=True)
    dt = dname(dtype) if dtype is not None else x.dtype_name
    if x.dtype_name in PACKED_MX and dt != x.dtype_name:
        raise packed_error("copy source", x.dtype_name)
    res = result_tile(out, x.shape, dt, packed_ok=dt == x.dtype_name)
    o, i = apply_mask(mask, x.shape, res, x)
    emit(engine, Opcode.TENSOR_COPY, [o], [i])
    return res


def unary(func: str, x: Any, *, dtype: Any = None, mask: Predicate | None = None) -> NkiTensor:
    return activation(func, x, dtype=dtype, mask=mask)


# -- reductions -------------------------------------------------------------------------------
def reduce(op: str, x: Any, axis: Any, *, dtype: Any = None, mask: Predicate | None = None, keepdims: bool = False,
           negate: bool = False, out: NkiTensor | None = None) -> NkiTensor:  # fmt: skip
    """Reduce the free axes `axis` of `x` into a new tile or `out` (a [P, 1] `out` takes a rank-1 result)."""
    x = tile(x, "reduction input")
    if out is not None and not keepdims and out.ndim == x.ndim:
        keepdims = True
    axes = _axes(axis, x.ndim)
    shape = (
        tuple(1 if k in axes else s for k, s in enumerate(x.shape))
        if keepdims
        else tuple(s for k, s in enumerate(x.shape) if k not in axes)
    )
    res = result_tile(out, shape, dname(dtype) if dtype is not None else x.dtype_name)
    (xi,) = apply_mask(mask, x.shape, x)
    if mask is not None:
        box = mask_box(mask, x.shape)
        res_view = res.restrict([(box[0][0], box[0][1])] + [(0, s) for s in res.shape[1:]])
    else:
        res_view = res
    emit(Engine.VECTOR, Opcode.TENSOR_REDUCE, [res_view], [xi], op=op, axes=tuple(axes), negate=negate or None)
    return res


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(1, ndim))
    items = axis if isinstance(axis, list | tuple) else (axis,)
    out = []
    for a in items:
        a = int(a)
        if a < 0:
            a += ndim
        if a == 0:
            raise kernel_error("cannot reduce along the partition axis (axis 0); transpose the tile first")
        if not 0 < a < ndim:
            raise kernel_error(f"axis {a} is out of range for a tile of rank {ndim}")
        out.append(a)
    return tuple(sorted(set(out)))


def _numel_free(x: NkiTensor) -> int:
    n = 1
    for s in x.shape[1:]:
        n *= s
    return n

