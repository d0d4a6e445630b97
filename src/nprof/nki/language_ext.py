"""The rest of Neuron 2.26's `nki.language` (re-exported by `nprof.nki.language`).

More elementwise math (ScalarE activations: floor, ceil, trunc, tan, arctan,
mish, the activation derivatives; VectorE ALU ops: xor, shifts, fmod),
reductions built from instructions (`all`, `var`, `rms_norm`), views
(`broadcast_to`, `expand_dims`), constants (`shared_constant`, `fp32`,
`finfo`), launch-grid helpers (`nc`, `spmd_dim`: the grid's size; instances
run in order on the one simulated core), trace-time casts (`static_cast`) and
`device_print`, which prints the tile's values after the simulation (a DMA of
the tile to a hidden output tensor, as the simulator's print reads device
memory). Functions nprof cannot run (random numbers, atomics, gathers,
loop_reduce, all_reduce) exist with AWS's parameters and raise a KernelError.
"""

from __future__ import annotations

import json
import math
import weakref
from typing import Any

import ml_dtypes
import numpy as np

from nprof.arch.isa import Space
from nprof.nki import compute as _c
from nprof.nki import language as _nl
from nprof.nki import trace as _trace
from nprof.nki.buffers import is_hbm, is_on_chip, is_psum, is_sbuf
from nprof.nki.dtypes import NUMPY
from nprof.nki.indirect_ops import atomic_rmw, gather_flattened
from nprof.nki.isa_ext import unsupported
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor

__all__ = [
    "abs_max",
    "abs_min",
    "all",
    "all_reduce",
    "arctan",
    "atomic_rmw",
    "bfp16",
    "bitwise_xor",
    "broadcast_to",
    "ceil",
    "device_print",
    "dropout",
    "erf_dx",
    "expand_dims",
    "finfo",
    "floor",
    "fmod",
    "fp32",
    "gather_flattened",
    "gelu_apprx_sigmoid",
    "gelu_dx",
    "gemm_grid",
    "gemm_stationary_grid",
    "invert",
    "is_hbm",
    "is_on_chip",
    "is_psum",
    "is_sbuf",
    "left_shift",
    "logical_not",
    "logical_xor",
    "loop_reduce",
    "mish",
    "mod",
    "nc",
    "rand",
    "random_seed",
    "right_shift",
    "rms_norm",
    "shared_constant",
    "silu_dx",
    "spmd_dim",
    "static_cast",
    "tan",
    "trunc",
    "var",
]  # fmt: skip

floor, ceil, trunc, tan, arctan = (_nl._act(f) for f in ("floor", "ceil", "trunc", "tan", "arctan"))
mish, gelu_apprx_sigmoid = _nl._act("mish"), _nl._act("gelu_apprx_sigmoid")
silu_dx, gelu_dx, erf_dx = _nl._act("silu_dx"), _nl._act("gelu_dx"), _nl._act("erf_dx")
bitwise_xor, logical_xor = _nl._alu("bitwise_xor", "bitwise_xor"), _nl._alu("logical_xor", "logical_xor", _nl.bool_)
left_shift, right_shift = _nl._alu("left_shift", "left_shift"), _nl._alu("right_shift", "right_shift")
abs_max, abs_min = _nl._alu("abs_max", "abs_max"), _nl._alu("abs_min", "abs_min")


def mod(x: Any, y: Any, dtype: Any = None, mask: Any = None) -> Any:
    """Elementwise floored modulo (the sign of `y`), VectorE."""
    return _c.binary("mod", x, y, dtype=dtype, mask=mask)


def fmod(x: Any, y: Any, dtype: Any = None, mask: Any = None) -> Any:
    """Elementwise truncated modulo (the sign of `x`), VectorE."""
    return _c.binary("fmod", x, y, dtype=dtype, mask=mask)


mod._nki_alu, fmod._nki_alu = "mod", "fmod"  # type: ignore[attr-defined]


