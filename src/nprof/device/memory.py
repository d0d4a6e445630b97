"""The functional state of one NeuronCore: HBM tensors, SBUF and PSUM as real numpy buffers.

Contract:
* `numpy_dtype(name)` maps an ISA dtype name to a numpy dtype (bfloat16 and
  float8 via ml_dtypes; "float8_e4m3" is the OCP E4M3FN format, max 448).
* `Memory(program, preset)` holds one flat array per HBM tensor and SBUF/PSUM as
  uint8 `[partitions, bytes]` buffers; `view(access)` returns a writable strided
  numpy view with the Access's logical shape and dtype (see `nprof.arch.isa`),
  after checking bounds; an out-of-bounds access raises `AccessError`.
* `read(access)` returns the value as float32 (int32 for integer dtypes is
  exact in float64: integer tensors are read as float64); `write(access, value)`
  converts to the Access dtype: floats round to nearest even, float -> integer
  truncates toward zero (NaN -> 0) and saturates at the integer type's range.

float -> integer rule: AWS's NKI docs state no rounding mode for a float to
integer conversion (the type-promotion section of the NKI API reference only
says the engines compute in FP32 "and cast the output back"). The rule is taken
from evidence: nki-samples' `resize_nearest_fixed_dma_kernel` (a unit test run
on NKI's simulator) divides an int32 tile by an int (result int32 by NKI's
promotion rules, computed in FP32) and needs 2224 / 38 = 58.5 -> 58, which only
truncation gives (round-to-nearest gives 59 and an out-of-bounds gather); it is
also numpy's `astype` (what NKI's simulator is built on) and torch's `.to(int)`.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from nprof.arch import isa
from nprof.arch.isa import ITEMSIZE, PACKED_MX, Access, Space
from nprof.arch.presets import Preset
from nprof.program.model import Program

_DTYPES: dict[str, np.dtype] = {name: isa.numpy_dtype(name) for name in isa.DTYPES}
_INT_DTYPES = frozenset({"int32", "int16", "int8", "uint8", "uint32"})


_VIEW_CACHE = 1 << 15  # views kept for Accesses used again (loops over the same tiles)
# Every field of an Access, read in C: equal Accesses (tracers make a fresh one per operand) share a view.
_VIEW_KEY = attrgetter(
    "space", "tensor", "dtype", "offset", "partitions", "free", "partition_start", "partition_stride"
)


class AccessError(Exception):
    """An access outside its buffer (internal; the simulator turns it into an NprofError)."""


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of an ISA dtype name."""
    return _DTYPES[name]


def is_int(name: str) -> bool:
    return name in _INT_DTYPES


def convert(value: np.ndarray, dtype: str) -> np.ndarray:
    """Convert `value` to ISA dtype `dtype` with the device's rounding rules."""
    target = _DTYPES[dtype]
    if value.dtype == target:
        return value
    if dtype in PACKED_MX:
        raise ValueError(f"values cannot be converted to packed MX data ({dtype}): quantize with nisa.quantize_mx")
    if dtype in _INT_DTYPES and value.dtype.kind == "f":
        info = np.iinfo(target)
        with np.errstate(invalid="ignore"):
            value = np.nan_to_num(np.trunc(value.astype(np.float64)), nan=0.0)  # module doc: the rule's evidence
        return np.clip(value, info.min, info.max).astype(target)
    if value.dtype.kind in "iub" and target.kind != "f" and dtype in _INT_DTYPES:
        info = np.iinfo(target)
        return np.clip(value.astype(np.int64), info.min, info.max).astype(target)
    with np.errstate(over="ignore", invalid="ignore"):
        return value.astype(target)


