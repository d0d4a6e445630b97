"""Dependency tracking: which earlier instructions an instruction must wait for.

`DepTracker.record(index, reads, writes)` returns the sorted indices of earlier
instructions with a read-after-write, write-after-read or write-after-write
conflict on an overlapping region. Regions are exact enough that independent
tiles never depend on each other:

* SBUF/PSUM: partition range x byte range (span of the strided view within a
  partition) of the same memory, whatever allocation name it had (so reusing a
  freed region orders correctly after its previous users);
* HBM: a box in the tensor's logical coordinates when the access maps onto its
  axes (row/column tiles of a matrix), else the flat element span.

Each memory keeps entries: a region, its last writer and its readers since. A read
waits for the writers of the entries it overlaps and joins the readers of those it
contains (or makes an entry of its own region when none has exactly that region); a
write waits for the writers and readers of the entries it overlaps and replaces the
ones it covers (an entry without a box is covered only by a box-less write's span).
Reads of a memory nothing wrote yet (inputs, weights) are kept aside and entered
when it is first written. Requests are increasing instruction indices.

The entries live in numpy arrays walked by compiled code (`nprof.nki.depcore`),
bucketed by byte offset on chip and by row in HBM; tests hold it to a plain flat
reference on random access sequences (tests/nki/test_deps_reference.py).
"""

from __future__ import annotations

import math

import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Space
from nprof.compiled import run_detached
from nprof.errors import NprofError
from nprof.nki import depcore as core
from nprof.nki import depregions as lay

ONCHIP_MEMORY = {Space.SBUF: 0, Space.PSUM: 1}  # memory index of the on-chip memories (HBM tensors follow)
_LOADED: list[bool] = []  # the compiled core has run in this process


