"""The rest of Neuron 2.26's `nki.isa` instructions (re-exported by `nprof.nki.isa`).

Scans, cross-partition reductions, reductions fused into tensor_scalar,
predicated copies, top-8 search, dynamic copies and DMA transposes, each
lowered to the instruction(s) `nprof.arch.isa` defines; both call styles as in
`nprof.nki.isa`. Instructions nprof does not simulate (random numbers, local
gathers, stream shuffles, range selects, sequence bounds, custom ops) exist with
AWS's signatures and raise a KernelError naming the instruction, so a kernel
fails at its own line instead of on an AttributeError.
"""

from __future__ import annotations

import ast
import inspect
import math
from typing import Any

import numpy as np

from nprof.arch.isa import Engine, Opcode, Space
from nprof.nki import compute as _c
from nprof.nki import isa_enums as _isa_enums
from nprof.nki.calls import beta2
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor

__all__ = [
    "builtin_custom_op", "dma_transpose", "dropout", "local_gather", "max8", "nc_find_index8", "nc_match_replace8",
    "nc_n_gather",
    "nc_stream_shuffle", "range_select", "select_reduce", "sequence_bounds", "tensor_copy_dynamic_dst",
    "tensor_copy_dynamic_src", "tensor_copy_predicated", "tensor_partition_reduce", "tensor_scalar_reduce",
    "tensor_tensor_scan",
]  # fmt: skip


def _isa() -> Any:
    from nprof.nki import isa

    return isa


def _dt(dst: Any, dtype: Any, default: str, what: str) -> str:
    dtype = _isa()._dtype_for(dst, dtype, what)
    return _c.dname(dtype) if dtype is not None else default


@beta2(("dst", "data0", "data1", "initial", "op0", "op1", "reverse0", "reverse1", "name"), at=3)
def tensor_tensor_scan(data0: Any, data1: Any, initial: Any, op0: Any, op1: Any, reverse0: bool = False,
                       reverse1: bool = False, *, dtype: Any = None, mask: Any = None, dst: Any = None,
                       name: Any = None) -> NkiTensor:  # fmt: skip
    """Per partition along the free axis: r[i] = op1(op0(data0[i], r[i-1]), data1[i]), r[-1] = initial
    (a scalar or a [P, 1] tile); VectorE TENSOR_TENSOR_SCAN."""
    if reverse0 or reverse1:
        raise kernel_error("tensor_tensor_scan(reverse0/reverse1=True) is not supported by nprof")
    isa = _isa()
    a, b = _c.tile(data0, "data0"), _c.tile(data1, "data1")
    if a.shape != b.shape:
        raise kernel_error(f"tensor_tensor_scan data0 {a.shape} and data1 {b.shape} must have the same shape")
    res = _c.result_tile(dst, a.shape, _dt(dst, dtype, a.dtype_name, "tensor_tensor_scan"))
    ins, kw = [a, b], {"op0": isa.alu_name(op0), "op1": isa.alu_name(op1)}
    if _c.is_scalar(initial):
        kw["initial"] = float(initial)
    else:
        ins.append(_c.tile(initial, "initial"))
    views = _c.apply_mask(mask, a.shape, res, *ins)
    _c.emit(Engine.VECTOR, Opcode.TENSOR_TENSOR_SCAN, views[:1], views[1:], **kw)
    return res


@beta2(("dst", "op", "data", "name"), at=0)
def tensor_partition_reduce(op: Any, data: Any, *, mask: Any = None, dtype: Any = None, dst: Any = None,
                            name: Any = None) -> NkiTensor:  # fmt: skip
    """Reduce `data` across its partitions into a [1, F...] tile (GpSimdE TENSOR_PARTITION_REDUCE)."""
    isa = _isa()
    x = _c.tile(data, "data")
    alu = isa.alu_name(op)
    name_ = {"maximum": "max", "minimum": "min"}.get(alu, alu)
    if name_ not in ("add", "max", "min", "multiply", "bitwise_or", "bitwise_and"):
        raise kernel_error(f"tensor_partition_reduce op must be add, max, bitwise_or or bitwise_and, got {op!r}")
    res = _c.result_tile(dst, (1, *x.shape[1:]), _dt(dst, dtype, x.dtype_name, "tensor_partition_reduce"))
    (xi,) = _c.apply_mask(mask, x.shape, x)
    _c.emit(Engine.GPSIMD, Opcode.TENSOR_PARTITION_REDUCE, [res], [xi], op=name_)
    return res