def invert(x: Any, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """Bitwise NOT of an integer tile: x XOR -1 (one VectorE TENSOR_SCALAR)."""
    return _c.tensor_scalar(x, "bitwise_xor", -1.0, dtype=dtype, mask=mask)


def logical_not(x: Any, *, dtype: Any = _nl.bool_, mask: Any = None) -> NkiTensor:
    """1 where x == 0 else 0 (one VectorE TENSOR_SCALAR)."""
    return _c.tensor_scalar(x, "is_equal", 0.0, dtype=dtype, mask=mask)


def all(x: Any, axis: Any, *, dtype: Any = _nl.bool_, mask: Any = None) -> NkiTensor:
    """1 where every element along the free axes `axis` is non-zero: (x != 0), then a min reduction."""
    flags = _c.tensor_scalar(x, "not_equal", 0.0, dtype="float32", mask=mask)
    return _c.reduce("min", flags, axis, dtype=dtype, mask=mask)


def var(x: Any, axis: Any, *, dtype: Any = None, mask: Any = None, keepdims: bool | None = None) -> NkiTensor:
    """Population variance over the free axes `axis`: mean((x - mean(x))^2), kept as [P, 1] (2.26, and
    `keepdims=True`), or with the reduced axes dropped (`keepdims=False`, the newer API's default)."""
    t = _c.tile(x, "var input")
    n = math.prod(t.shape[a] for a in _c._axes(axis, t.ndim))
    neg_mean = _c.reduce("add", t, axis, dtype="float32", mask=mask, keepdims=True)
    neg_mean = _c.tensor_scalar(neg_mean, "multiply", -1.0 / n, out=neg_mean)
    sq = _c.activation("square", t, bias=neg_mean, dtype="float32", mask=mask)
    total = _c.reduce("add", sq, axis, dtype="float32", mask=mask, keepdims=keepdims is not False)
    return _c.tensor_scalar(total, "multiply", 1.0 / n, dtype=dtype if dtype is not None else t.dtype)


def rms_norm(x: Any, w: Any, axis: Any, n: int, epsilon: float = 1e-06, *, dtype: Any = None,
             compute_dtype: Any = None, mask: Any = None) -> NkiTensor:  # fmt: skip
    """x / sqrt(sum(x^2 over `axis`) / n + epsilon) * w (ScalarE square with a sum, then VectorE)."""
    t = _c.tile(x, "rms_norm input")
    total = _trace.current().alloc((t.shape[0], 1), "float32", Space.SBUF)
    _c.activation("square", t, dtype="float32", mask=mask, reduce_op="add", reduce_res=total)
    inv = _c.tensor_scalar(total, "multiply", 1.0 / n, op1="add", operand1=float(epsilon), dtype="float32")
    inv = _c.activation("rsqrt", inv, dtype="float32", out=inv)
    scaled = _c.tensor_scalar(t, "multiply", inv, dtype="float32", mask=mask)
    return _c.binary("multiply", scaled, w, dtype=dtype if dtype is not None else t.dtype, mask=mask)


def broadcast_to(src: Any, *, shape: Any) -> NkiTensor:
    """`src` read as `shape` (free axes by zero strides, a [1, F] row across partitions through TensorE)."""
    return _c.tile(src, "broadcast_to source").broadcast_to(tuple(shape))


def expand_dims(data: Any, axis: Any) -> NkiTensor:
    """A view of `data` with size-1 axes inserted at `axis` (an int or a list of ints, not 0)."""
    if not isinstance(data, NkiTensor):
        raise kernel_error("expand_dims takes a tile or tensor")
    axes = sorted(int(a) for a in (axis if isinstance(axis, list | tuple) else (axis,)))
    items: list[Any] = [slice(None)] * data.ndim
    for a in axes:
        if a <= 0 or a > len(items):
            raise kernel_error(f"expand_dims axis {a} must be a free axis position 1..{len(items)}")
        items.insert(a, None)
    return data[tuple(items)]


def static_cast(input_data: Any, dtype: Any) -> Any:
    """`input_data` cast to `dtype`: a Python scalar or numpy array at trace time, a tile by a VectorE copy."""
    if isinstance(input_data, NkiTensor):
        return _c.copy(input_data, dtype=dtype)
    return np.asarray(input_data).astype(NUMPY[_c.dname(dtype)])[()]


def finfo(dtype: Any) -> Any:
    """Machine limits of a float dtype (numpy's finfo; ml_dtypes' for bfloat16 and float8)."""
    dt = NUMPY[_c.dname(dtype)]
    return ml_dtypes.finfo(dt) if dt.kind == "V" or dt.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2") \
        else np.finfo(dt)  # fmt: skip


class fp32:
    """FP32 constants: `fp32.min` is the most negative finite float32 (bit pattern 0xff7fffff)."""

    min = float(np.finfo(np.float32).min)


class bfp16:
    """BFLOAT16 constants: `bfp16.min` is negative infinity's neighbour used as -max (bit pattern 0xff80: -inf)."""

    min = float("-inf")


def shared_constant(constant: Any, dtype: Any = None) -> NkiTensor:
    """An HBM tensor holding `constant` (a numpy array), a constant of the Program."""
    arr = np.asarray(constant)
    if arr.ndim == 0:
        arr = arr.reshape(1, 1)
    builder = _trace.current()
    dt = _c.dname(dtype) if dtype is not None else _c.dname(arr.dtype)
    name = builder.unique_name("shared_constant")
    return builder.hbm_tensor(name, arr.shape, dt, kind="weight", value=arr)


def gemm_grid() -> tuple[int, int]:
    """The tile of a matmul result (and of its moving operand): (pmax, gemm_moving_fmax)."""
    return (_nl.tile_size.pmax, _nl.tile_size.gemm_moving_fmax)


def gemm_stationary_grid() -> tuple[int, int]:
    """The tile of a matmul stationary operand: (pmax, gemm_stationary_fmax)."""
    return (_nl.tile_size.pmax, _nl.tile_size.gemm_stationary_fmax)


class nc(int):
    """A launch-grid dimension distributed over `n` physical NeuronCores (`kernel[nl.nc(2), 4]`); nprof runs the
    instances in order on its one simulated core, so it counts as a dimension of size n."""


def spmd_dim(*dims: Any) -> int:
    """A launch-grid dimension built from sub-dimensions (`nl.spmd_dim(nl.nc(2), 2)`): their product."""
    return math.prod(int(d) for d in dims)


def device_print(prefix: str, x: Any, *, mask: Any = None) -> None:
    """Print `prefix` and the tile's (or HBM tensor's) values when the kernel has been simulated (one DMA of
    the values to a hidden output tensor at this point of the kernel)."""
    if not isinstance(x, NkiTensor):
        raise kernel_error(f"device_print takes a tile or tensor, got {type(x).__name__}")
    builder = _trace.current()
    view = x.masked(mask) if mask is not None else x
    if view.space is not Space.HBM and builder.is_pending(view):
        builder.flush()
    name = builder.unique_name("device_print")
    out = builder.hbm_tensor(name, view.shape or (1,), view.dtype_name, kind="output")
    builder.dma(out, view)
    prints = json.loads(builder.meta.get("device_print", "[]"))
    prints.append([name, str(prefix)])
    builder.meta["device_print"] = json.dumps(prints)


_RNG: weakref.WeakKeyDictionary[Any, np.random.Generator] = weakref.WeakKeyDictionary()
RAND_SEED = 0  # the generator's seed until nl.random_seed sets one


def kernel_rng() -> np.random.Generator:
    """The random generator of the kernel being traced (seeded by `random_seed`, else `RAND_SEED`)."""
    return _RNG.setdefault(_trace.current(), np.random.default_rng(RAND_SEED))


def random_seed(seed: Any, *, mask: Any = None) -> None:
    """Seed the generator of the following `nl.rand` calls of this kernel (a Python integer)."""
    if not _c.is_scalar(seed):
        raise kernel_error("nl.random_seed takes an integer seed here (a seed tile is not supported by nprof)")
    _RNG[_trace.current()] = np.random.default_rng(int(seed))


def rand(shape: Any, dtype: Any = _nl.float32) -> NkiTensor:
    """A tile of uniform [0, 1) values. Model: drawn at trace time from a seeded generator (`random_seed`) and
    DMA'd in as a Program constant, so the values are deterministic and the cost is one DMA (the hardware's
    generator draws other numbers of the same distribution on-chip)."""
    builder = _trace.current()
    rng = kernel_rng()
    shape = tuple(int(s) for s in (shape if isinstance(shape, list | tuple) else (shape,)))
    values = rng.random(shape, dtype=np.float32)
    src = builder.hbm_tensor(builder.unique_name("rand"), shape, _c.dname(dtype), kind="weight", value=values)
    return _nl.load(src)


class LoopReduce:
    """The value of `nl.loop_reduce`: assigned into a tile, it updates the tile in place (see `loop_reduce`)."""

    def __init__(self, x: Any, op: str, dtype: Any, mask: Any) -> None:
        self.x, self.op, self.dtype, self.mask = x, op, dtype, mask

    def assign_into(self, view: NkiTensor) -> None:
        """`view[...] = loop_reduce(x, op, ...)`: view = view <op> x (one VectorE TENSOR_TENSOR)."""
        _c.binary(self.op, view, self.x, dtype=self.dtype, mask=self.mask, out=view)


def loop_reduce(x: Any, op: Any, loop_indices: Any, *, dtype: Any = None, mask: Any = None) -> LoopReduce:
    """Reduce `x` across the iterations of a loop into the tile it is assigned to (`acc[...] =
    nl.loop_reduce(x, op=nl.add, loop_indices=[i])` is `acc[...] = acc <op> x`, the destination being op's
    other input); only item assignment into a tile is supported."""
    from nprof.nki.isa_enums import alu_name

    return LoopReduce(x, alu_name(op), dtype, mask)


def dropout(x: Any, rate: Any, *, dtype: Any = None, mask: Any = None) -> NkiTensor:
    """`x` with each element zeroed with probability `rate` (a scalar or a tile, one per partition); see
    `nprof.nki.dropout` for the model of the random draws."""
    from nprof.nki.dropout import dropout_tile

    return dropout_tile(x, rate, dtype, mask, "nl.dropout")
all_reduce = unsupported("nl.all_reduce", "x op program_axes *dtype *mask *parallel_reduce=True *asynchronous=False",
                         "use nprof.nki.collectives for collectives across workers")  # fmt: skip