class DepTracker:
    """Conflict detection over all memories of one Program (see module doc)."""

    def __init__(
        self, hbm_shapes: dict[str, tuple[int, ...]] | None = None, capacity: int = 1024, *, warm: bool = True
    ) -> None:
        self._shapes = hbm_shapes if hbm_shapes is not None else {}
        self._hbm: dict[str, int] = {}  # HBM tensor -> memory index
        self._undeclared: dict[str, int] = {}  # HBM tensors accessed before their shape was known
        self._e = np.zeros((capacity, lay.EW), np.int64)
        self._p = np.zeros((4 * capacity, lay.PW), np.int64)
        self._h = np.zeros((0, lay.HW), np.int64)
        self._m = np.zeros(lay.MW, np.int64)
        self._m[[lay.E_FREE, lay.P_FREE]] = -1
        self._t = np.full(64, -1, np.int64)  # deferred regions by hash (depcore._defer)
        self._io = np.zeros(256, np.int64)
        self._count = 0  # instruction indices recorded: 0 .. _count - 1
        self._memory(0, ())
        self._memory(1, ())
        self._h[[0, 1], lay.GRAN] = lay.GRANULE
        if warm and not _LOADED:  # compile (or load) the core now, on a thread of its own (see `_warm_core`)
            run_detached(_warm_core)

    def coarsen(self, factor: int) -> None:
        """Bucket SBUF and PSUM `factor` times coarser (before anything is recorded): a trace whose on-chip memory
        is unbounded (a lifetime probe, `ProgramBuilder.plan_lifetimes`) places tiles far past the real capacity,
        where fixed buckets would put every region in the one list of regions past the last bucket, and each
        access would scan all of them. Bucketing only narrows the entries examined: the dependencies are the
        same."""
        if self._count:
            raise RuntimeError("DepTracker.coarsen: regions were recorded already")
        self._h[[0, 1], lay.GRAN] = [g * factor for g in lay.GRANULE]

    @property
    def scanned(self) -> int:
        """Entries examined so far (plus one per lookup): the tracker's work, for scaling tests."""
        return int(self._m[lay.SCANNED])

    def _memory(self, kind: int, shape: tuple[int, ...]) -> int:
        """Add a memory (kind 0 SBUF, 1 PSUM, 2 an HBM tensor of `shape`, () when unknown); its index."""
        sid = self._h.shape[0]
        row = np.full((1, lay.HW), -1, np.int64)
        row[0, lay.WRITTEN], row[0, lay.DCOST], row[0, lay.NLIVE], row[0, lay.KIND] = 0, 0, 0, kind
        self._h = np.concatenate([self._h, row])
        self._layout(sid, shape)
        return sid

    def _layout(self, sid: int, shape: tuple[int, ...]) -> None:
        """Record an HBM tensor's layout: rank, elements per row, rows per bucket, shape, row-major strides."""
        if len(shape) > lay.MAXR:
            raise NprofError(f"HBM tensors have at most {lay.MAXR} axes here; got shape {shape}: reshape it")
        h = self._h[sid]
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        h[lay.HRANK] = len(shape)
        h[lay.ROW] = math.prod(shape[1:]) if len(shape) > 1 else 1
        h[lay.GRAN] = max(1, (shape[0] if shape else 1) // 32)
        h[lay.SHAPE:lay.SHAPE + len(shape)] = shape
        h[lay.STRIDE:lay.STRIDE + len(shape)] = strides

    def _hbm_memory(self, tensor: str) -> int:
        """The memory index of HBM tensor `tensor` (its layout updated once its shape is declared)."""
        sid = self._hbm.get(tensor)
        if sid is None:
            shape = self._shapes.get(tensor) or ()
            sid = self._hbm[tensor] = self._memory(lay.HBM, shape)
            if not shape:
                self._undeclared[tensor] = sid
        elif self._undeclared and tensor in self._undeclared and self._shapes.get(tensor):
            self._layout(self._undeclared.pop(tensor), self._shapes[tensor])
        return sid

    def _encode(self, accs: tuple[Access, ...], out: list[int]) -> None:
        """Append the accesses in depcore's IO encoding to `out`."""
        for acc in accs:
            sid = ONCHIP_MEMORY.get(acc.space)
            if sid is None:
                sid = self._hbm_memory(acc.tensor)
            free = acc.free
            out += (sid, ITEMSIZE[acc.dtype], acc.offset, acc.partitions, acc.partition_start, acc.partition_stride,
                    len(free))  # fmt: skip
            for pair in free:
                out += pair

    def _load(self, ints: list[int], room: int = 0) -> np.ndarray:
        """The IO array holding `ints` first, with `room` more elements after them."""
        n = len(ints)
        if n + room > self._io.shape[0]:
            self._io = np.zeros(2 * (n + room), np.int64)
        self._io[:n] = ints
        return self._io

    def record(self, index: int, reads: tuple[Access, ...], writes: tuple[Access, ...]) -> tuple[int, ...]:
        """Register instruction `index` reading `reads` and writing `writes`; return its dependencies."""
        ints: list[int] = []
        self._encode(reads, ints)
        self._encode(writes, ints)
        self._count = max(self._count, index + 1)  # (dependencies are distinct indices recorded before)
        io = self._load(ints, self._count)
        n = core.record(self._e, self._p, self._h, self._m, self._t, io, index, len(reads), len(writes))
        while n < 0:  # no room: nothing was recorded
            self._grow()
            n = core.record(self._e, self._p, self._h, self._m, self._t, io, index, len(reads), len(writes))
        start = len(ints)
        return tuple(io[start : start + n].tolist()) if n else ()

    def _grow(self) -> None:
        """Make room for what `core.record` asked for (M[NEED_E] rows and deferred regions, M[NEED_P] nodes),
        doubling."""
        m = self._m
        if 2 * (m[lay.T_USED] + m[lay.NEED_E]) > self._t.shape[0]:  # (T_USED counts removed slots too)
            size = self._t.shape[0]
            while 2 * (int((self._t >= 0).sum()) + m[lay.NEED_E]) > size:
                size *= 2
            self._t = core.rehash(self._e, self._t, size)
            m[lay.T_USED] = int((self._t >= 0).sum())
        rows, nodes = self._e.shape[0], self._p.shape[0]
        while rows - m[lay.E_USED] + m[lay.E_NFREE] < m[lay.NEED_E]:
            rows *= 2
        while nodes - m[lay.P_USED] + m[lay.P_NFREE] < m[lay.NEED_P]:
            nodes *= 2
        if rows > self._e.shape[0]:
            self._e = np.concatenate([self._e, np.zeros((rows - self._e.shape[0], lay.EW), np.int64)])
        if nodes > self._p.shape[0]:
            self._p = np.concatenate([self._p, np.zeros((nodes - self._p.shape[0], lay.PW), np.int64)])

    def wrote(self, space: str) -> bool:
        """Has any write to memory `space` ("sbuf", "psum", or "hbm:" + tensor name) been recorded?"""
        if space in ("sbuf", "psum"):
            sid: int | None = 0 if space == "sbuf" else 1
        else:
            sid = self._hbm.get(space[4:]) if space.startswith("hbm:") else None
        return sid is not None and bool(self._h[sid, lay.WRITTEN])

    def last_writer(self, acc: Access) -> int | None:
        """The latest instruction that wrote any part of `acc` (None if none)."""
        ints: list[int] = []
        self._encode((acc,), ints)
        writer = core.last_writer(self._e, self._p, self._h, self._m, self._load(ints))
        return None if writer < 0 else writer


def _warm_core() -> None:
    """Run the compiled functions once on a throwaway tracker. Their first call compiles them (after an install
    or an edit) and numba then keeps the tracebacks of the typing failures it met, whose frames reach every frame
    of the calling stack: made during a trace, that kept a kernel's tile (a local of nprof's operator frames)
    alive to the end, and its memory was never reused (the tiled matmul's PSUM placement changed from the first
    tile on). So the tracker runs this on a thread of its own (`nprof.compiled.run_detached`), before any tile
    exists (tests/nki/test_trace_determinism.py)."""
    t = DepTracker(capacity=16, warm=False)
    core.record(t._e, t._p, t._h, t._m, t._t, t._io, 0, 0, 0)
    core.last_writer(t._e, t._p, t._h, t._m, np.array([0, 4, 0, 1, 0, 1, 0], np.int64))
    core.rehash(t._e, t._t, t._t.shape[0])
    from nprof.nki import alloc_batch, depbatch  # (the compiled code of nprof.nki.stamp too)

    empty = np.zeros((0, 2), np.int64)
    alloc_batch.run(np.zeros(12, np.int64), empty[:, 0].copy(), empty[:, 0].copy(), empty, np.zeros((0, 5),
                    np.int64), 0, 0)  # fmt: skip

    state = np.zeros(depbatch.KEY, np.int64)
    none = np.zeros((0, 4), np.int64)
    depbatch.run(t._e, t._p, t._h, t._m, t._t, np.zeros((0, 0), np.int64), t._io, state, none,
                 np.zeros(1, np.int64), np.zeros(1, np.int64), 0)  # fmt: skip
    _LOADED.append(True)