@beta2(("dst", "data", "op0", "operand0", "reduce_op", "reduce_res", "reverse0", "reduce_cmd", "reduce_init",
        "reduce_res_negate", "name"), at=0)  # fmt: skip
def tensor_scalar_reduce(*, data: Any, op0: Any, operand0: Any, reduce_op: Any, reduce_res: Any,
                         reverse0: bool = False, dtype: Any = None, mask: Any = None, dst: Any = None,
                         reduce_cmd: Any = None, reduce_init: Any = None, reduce_res_negate: bool = False,
                         name: Any = None) -> NkiTensor:  # fmt: skip
    """data <op0> operand0 (one VectorE TENSOR_SCALAR) that also reduces its result over all free axes into
    `reduce_res` [P, 1] with `reduce_op` (add, max, min, multiply)."""
    isa = _isa()
    isa._reduce_cmd_check("nisa.tensor_scalar_reduce", reduce_cmd)
    if reduce_init is not None or reduce_res_negate:
        raise kernel_error("tensor_scalar_reduce(reduce_init=, reduce_res_negate=) is not supported by nprof")
    x = _c.tile(data, "data")
    rr = _c.tile(reduce_res, "reduce_res")
    if rr.shape[0] != x.shape[0] or _c._numel_free(rr) != 1:
        raise kernel_error(f"reduce_res must be a [{x.shape[0]}, 1] tile, got {rr.shape}")
    res = _c.result_tile(dst, x.shape, _dt(dst, dtype, x.dtype_name, "tensor_scalar_reduce"))
    ins, kw = [x], {"op0": isa.scalar_alu_name(op0, operand0), "reverse0": bool(reverse0) or None,
                    "reduce_op": isa.reduce_name(reduce_op)}  # fmt: skip
    if _c.is_scalar(operand0):
        kw["operand0"] = float(operand0)
    else:
        ins.append(_c.tile(operand0, "operand0"))
    views = _c.apply_mask(mask, x.shape, res, *ins)
    rv = rr if mask is None else _c.apply_mask(mask, x.shape, rr)[0]
    _c.emit(Engine.VECTOR, Opcode.TENSOR_SCALAR, [views[0], rv], views[1:], **kw)
    return res


