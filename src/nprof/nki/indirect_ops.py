"""The NKI calls that take runtime indices or gather: indirect load/store/DMA, atomic_rmw, dynamic copies,
gathers and stream shuffles (re-exported by `nl` / `nisa`; views and lowering in `nprof.nki.indirect`).

Each follows AWS's NKI API reference (Neuron 2.26) for its parameters and
semantics; engines and costs are in `nprof.arch.cost`. Constraints the
reference states are checked at trace time with the kernel's line.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from typing import Any

import numpy as np

from nprof.arch.isa import Engine, Opcode, Space
from nprof.nki import compute as _c
from nprof.nki import trace
from nprof.nki.calls import NkiCompatWarning, beta2, first_in_kernel
from nprof.nki.indirect import IndirectView, emit_dma, emit_dynamic_copy
from nprof.nki.isa_enums import device_engine, engine, oob_mode
from nprof.nki.masks import mask_box
from nprof.nki.source import kernel_error, user_location
from nprof.nki.tensor import NkiTensor

_INT = ("int32", "uint32", "int16", "uint16", "int8", "uint8")


def _box(mask: Any, shape: tuple[int, ...]) -> list[tuple[int, int]] | None:
    return mask_box(mask, shape) if mask is not None else None


def load_indirect(src: IndirectView, mask: Any, dtype: Any) -> NkiTensor:
    """`nl.load(t[idx_tile, i_f])`: an indirect DMA (gather of rows) into a new SBUF tile."""
    if not src.is_hbm:
        raise kernel_error("nl.load reads HBM; on chip use nisa.tensor_copy_dynamic_src")
    shape = src.shape
    dst = trace.current().alloc(shape, _c.dname(dtype) if dtype is not None else src.dtype_name, Space.SBUF)
    box = _box(mask, shape)
    emit_dma(dst.restrict(box) if box else dst, src.restrict(box))
    return dst


def store_indirect(dst: IndirectView, value: Any, mask: Any) -> None:
    """`nl.store(t[idx_tile, i_f], value)`: an indirect DMA (scatter of rows) from a tile."""
    if not dst.is_hbm:
        raise kernel_error("nl.store writes HBM; on chip use nisa.tensor_copy_dynamic_dst")
    emit_dma(dst.restrict(_box(mask, dst.shape)), _value_tile(value, dst, mask))


def _value_tile(value: Any, dst: IndirectView, mask: Any) -> NkiTensor:
    """The SBUF tile a DMA writes into `dst` (scalars filled, PSUM copied), narrowed by `mask`."""
    if _c.is_scalar(value):
        value = _c.full_tile(dst.shape, float(value), dst.dtype_name)
    value = _c.tile(value, "value")
    if value.space is Space.PSUM:
        value = _c.copy(value, dtype=dst.dtype_name)
    if value.shape != dst.shape and math.prod(value.shape) != math.prod(dst.shape):
        raise kernel_error(f"value of shape {value.shape} does not match the destination {dst.shape}")
    box = _box(mask, value.shape)
    return value.restrict(box) if box else value


def dma_copy_runtime(dst: Any, src: Any, mask: Any, dst_rmw_op: Any, oob: Any) -> None:
    """`nisa.dma_copy` when a side is indexed with runtime values or `dst_rmw_op` is given."""
    rmw = _rmw_name(dst_rmw_op, "nisa.dma_copy dst_rmw_op")
    skip = oob == oob_mode.skip
    if rmw is not None and skip:
        raise kernel_error("dma_copy: with dst_rmw_op only oob_mode=oob_mode.error is allowed (NKI API reference)")
    for v, what in ((dst, "dst"), (src, "src")):
        if not isinstance(v, NkiTensor | IndirectView):
            raise kernel_error(f"dma_copy {what} must be a tensor or tile, got {type(v).__name__}")
    if isinstance(src, NkiTensor):
        _c.consumed(src)
    box = _box(mask, dst.shape)
    d = dst.restrict(box) if box else dst
    s = src.restrict(_box(mask, src.shape)) if box else src
    emit_dma(d, s, oob="skip" if skip else "error", rmw=rmw)


def _rmw_name(op: Any, what: str) -> str | None:
    """'add' for np.add / nl.add, None for None; KernelError for anything else (AWS: only np.add)."""
    if op is None:
        return None
    if op is np.add or getattr(op, "_nki_alu", None) == "add" or op == "add":
        return "add"
    raise kernel_error(f"{what} supports only np.add (NKI API reference), got {getattr(op, '__name__', op)!r}")


def atomic_rmw(dst: Any, value: Any, op: Any, *, mask: Any = None) -> None:
    """dst = op(dst, value) on HBM rows addressed by a tile of indices (duplicates accumulate): one DMA that
    adds into its destination. AWS: dst must use indirect dynamic indexing; op only np.add."""
    if not isinstance(dst, IndirectView) or not dst.is_hbm:
        raise kernel_error(
            "nl.atomic_rmw: dst must be an HBM tensor indexed with a tile of indices (t[idx_tile, i_f]); "
            "only indirect dynamic indexing is supported (NKI API reference)"
        )
    rmw = _rmw_name(op, "nl.atomic_rmw op")
    emit_dma(dst.restrict(_box(mask, dst.shape)), _value_tile(value, dst, mask), rmw=rmw)


def copy_engine(value: Any, *views: Any) -> Engine:
    """The engine of a dynamic copy: `engine=`, else GpSimdE (VectorE when PSUM is involved: GpSimdE has no
    PSUM port)."""
    if value is not None and value != engine.unknown:
        eng = device_engine(value)
        if Engine(eng) not in (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD):
            raise kernel_error(f"tensor_copy_dynamic runs on VectorE, ScalarE or GpSimdE, not {eng}")
        return Engine(eng)
    return Engine.VECTOR if any(v.space is Space.PSUM for v in views) else Engine.GPSIMD


def tensor_copy_dynamic_src(src: Any, *, mask: Any = None, dtype: Any = None,
                            engine: Any = engine.unknown) -> NkiTensor:  # fmt: skip
    """A copy of `src`, a tile read at a runtime offset within each partition (`t[ix, offsets[0, i] + iy]`),
    into a new SBUF tile (cost: max(~600, N) cycles, the reference's MIN_II_DYNAMIC)."""
    if not isinstance(src, IndirectView | NkiTensor) or src.is_hbm:
        raise kernel_error("tensor_copy_dynamic_src: src must be an SBUF/PSUM tile indexed with a runtime offset")
    res = _c.new_tile(src.shape, _c.dname(dtype) if dtype is not None else src.dtype_name)
    box = _box(mask, src.shape)
    s = src.restrict(box) if box else src
    emit_dynamic_copy(res.restrict(box) if box else res, s, copy_engine(engine, res, s))
    return res


def tensor_copy_dynamic_dst(*, dst: Any, src: Any, mask: Any = None, dtype: Any = None,
                            engine: Any = engine.unknown) -> None:  # fmt: skip
    """A copy of tile `src` into `dst`, a tile written at a runtime offset within each partition."""
    if not isinstance(dst, IndirectView | NkiTensor) or dst.is_hbm:
        raise kernel_error("tensor_copy_dynamic_dst: dst must be an SBUF/PSUM tile indexed with a runtime offset")
    x = _c.tile(src, "src")
    if math.prod(x.shape) != math.prod(dst.shape) or x.shape[0] != dst.shape[0]:
        raise kernel_error(f"tensor_copy_dynamic_dst: src {x.shape} and dst {dst.shape} must have the same "
                           "partitions and elements per partition")  # fmt: skip
    if x.shape != dst.shape:
        flat = x.flatten_free()
        if flat is None:
            raise kernel_error("tensor_copy_dynamic_dst: src must be contiguous along its free axes to take dst's "
                               "shape")
        x = flat.unflatten_free(dst.shape[1:])
    box = _box(mask, dst.shape)
    d = dst.restrict(box) if box else dst
    emit_dynamic_copy(d, x.restrict(box) if box else x, copy_engine(engine, d, x))


def gather_flattened(data: Any, indices: Any, *, mask: Any = None, dtype: Any = None) -> NkiTensor:
    """Per partition, the elements of `data` (free axes flattened) at `indices` (unsigned integers): a tile of
    indices' shape (GpSimdE GATHER, as nisa.nc_n_gather documents it). Indices past the row are an error
    (AWS: garbage values)."""
    return _gather(data, indices, mask, dtype, None)


def _gather(data: Any, indices: Any, mask: Any, dtype: Any, dst: NkiTensor | None) -> NkiTensor:
    """One GpSimdE GATHER of `data` at `indices` into `dst` (or a new tile)."""
    x, idx = _c.tile(data, "data"), _c.tile(indices, "indices")
    if idx.dtype_name not in _INT:
        raise kernel_error(f"nl.gather_flattened indices must be integers (uint32), got {idx.dtype_name}")
    if not 2 <= x.ndim <= 4 or not 2 <= idx.ndim <= 4 or x.shape[0] != idx.shape[0]:
        raise kernel_error(f"nl.gather_flattened takes 2- to 4-D data and indices with the same partitions, got "
                           f"{x.shape} and {idx.shape}")  # fmt: skip
    res = _c.result_tile(dst, idx.shape, _c.dname(dtype) if dtype is not None else x.dtype_name)
    out, ii = _c.apply_mask(mask, idx.shape, res, idx)
    xv = x if out.shape[0] == x.shape[0] else x.restrict([(0, out.shape[0])] + [(0, s) for s in x.shape[1:]])
    _c.emit(Engine.GPSIMD, Opcode.GATHER, [out], [xv, ii])
    return res


def nc_n_gather(dst: Any, data: Any, indices: Any, name: Any = None) -> Any:
    """Beta 2: `dst` = per partition, the elements of `data` (free axes flattened) at `indices` (GpSimdE GATHER;
    nl.gather_flattened's semantics)."""
    if not isinstance(dst, NkiTensor):
        raise kernel_error("nc_n_gather dst must be an SBUF tile")
    return _gather(data, indices, None, dst.dtype_name, dst)


@beta2(("dst", "src_buffer", "index", "num_elem_per_idx", "num_valid_indices", "name"), at=2)
def local_gather(src_buffer: Any, index: Any, num_elem_per_idx: int = 1, num_valid_indices: Any = None, *,
                 mask: Any = None, dst: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """GpSimdE gather within groups of 16 partitions (NKI API reference): each group reads its 16 partitions of
    `index` (uint16 element offsets) flattened partition-first, the first `num_valid_indices`, and every
    partition of the group reads `num_elem_per_idx` elements of its own `src_buffer` row at each; the result
    is [P, num_valid_indices * num_elem_per_idx] of src_buffer's dtype."""
    x, idx = _c.tile(src_buffer, "src_buffer"), _c.tile(index, "index")
    parts = x.shape[0]
    if idx.shape[0] != parts or parts % 16:
        raise kernel_error(f"local_gather: src_buffer and index need the same partitions, a multiple of 16; got "
                           f"{x.shape} and {idx.shape}")  # fmt: skip
    if idx.dtype_name != "uint16":
        raise kernel_error(f"local_gather indices must be uint16 (NKI API reference), got {idx.dtype_name}")
    elems = int(num_elem_per_idx)
    if elems not in (1, 2, 4, 8, 16, 32):
        raise kernel_error(f"local_gather num_elem_per_idx must be 1, 2, 4, 8, 16 or 32, got {elems}")
    per_core = 16 * math.prod(idx.shape[1:])
    valid = per_core if num_valid_indices is None else int(num_valid_indices)
    if not 0 < valid <= min(per_core, 4096):
        raise kernel_error(f"local_gather num_valid_indices must be 1..{min(per_core, 4096)} (the indices of 16 "
                           f"partitions, at most 4096), got {valid}")  # fmt: skip
    if mask is not None:
        raise kernel_error("local_gather with mask= is not supported by nprof; slice src_buffer and index instead")
    res = _c.result_tile(dst, (parts, valid * elems), x.dtype_name)
    _c.emit(Engine.GPSIMD, Opcode.LOCAL_GATHER, [res], [x, idx], elems=elems, valid=valid)
    return res


def _positional_order_note(fn: Any) -> Any:
    """`fn` that warns once per kernel when called with src and dst by position: 2.26 orders them (src, dst),
    beta 2 (dst, src), and both are tiles, so nprof reads them in the 2.26 order (module doc of calls)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if len(args) >= 2 and first_in_kernel("nc_stream_shuffle positional src/dst"):
            warnings.warn(f"{user_location() or '<kernel>'}: nisa.nc_stream_shuffle got src and dst by position: "
                          "read in the 2.26 order (src, dst); beta 2's order is (dst, src): pass them by keyword",
                          NkiCompatWarning, stacklevel=2)  # fmt: skip
        return fn(*args, **kwargs)

    wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return wrapper


@_positional_order_note
def nc_stream_shuffle(src: Any, dst: Any, shuffle_mask: Any, *, dtype: Any = None, mask: Any = None,
                      name: Any = None) -> None:  # fmt: skip
    """VectorE cross-partition move within each quadrant of 32 partitions: dst row i = src row shuffle_mask[i]
    (255: unchanged), the same mask for every quadrant (NKI API reference, with its three constraints). Positional
    src and dst are read in the 2.26 order and warn (beta 2 orders them dst, src)."""
    s, d = _c.tile(src, "src"), _c.tile(dst, "dst")
    if s.dtype_name != d.dtype_name or (dtype is not None and _c.dname(dtype) != d.dtype_name):
        raise kernel_error("nc_stream_shuffle: dst must have the same dtype as src")
    if math.prod(s.shape[1:]) != math.prod(d.shape[1:]):
        raise kernel_error(f"nc_stream_shuffle: src {s.shape} and dst {d.shape} need the same elements per partition")
    shuffle = list(shuffle_mask)
    if len(shuffle) != 32 or not all(isinstance(k, int | np.integer) and (0 <= k < 32 or k == 255) for k in shuffle):
        raise kernel_error("nc_stream_shuffle: shuffle_mask is a list of 32 partition numbers (0..31, or 255)")
    if mask is not None:
        raise kernel_error("nc_stream_shuffle with mask= is not supported by nprof; slice dst instead")
    active = math.ceil(max(s.shape[0], d.shape[0]) / 32) * 32
    allowed = {96: (0,), 128: (0,), 64: (0, 64), 32: (0, 32, 64, 96)}[active]
    for v, what in ((s, "src"), (d, "dst")):
        start = v.access_key()[0]
        if start not in allowed:
            raise kernel_error(f"nc_stream_shuffle: with {active} active partitions the {what} must start at "
                               f"partition {' or '.join(map(str, allowed))}, not {start}")  # fmt: skip
    _c.emit(Engine.VECTOR, Opcode.STREAM_SHUFFLE, [d], [s], shuffle=tuple(int(k) for k in shuffle))
