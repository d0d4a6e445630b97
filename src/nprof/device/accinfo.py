"""Per-Access facts the timing and recording passes need, computed once per distinct Access.

Contract: `AccessCache.get(a)` returns an `AccInfo` tuple (shape signature,
memory index 0/1/2 for HBM/SBUF/PSUM, bytes, display text, partitions, free
elements). Lookups go by value through a C-level key (`VALUE_KEY`), so equal
Accesses (loops over the same tile) pay the formatting once. The signature
`(space, dtype, partitions, free, partition_stride)`, interned to a small int,
is everything the cost model reads, so instruction costs can be memoised on it.
"""

from __future__ import annotations

from operator import attrgetter
from typing import NamedTuple

from nprof.arch.isa import ITEMSIZE, Access, Space

SPACE_INDEX = {Space.HBM: 0, Space.SBUF: 1, Space.PSUM: 2}
SHORT_DTYPE = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3": "fp8e4",
    "float8_e5m2": "fp8e5",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "uint32": "u32",
}


class AccInfo(NamedTuple):
    sig: int  # interned signature (space, dtype, partitions, free, partition_stride): all the cost model reads
    mem: int  # 0 HBM, 1 SBUF, 2 PSUM
    nbytes: int
    text: str
    partitions: int
    free_elements: int


def _dims_text(offset: int, dims: list[tuple[int, int]]) -> str:
    """'a:b' per dim; a dim whose stride is not the contiguous one shows it as 'a:b:s'."""
    natural = []
    run = 1
    for _stride, size in reversed(dims):
        natural.append(run)
        run *= size
    natural.reverse()
    parts = []
    rest = offset
    for (stride, size), nat in zip(dims, natural, strict=True):
        start = rest // stride if stride > 0 else 0
        rest -= start * stride
        step = "" if stride == nat else f":{stride}"
        parts.append(f"{start}:{start + size}{step}")
    text = ", ".join(parts)
    return f"{text} +{rest}" if rest else text


def access_text(acc: Access) -> str:
    """Readable text of one Access, e.g. `sbuf x[0:128, 0:512] bf16`."""
    if acc.space is Space.HBM:
        dims = _dims_text(acc.offset, [(acc.partition_stride, acc.partitions), *acc.free])
    else:
        size = ITEMSIZE[acc.dtype]
        free = _dims_text(acc.offset // size, list(acc.free)) if acc.free else ""
        extra = f" +{acc.offset % size}B" if acc.offset % size else ""
        p0 = acc.partition_start
        dims = f"{p0}:{p0 + acc.partitions}" + (f", {free}" if free else "") + extra
    return f"{acc.space.value} {acc.tensor}[{dims}] {SHORT_DTYPE.get(acc.dtype, acc.dtype)}"


def _no_text(acc: Access) -> str:
    return ""


# Every field of an Access, fetched in C (Space is a StrEnum: it hashes and compares as its str value, in C).
VALUE_KEY = attrgetter(
    "space", "tensor", "dtype", "offset", "partitions", "free", "partition_start", "partition_stride"
)


class AccessCache:
    """Value-keyed cache of `AccInfo`: `by_value.get(VALUE_KEY(a))` is the fast path, `get(a)` fills misses."""

    def __init__(self, text: bool = True) -> None:
        self.by_value: dict[tuple, AccInfo] = {}
        self._sigs: dict[tuple, int] = {}
        self._text = access_text if text else _no_text  # off: `AccInfo.text` is "" (the cost model never reads it)

    def get(self, a: Access) -> AccInfo:
        key = VALUE_KEY(a)
        hit = self.by_value.get(key)
        if hit is None:
            n = 1
            for _, size in a.free:
                n *= size
            sig = (a.space, a.dtype, a.partitions, a.free, a.partition_stride)
            hit = AccInfo(
                self._sigs.setdefault(sig, len(self._sigs)),
                SPACE_INDEX[a.space],
                a.partitions * n * ITEMSIZE[a.dtype],
                self._text(a),
                a.partitions,
                n,
            )
            self.by_value[key] = hit
        return hit