class Memory:
    """HBM, SBUF and PSUM of one core for one program run."""

    def __init__(self, program: Program, preset: Preset) -> None:
        self.preset = preset
        self.sbuf = np.zeros((preset.partitions, preset.sbuf_partition_bytes), np.uint8)
        self.psum = np.zeros((preset.partitions, preset.psum_partition_bytes), np.uint8)
        self.hbm: dict[str, np.ndarray] = {t.name: np.zeros(t.elements, _DTYPES[t.dtype]) for t in program.tensors}
        self._views: dict[tuple, np.ndarray] = {}  # Access fields -> view (equal Accesses share one view)

    def load(self, name: str, value: np.ndarray) -> None:
        """Set the whole HBM tensor `name` (value already of the right dtype and size)."""
        self.hbm[name][...] = value.reshape(-1)

    def view(self, acc: Access) -> np.ndarray:
        """A writable view of `acc` with its logical shape and dtype; AccessError when out of bounds."""
        key = _VIEW_KEY(acc)
        hit = self._views.get(key)
        if hit is not None:
            return hit
        v = self._make_view(acc)
        if len(self._views) >= _VIEW_CACHE:  # bounded: programs touching very many distinct regions
            self._views.clear()
        self._views[key] = v  # buffers never move, so a view stays valid
        return v

    def _make_view(self, acc: Access) -> np.ndarray:
        dt = _DTYPES[acc.dtype]
        size = ITEMSIZE[acc.dtype]
        shape = acc.shape
        if acc.space is Space.HBM:
            flat = self.hbm.get(acc.tensor)
            if flat is None:
                raise AccessError(f"unknown HBM tensor {acc.tensor!r}")
            if flat.dtype != dt:
                flat = flat.view(np.uint8).view(dt) if flat.nbytes % size == 0 else flat
            steps = [(acc.partition_stride, acc.partitions), *acc.free]
            lo, hi = _extent(acc.offset, steps)
            if lo < 0 or hi >= flat.size:
                raise AccessError(f"{acc.tensor}: elements {lo}..{hi} outside 0..{flat.size - 1}")
            strides = tuple(s * flat.itemsize for s, _ in steps)
            return np.ndarray(shape, dt, buffer=flat, offset=acc.offset * flat.itemsize, strides=strides)
        buf = self.sbuf if acc.space is Space.SBUF else self.psum
        rows, row_bytes = buf.shape
        if acc.partition_start < 0 or acc.partition_start + acc.partitions > rows:
            raise AccessError(
                f"{acc.space.value} partitions {acc.partition_start}..{acc.partition_start + acc.partitions - 1} "
                f"outside 0..{rows - 1}"
            )
        lo, hi = _extent(0, acc.free)
        lo_b, hi_b = acc.offset + lo * size, acc.offset + hi * size + size
        if lo_b < 0 or hi_b > row_bytes:
            raise AccessError(f"{acc.space.value} bytes {lo_b}..{hi_b - 1} outside 0..{row_bytes - 1} per partition")
        strides = (row_bytes, *(s * size for s, _ in acc.free))
        return np.ndarray(shape, dt, buffer=buf, offset=acc.partition_start * row_bytes + acc.offset, strides=strides)

    def read(self, acc: Access) -> np.ndarray:
        """The value of `acc` as a new float32 array (float64 for integer dtypes)."""
        if acc.dtype in PACKED_MX:  # refused at trace time too (nprof.nki.compute.packed_error)
            raise ValueError(f"packed MX data ({acc.dtype}) has no element values: only MX instructions read it")
        v = self.view(acc)
        return v.astype(np.float64 if acc.dtype in _INT_DTYPES else np.float32)

    def write(self, acc: Access, value: np.ndarray | float) -> None:
        """Store `value` (broadcast to the Access shape) converted to the Access dtype."""
        v = self.view(acc)
        arr = np.asarray(value)
        if arr.shape != v.shape:
            arr = arr.reshape(v.shape) if arr.size == v.size else np.broadcast_to(arr, v.shape)
        v[...] = convert(arr, acc.dtype)


def _extent(offset: int, steps: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> tuple[int, int]:
    """Lowest and highest element index an (offset, [(stride, size)...]) pattern touches."""
    lo = hi = offset
    for stride, size in steps:
        if size <= 0:
            continue
        span = stride * (size - 1)
        if span >= 0:
            hi += span
        else:
            lo += span
    return lo, hi