@beta2(("dst", "src", "predicate", "reverse_pred", "name"), at=0)
def tensor_copy_predicated(*, src: Any, dst: Any, predicate: Any, reverse_pred: bool = False, mask: Any = None,
                           dtype: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """dst = src where predicate != 0 (== 0 with reverse_pred), else dst unchanged (VectorE SELECT)."""
    d, p = _c.result_tile(dst, _c.tile(predicate).shape, "float32"), _c.tile(predicate, "predicate")
    s = _c.full_tile(p.shape, float(src), "float32") if _c.is_scalar(src) else _c.tile(src, "src")
    a, b = (d, s) if reverse_pred else (s, d)
    views = _c.apply_mask(mask, p.shape, d, p, a, b)
    _c.emit(Engine.VECTOR, Opcode.SELECT, views[:1], views[1:])
    return d


@beta2(("dst", "predicate", "on_true", "on_false", "reduce_res", "reduce_cmd", "reduce_op", "reverse_pred", "name"),
       at=0)  # fmt: skip
def select_reduce(*, dst: Any, predicate: Any, on_true: Any, on_false: Any, reduce_res: Any = None,
                  reduce_cmd: Any = _isa_enums.reduce_cmd.idle, reduce_op: Any = np.amax, reverse_pred: bool = False,
                  mask: Any = None, dtype: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """dst = where(predicate, on_true, on_false) (SELECT), then optionally reduce dst's free axes into
    reduce_res (TENSOR_REDUCE; two instructions where the hardware fuses them)."""
    _isa()._reduce_cmd_check("nisa.select_reduce", reduce_cmd)
    p = _c.tile(predicate, "predicate")
    d = _c.result_tile(dst, p.shape, "float32")
    t = _c.tile(on_true, "on_true")
    f = _c.full_tile(p.shape, float(on_false), "float32") if _c.is_scalar(on_false) else _c.tile(on_false)
    a, b = (f, t) if reverse_pred else (t, f)
    views = _c.apply_mask(mask, p.shape, d, p, a, b)
    _c.emit(Engine.VECTOR, Opcode.SELECT, views[:1], views[1:])
    if reduce_res is not None:
        _c.reduce(_isa().reduce_name(reduce_op if reduce_op is not None else "max"), d, None, out=reduce_res)
    return d


def _top8(opcode: Opcode, what: str, dst: Any, outs_extra: list[NkiTensor], ins: list[NkiTensor], dtype: str,
          **kw: Any) -> NkiTensor:  # fmt: skip
    x = ins[0]
    if not 8 <= _c._numel_free(x) <= 16384:
        raise kernel_error(f"{what} reads 8..16384 elements per partition, got {x.shape}")
    shape = x.shape if opcode is Opcode.MATCH_REPLACE8 else (x.shape[0], 8)
    res = _c.result_tile(dst, shape, dtype)
    _c.emit(Engine.VECTOR, opcode, [res, *outs_extra], ins, **kw)
    return res


@beta2(("dst", "src", "name"), at=0)
def max8(*, src: Any, mask: Any = None, dtype: Any = None, dst: Any = None, name: Any = None) -> NkiTensor:
    """The 8 largest values of each partition, descending: [P, 8] (VectorE MAX8)."""
    x = _c.tile(src, "src").masked(mask) if mask is not None else _c.tile(src, "src")
    return _top8(Opcode.MAX8, "max8", dst, [], [x], _dt(dst, dtype, x.dtype_name, "max8"))


@beta2(("dst", "data", "vals", "name"), at=0)
def nc_find_index8(*, data: Any, vals: Any, mask: Any = None, dtype: Any = None, dst: Any = None,
                   name: Any = None) -> NkiTensor:  # fmt: skip
    """Index of the first occurrence of each of the 8 `vals` in each partition of `data`: [P, 8] uint32."""
    x = _c.tile(data, "data").masked(mask) if mask is not None else _c.tile(data, "data")
    return _top8(Opcode.FIND_INDEX8, "nc_find_index8", dst, [], [x, _c.tile(vals, "vals")],
                 _dt(dst, dtype, "uint32", "nc_find_index8"))  # fmt: skip


@beta2(("dst", "data", "vals", "imm", "dst_idx", "name"), at=0)
def nc_match_replace8(*, data: Any, vals: Any, imm: float, dst_idx: Any = None, mask: Any = None, dtype: Any = None,
                      dst: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """`data` with the first occurrence of each of the 8 `vals` per partition replaced by `imm`; the matched
    indices go to `dst_idx` when given (VectorE MATCH_REPLACE8)."""
    full = _c.tile(data, "data")
    if mask is None:
        extra = [_c.result_tile(dst_idx, (full.shape[0], 8), "uint32")] if dst_idx is not None else []
        return _top8(Opcode.MATCH_REPLACE8, "nc_match_replace8", dst, extra, [full, _c.tile(vals, "vals")],
                     _dt(dst, dtype, full.dtype_name, "nc_match_replace8"), imm=float(imm))  # fmt: skip
    # masked: the result has data's shape, written (and dst_idx's rows) only inside the mask, as NKI masks do
    box = _c.mask_box(mask, full.shape)
    res = _c.result_tile(dst, full.shape, _dt(dst, dtype, full.dtype_name, "nc_match_replace8"))
    if dst_idx is not None and dst_idx.shape[0] != box[0][1] - box[0][0]:
        dst_idx = dst_idx.restrict([box[0]] + [(0, s) for s in dst_idx.shape[1:]])
    rows = box[0][1] - box[0][0]
    extra = [_c.result_tile(dst_idx, (rows, 8), "uint32")] if dst_idx is not None else []
    _top8(Opcode.MATCH_REPLACE8, "nc_match_replace8", res.restrict(box), extra,
          [full.restrict(box), _c.tile(vals, "vals")], res.dtype_name, imm=float(imm))  # fmt: skip
    from nprof.nki.masks import note_mask

    note_mask(res, box)
    return res


@beta2(("dst", "src", "axes", "priority", "dge_mode", "oob_mode", "name"), at=1)
def dma_transpose(src: Any, *, axes: Any = None, mask: Any = None, dtype: Any = None, dst: Any = None,
                  priority: Any = None, dge_mode: Any = None, oob_mode: Any = None,
                  name: Any = None) -> NkiTensor:  # fmt: skip
    """src.T of a 2-D HBM view or SBUF tile into a new SBUF tile (or `dst`), one DMA: a transposing access
    pattern from HBM, a DMA transpose (attrs `transpose`, one element per chunk) from SBUF. Also the beta-2
    `dma_transpose(dst, src, axes)`. `priority` and a `dge_mode` other than unknown warn (not modelled);
    `oob_mode` has nothing to act on (no runtime indices here: static ones are checked when traced)."""
    from nprof.nki.calls import unmodelled_if

    unknown = dge_mode is None or dge_mode == _isa_enums.dge_mode.unknown
    unmodelled_if("nisa.dma_transpose", priority=(priority, None), dge_mode=(None if unknown else dge_mode, None))
    if axes not in (None, (1, 0), [1, 0]):
        raise kernel_error(f"dma_transpose supports 2-D transposes (axes=(1, 0)), got axes={axes}")
    if hasattr(src, "dyn_attrs"):
        raise kernel_error(
            "dma_transpose does not take runtime indices (NKI: "
            "err_indirect_indices_are_not_supported_with_nki_api); nisa.dma_copy the rows first"
        )
    if not isinstance(src, NkiTensor) or src.ndim != 2:
        raise kernel_error("dma_transpose takes a 2-D tensor or tile")
    from nprof.nki.language import load

    if src.is_hbm:
        view = src.transpose2d()
        if view is None:
            raise kernel_error(f"dma_transpose: the view {src.shape} cannot be transposed by one access pattern")
        res = load(view, mask=mask, dtype=dtype)
    else:
        res = _dma_transpose_sbuf(src, mask, dtype)
    if dst is not None:
        from nprof.nki.assign import assign

        assign(dst, res)
        return dst
    return res


def _dma_transpose_sbuf(src: NkiTensor, mask: Any, dtype: Any) -> NkiTensor:
    """An SBUF tile [P, F] into a new SBUF tile [F, P] by one DMA transpose (`dtype` converts)."""
    from nprof.nki import trace as _trace

    if src.space is not Space.SBUF:
        raise kernel_error("dma_transpose reads HBM or SBUF (NKI API reference); copy the PSUM tile to SBUF first")
    if mask is not None:
        raise kernel_error("dma_transpose of an SBUF tile takes no mask in nprof; transpose a slice of the tile")
    builder = _trace.current()
    parts, free = src.shape
    if free > builder.preset.pmax:
        raise kernel_error(f"dma_transpose of {src.shape}: the result would have {free} > {builder.preset.pmax} "
                           "partitions; transpose at most that many columns at a time")  # fmt: skip
    _c.consumed(src)
    res = builder.alloc((free, parts), _c.dname(dtype) if dtype is not None else src.dtype_name, Space.SBUF)
    builder.dma(res, src, transpose=True)
    return res


_CMP = {"is_equal": "eq", "not_equal": "ne", "is_ge": "ge", "is_gt": "gt", "is_le": "le", "is_lt": "lt"}


def pattern_view(dst: Any, pattern: Any, what: str) -> tuple[NkiTensor, tuple[int, ...]]:
    """`dst` viewed as [P, num_1, ...] for a beta-2 access pattern [[step_1, num_1], ...], and the steps."""
    if not isinstance(dst, NkiTensor) or dst.space is not Space.SBUF:
        raise kernel_error(f"{what} dst must be an SBUF tile")
    pairs = [(int(step), int(num)) for step, num in pattern]
    nums = tuple(n for _, n in pairs)
    flat = dst.flatten_free()
    if flat is None or _c._numel_free(dst) != math.prod(nums):
        raise kernel_error(f"{what}: pattern {pattern} covers {math.prod(nums)} elements per partition; dst "
                           f"{dst.shape} must be contiguous with that many")  # fmt: skip
    return flat.unflatten_free(nums), tuple(step for step, _ in pairs)


def affine_select_pattern(dst: Any, pattern: Any, channel_multiplier: int, on_true_tile: Any, on_false_value: float,
                          cmp_op: Any, offset: int) -> NkiTensor:  # fmt: skip
    """The beta-2 `nisa.affine_select`: dst = on_true where cmp_op(affine value, 0), else on_false_value."""
    view, steps = pattern_view(dst, pattern, "affine_select")
    x = _c.tile(on_true_tile, "on_true_tile")
    xv = x.flatten_free()
    if xv is None or xv.shape[1] != math.prod(view.shape[1:]):
        raise kernel_error(f"affine_select on_true_tile {x.shape} must match dst {dst.shape}")
    cmp = _CMP.get(_isa().alu_name(cmp_op) if cmp_op is not None else "is_equal")
    if cmp is None:
        raise kernel_error(f"affine_select cmp_op must be a comparison (nl.equal, nl.greater_equal, ...), got {cmp_op}")
    _c.emit(Engine.GPSIMD, Opcode.AFFINE_SELECT, [view], [xv.unflatten_free(view.shape[1:])], offset=int(offset),
            channel_multiplier=int(channel_multiplier), steps=steps, cmp=cmp, fill=float(on_false_value))  # fmt: skip
    return dst


def unsupported(qualname: str, params: str, why: str) -> Any:
    """A function named `qualname` ("nisa.dropout") with parameters `params` ("data prob *mask") that raises a
    KernelError saying why nprof cannot run it (names from a `*`-prefixed one on are keyword-only; those and
    names ending in `?` default to None; `name=literal` gives that default)."""
    kind: inspect._ParameterKind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    fields: list[inspect.Parameter] = []
    for p in params.split():
        if p.startswith("*"):
            kind, p = inspect.Parameter.KEYWORD_ONLY, p[1:]
        p, eq, literal = p.partition("=")
        optional = kind is inspect.Parameter.KEYWORD_ONLY or p.endswith("?")
        default = ast.literal_eval(literal) if eq else None if optional else inspect.Parameter.empty
        fields.append(inspect.Parameter(p.rstrip("?"), kind, default=default))

    def fn(*args: Any, **kwargs: Any) -> Any:
        fn.__signature__.bind(*args, **kwargs)  # type: ignore[attr-defined]  # TypeError for unknown keywords
        raise kernel_error(f"{qualname} is not supported by nprof ({why})")

    fn.__name__ = fn.__qualname__ = qualname.rsplit(".", 1)[-1]
    fn.__doc__ = f"Not simulated by nprof: raises a KernelError ({why})."
    fn.__signature__ = inspect.Signature(fields)  # type: ignore[attr-defined]
    fn._nki_unsupported = True  # type: ignore[attr-defined]
    return fn


@beta2(("dst", "data", "prob", "name"), at=None)
def dropout(data: Any, prob: Any, *, mask: Any = None, dtype: Any = None, dst: Any = None,
            name: Any = None) -> NkiTensor:  # fmt: skip
    """`data` with each element replaced by 0 with probability `prob` (a scalar or [P, 1]), into a new tile or
    `dst` (beta 2); see `nprof.nki.dropout` for the model of the random draws."""
    from nprof.nki.dropout import dropout_tile

    return dropout_tile(data, prob, _isa()._dtype_for(dst, dtype, "dropout"), mask, "nisa.dropout", out=dst)


@beta2(("dst", "segment_ids", "name"), at=None)
def sequence_bounds(*, segment_ids: Any, dtype: Any = None, dst: Any = None, name: Any = None) -> NkiTensor:
    """Per element of a [1, N] tile of segment ids, the start and (exclusive) end index of its segment:
    [1, 2, N] (a new tile, or `dst` in beta 2); padding (id 0) gets (N, -1) (GpSimdE SEQUENCE_BOUNDS, AWS NKI
    2.26 reference)."""
    ids = _c.tile(segment_ids, "segment_ids")
    if ids.shape[0] != 1 or ids.dtype_name not in ("float32", "int32"):
        raise kernel_error(f"sequence_bounds takes a [1, N] float32 or int32 tile, got {ids.shape} {ids.dtype_name}")
    dt = _dt(dst, dtype, ids.dtype_name, "sequence_bounds")
    if dt not in ("float32", "int32"):
        raise kernel_error(f"sequence_bounds dtype must be float32 or int32, got {dt}")
    n = _c._numel_free(ids)
    res = _c.result_tile(dst, (1, 2, n), dt)
    _c.emit(Engine.GPSIMD, Opcode.SEQUENCE_BOUNDS, [res], [ids])
    return res


from nprof.nki.indirect_ops import (  # noqa: E402  (runtime indices and gathers)
    local_gather,
    nc_n_gather,
    nc_stream_shuffle,
    tensor_copy_dynamic_dst,
    tensor_copy_dynamic_src,
)
from nprof.nki.range_select import range_select  # noqa: E402

builtin_custom_op = unsupported("nisa.builtin_custom_op", "function_name lib_file_name ulib_to_ucode_version "
                                "ulib_to_isa_version srcs dsts", "custom GpSimd libraries cannot run here")  # fmt: skip
