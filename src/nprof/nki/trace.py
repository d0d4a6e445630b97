"""Tracing kernels into Programs: the `ProgramBuilder`.

Contract (used by `nki.jit` and by the torch compiler):

* `ProgramBuilder(name, preset="trn1")`; `.hbm_tensor(name, shape, dtype,
  kind="input"|"output"|"weight"|"internal", value=None)` declares an HBM
  tensor and returns a handle usable exactly like a kernel argument; `value`
  becomes the Program constant (weights).
* `with builder.scope(layer=, hlo_name=, source=):` instructions recorded
  inside carry these; `source` overrides the traced `file:line`.
* `builder.call(kernel_fn, *args, **kwargs)` runs a kernel (any function using
  `nl`/`nisa`) and records its instructions; on-chip tiles it allocates are
  freed when it returns. HBM tensors it allocates with `nl.ndarray(...,
  buffer=nl.shared_hbm)` are `internal` unless returned from the top-level call
  of `nki.jit` or marked with `builder.mark_output`.
* `builder.build()` returns the validated Program (SBUF/PSUM high-water marks
  recorded). Capacity overflows raise KernelError at the user's line.
* Also: `call_spmd(kernel_fn, grid, *args)` (NKI's `kernel[grid](...)`),
  `dma(dst, src, spill=True|reload=True)` (one DMA between views, flags as
  DMA attrs), `mark_output(t)`, `unique_name(hint)`, `instructions`,
  `tensors()`, and `with builder.active():` (make it the target of `nl` calls
  without a call scope).

On-chip allocation lives in `nprof.nki.tiles` (the `TileAllocation` mixin).
On-chip tiles are also freed as soon as no Python reference to them remains
(allocation is next-fit, so freed regions are reused only after the rest of
the memory has been cycled through — multi-buffering for free).

Each instruction gets `deps` from `DepTracker`, `source` = the user's
`file:line`, and DMA instructions a queue (round-robin over the preset's
queues). `nl`/`nisa` calls made while no builder is active raise KernelError.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import weakref
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from nprof.arch.isa import Access, Engine, Instruction, Opcode, attrs
from nprof.arch.presets import get_preset
from nprof.errors import KernelError, NprofError
from nprof.nki import loop_returns, replay_guard
from nprof.nki.alloc import Allocator
from nprof.nki.deps import DepTracker
from nprof.nki.direct import DirectState
from nprof.nki.dtype_views import original
from nprof.nki.dtypes import dtype_name
from nprof.nki.pending import PendingOps
from nprof.nki.scopes import LoopScopes, old_generation_paused
from nprof.nki.source import kernel_error, user_location
from nprof.nki.tensor import HbmBase, NkiTensor, OnChip
from nprof.nki.tiles import TileAllocation
from nprof.program.lazy import Instructions
from nprof.program.model import Program, TensorDecl

_ACTIVE: list[ProgramBuilder] = []
_DMA, _TRANSPOSE = Opcode.DMA_DIRECT2D, Opcode.TRANSPOSE  # (module constants: enum lookups are slow per instruction)


def current() -> ProgramBuilder:
    """The builder recording the running kernel; KernelError when called outside one."""
    if not _ACTIVE:
        raise kernel_error(
            "NKI language calls must run inside a traced kernel (decorate it with @nki.jit or call "
            "nki.simulate_kernel / ProgramBuilder.call)"
        )
    return _ACTIVE[-1]


class ProgramBuilder(TileAllocation, PendingOps, LoopScopes):
    """Records instructions of kernels into one Program (see module doc)."""

    def __init__(self, name: str, preset: str = "trn1") -> None:
        self.name = name
        self.preset_name = preset
        try:
            self.preset = get_preset(preset)
        except (KeyError, NprofError) as err:
            raise NprofError(f"unknown device preset {preset!r}: {err}") from None
        p = self.preset
        self._tensors: dict[str, HbmBase] = {}
        self._constants: dict[str, np.ndarray] = {}
        self._instructions = Instructions()  # objects, and columnar chunks of stamped loops (nprof.nki.stamp)
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._deps = DepTracker(self._shapes)
        self._sbuf = Allocator(p.sbuf_partition_bytes)
        self._psum = Allocator(p.psum_partition_bytes, bank=p.psum_bank_bytes)
        self._scopes: list[tuple[str | None, str | None, str | None]] = []
        self._dma_sites: dict[str | None, int] = {}  # DMA statement (source line) -> its queue
        self._pending = None  # typed by PendingOps
        self._stationary: tuple[Access, int] | None = None  # the loaded weights and their LDWEIGHTS
        self._calls: list[list[weakref.ref[OnChip]]] = []
        self._rec: Any = None  # the loop iteration being logged for replay (nprof.nki.replay)
        self.direct = DirectState(self)  # tiles placed by nki.compiler direct allocation
        self.plan_lifetimes()
        self._counter = 0
        self.cc_next = 0  # the CC-core of the next collective (round-robin, nprof.nki.collectives)
        self.meta: dict[str, str] = {}
        self.allocations: list[list] = []  # [space, name, byte offset, bytes per partition, partitions, source]
        self.grid: tuple[int, ...] = ()  # SPMD launch grid of the running call (empty: not SPMD)
        self.program_id: tuple[int, ...] = ()  # this instance's index in the grid
        self._shared: list[NkiTensor] = []  # shared_hbm tensors of the first SPMD instance
        self._shared_next: int | None = None  # position in _shared while replaying later instances

    # -- HBM tensors --------------------------------------------------------------------------
    def hbm_tensor(
        self,
        name: str,
        shape: tuple[int, ...] | list[int],
        dtype: Any,
        kind: str = "input",
        value: np.ndarray | None = None,
    ) -> NkiTensor:
        if name in self._tensors:
            raise NprofError(f"program {self.name!r} already has a tensor named {name!r}")
        if kind not in ("input", "output", "weight", "internal"):
            raise NprofError(f"tensor kind must be input, output, weight or internal, not {kind!r}")
        try:
            dname = dtype_name(dtype)
        except ValueError as err:
            raise kernel_error(str(err)) from None
        shape = tuple(int(s) for s in shape)
        if any(s <= 0 for s in shape):
            raise kernel_error(f"tensor {name!r} has an empty or negative dimension: {shape}")
        base = HbmBase(name, shape, dname, kind, self)
        self._tensors[name] = base
        self._shapes[name] = shape
        if value is not None:
            arr = np.asarray(value)
            if arr.shape != shape:
                raise NprofError(f"value of tensor {name!r} has shape {arr.shape}, declared {shape}")
            from nprof.nki.dtypes import NUMPY

            self._constants[name] = np.ascontiguousarray(arr.astype(NUMPY[dname], copy=False))
        return NkiTensor.root(base)

    def unique_name(self, hint: str) -> str:
        if self._rec is not None:
            self._rec.fail("a name made in the loop body")
        if hint and hint not in self._tensors:
            return hint
        self._counter += 1
        base = hint or "t"
        name = f"{base}_{self._counter}"
        while name in self._tensors:
            self._counter += 1
            name = f"{base}_{self._counter}"
        return name

    def mark_output(self, tensor: NkiTensor) -> None:
        """Make the HBM tensor behind `tensor` a Program output."""
        base = tensor.base
        if not isinstance(base, HbmBase):
            raise kernel_error("only HBM tensors (buffer=nl.shared_hbm) can be kernel outputs")
        if base.kind == "internal":
            base.kind = "output"

    # -- scopes and calls ---------------------------------------------------------------------
    @contextlib.contextmanager
    def scope(self, layer: str | None = None, hlo_name: str | None = None, source: str | None = None) -> Iterator[None]:
        outer = self._scopes[-1] if self._scopes else (None, None, None)
        self._scopes.append((layer or outer[0], hlo_name or outer[1], source or outer[2]))
        try:
            yield
        finally:
            self._scopes.pop()

    @contextlib.contextmanager
    def active(self) -> Iterator[ProgramBuilder]:
        """Make this the builder that `nl`/`nisa` calls record into (without a call scope)."""
        _ACTIVE.append(self)
        try:
            yield self
        finally:
            _ACTIVE.pop()

    def call(self, kernel_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Trace one call of `kernel_fn`. The on-chip tiles it allocated are freed when it returns, except
        the ones it returns to an enclosing call (a nested `nki.jit` helper): those live on in the caller."""
        fn = loop_returns.rewrite(getattr(kernel_fn, "__wrapped_kernel__", kernel_fn))
        self._calls.append([])
        _ACTIVE.append(self)
        result = None
        try:
            with old_generation_paused():
                result = fn(*args, **kwargs)
            self.check_loops_completed()
            self.flush()
        finally:
            _ACTIVE.pop()
            if len(self._calls) == 1 and replay_guard.LOGGING:  # (the outermost call ended: a loop left by an
                replay_guard.drop_recorders(self)  # exception may not have detached its replay plan yet)
            returned = _returned_tiles(result) if self._calls[:-1] else set()
            for ref in self._calls.pop():
                tile = ref()
                if tile is not None and id(tile) in returned:
                    self._calls[-1].append(ref)  # handed to the caller: freed when the caller returns
                elif tile is not None:
                    self._release(tile)
        return result

    def call_spmd(self, kernel_fn: Callable[..., Any], grid: tuple[int, ...], *args: Any, **kwargs: Any) -> Any:
        """Run `kernel_fn` once per point of `grid` (row-major), as NKI's `kernel[grid](...)` launches it.

        `nl.program_id(axis)` / `nl.num_programs(axis)` report the instance; `nl.shared_hbm` tensors allocated
        by the first instance are shared by all (the k-th allocation of every instance is the same tensor).
        """
        if not grid or any(int(g) < 1 for g in grid):
            raise kernel_error(
                f"SPMD grid must be positive integers, got {grid}: a zero-size grid launches no instance and "
                "writes no output; launch kernel[1] (or call the kernel without a grid) for one instance"
            )
        outer = (self.grid, self.program_id, self._shared, self._shared_next)
        self.grid, self._shared, result = tuple(int(g) for g in grid), [], None
        try:
            for n, pid in enumerate(itertools.product(*(range(g) for g in self.grid))):
                self.program_id, self._shared_next = pid, (None if n == 0 else 0)
                result = self.call(kernel_fn, *args, **kwargs)
        finally:
            self.grid, self.program_id, self._shared, self._shared_next = outer
        return result

    def shared_tensor(self, hint: str, shape: tuple[int, ...], dtype: str) -> NkiTensor:
        """A new internal HBM tensor, or (in later SPMD instances) the first instance's matching one."""
        if self._shared_next is not None:
            if self._shared_next >= len(self._shared):
                raise kernel_error(
                    "SPMD instances allocate different shared_hbm tensors; allocate them unconditionally"
                )
            t = self._shared[self._shared_next]
            self._shared_next += 1
            if t.shape != shape or t.dtype_name != dtype:
                raise kernel_error(f"SPMD instances disagree on a shared_hbm tensor: {t.shape} vs {shape}")
            return t
        t = self.hbm_tensor(self.unique_name(hint), shape, dtype, kind="internal")
        if self.grid:
            self._shared.append(t)
        return t

    # -- emission -----------------------------------------------------------------------------
    def source(self) -> str | None:
        """The `file:line` instructions recorded now carry: the scope's, else the kernel line running."""
        if self._scopes and self._scopes[-1][2]:
            return self._scopes[-1][2]
        return user_location(skip=1)  # (this method's caller is nprof's: ProgramBuilder methods)

    def emit(
        self,
        engine: Engine,
        opcode: Opcode,
        outs: tuple[Access, ...] = (),
        ins: tuple[Access, ...] = (),
        attrs_: tuple[tuple[str, Any], ...] = (),
        *,
        source: str | None = None,
        extra_reads: tuple[Access, ...] = (),
        extra_writes: tuple[Access, ...] = (),
    ) -> int:
        """Append one instruction (committing any pending MATMUL first); returns its index. `extra_reads` /
        `extra_writes` are regions it may touch beyond its operands (runtime addresses), for dependencies only."""
        if self._pending is not None:
            self.flush()
        return self._append(engine, opcode, outs, ins, attrs_, source or self.source(), extra_reads, extra_writes)

    def _append(
        self,
        engine: Engine,
        opcode: Opcode,
        outs: tuple[Access, ...],
        ins: tuple[Access, ...],
        attrs_: tuple[tuple[str, Any], ...],
        source: str | None,
        extra_reads: tuple[Access, ...] = (),
        extra_writes: tuple[Access, ...] = (),
    ) -> int:
        index = len(self._instructions)
        if self._rec is not None:
            self._rec.append(engine, opcode, outs, ins, attrs_, source, bool(extra_reads or extra_writes))
        if extra_reads or extra_writes:
            reads, writes = ins + extra_reads, outs + extra_writes
        else:
            reads, writes = ins, outs
        if self.direct.tiles:  # lifetime conflicts between directly allocated tiles (nprof.nki.direct)
            self.direct.check(index, writes, reads, source)
        deps = self._deps.record(index, reads, writes)
        queue = -1
        if opcode is _DMA:  # one queue per DMA statement (nprof.arch.cost: DMA queues)
            queue = self._dma_sites.setdefault(source, len(self._dma_sites)) % self.preset.dma_queues
        layer, hlo = (self._scopes[-1][0], self._scopes[-1][1]) if self._scopes else (None, None)
        self._instructions.append(Instruction(engine, opcode, outs, ins, attrs_, deps, queue, source, layer, hlo))
        if opcode is _TRANSPOSE:
            self._stationary = None  # the transpose goes through the array and displaces loaded weights
        elif opcode is Opcode.LDWEIGHTS:  # (as `_emit_matmul` notes it; also for one replayed from a log, whose
            # matmul decisions were logged as instructions: nprof.nki.replay; MX weights are not reusable)
            self._stationary = (ins[0], index) if len(ins) == 1 else None
        if self._dying:
            self.release_dead()
        return index

    def dma(self, dst: NkiTensor, src: NkiTensor, **flags: Any) -> int | None:
        """One DMA_DIRECT2D from `src` to `dst` (views of equal element count)."""
        if dst.empty or src.empty:
            return None
        out, inp = dst.access(), src.access()
        if out.elements != inp.elements:
            raise kernel_error(f"DMA shapes differ: destination {dst.shape} vs source {src.shape}")
        return self.emit(Engine.DMA, Opcode.DMA_DIRECT2D, (out,), (inp,), attrs(**flags))

    def hbm_written(self, name: str) -> bool:
        """Has any instruction recorded so far written (part of) HBM tensor `name`?"""
        return self._deps.wrote("hbm:" + name)

    # -- result -------------------------------------------------------------------------------
    @property
    def instructions(self) -> tuple[Instruction, ...]:
        return tuple(self._instructions)

    def tensors(self) -> Mapping[str, HbmBase]:
        """The HBM tensors declared so far, by name (a read-only live view: O(1), called per DMA)."""
        return MappingProxyType(self._tensors)

    def build(self) -> Program:
        self.flush()
        decls = tuple(TensorDecl(b.name, b.shape, b.dtype, b.kind) for b in self._tensors.values())  # type: ignore[arg-type]
        program = Program(
            name=self.name,
            preset=self.preset_name,
            tensors=decls,
            instructions=(
                self._instructions.frozen() if not self._instructions.materialized else tuple(self._instructions)
            ),  # (made into objects only if someone reads them)
            constants=dict(self._constants),
            sbuf_bytes=self._sbuf.high_water,
            psum_bytes=self._psum.high_water,
            meta={
                **self.meta,
                **({"allocations": json.dumps(self.allocations, separators=(",", ":"))} if self.allocations else {}),
            },
        )
        try:
            program.validate()
        except KernelError:
            raise
        except NprofError as err:
            raise KernelError(str(err)) from None
        return program


def _returned_tiles(result: Any) -> set[int]:
    """ids of the on-chip tile bases in a call's result (a tile, or tuples/lists/dicts of them)."""
    found: set[int] = set()
    stack = [result]
    while stack:
        item = stack.pop()
        if isinstance(item, NkiTensor):
            if isinstance(item.base, OnChip):
                found.add(id(original(item.base)))  # a dtype view (nprof.nki.dtype_views) keeps its tile
        elif isinstance(item, (tuple, list)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return found
