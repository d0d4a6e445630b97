"""The compiler's program builder: NKI tracing plus what a compiled graph needs on top.

Contract: `Emitter(name, preset)` wraps `nprof.nki.trace.ProgramBuilder`. The lowering declares HBM tensors
(`hbm_tensor`, visible in `tensors` as `TensorDecl`s), opens a `scope(layer, hlo_name, source)` per graph
node and runs the node's kernel — a function written in the NKI language (`nprof.nki.language` /
`nprof.nki.isa`) — with `call(kernel, *args)`: the builder records its instructions with dependencies,
SBUF/PSUM allocation and DMA queues, and every instruction carries the scope's layer, hlo_name and the user's
source line. `build(meta)` returns the validated Program, its dependency lists reduced to the direct waits
before the reordering passes (`nprof.compiler.depreduce`: the same timing and order, ~16x fewer dependencies
on resnet18), with every DMA that saves an intermediate (an "internal" HBM tensor) marked ``spill`` and every
DMA reading one back marked ``reload`` (before the list scheduler: neither the cost model nor the device
timing reads the marks, so the order it keeps is the one it keeps unmarked; the kept program carries its
instruction columns, `nprof.compiler.listsched`), and the small inputs packed into one HBM tensor
(`nprof.compiler.packing`: planned when the first kernel runs, after the inputs are declared).
`_emit(engine, opcode, outs, ins, attrs, queue)` appends a raw ISA instruction (used for CC-core collectives).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Scalar, Space
from nprof.compiler import packing
from nprof.compiler.blockstage import blocks_program, finish_blocks
from nprof.compiler.deadstores import dead_stores
from nprof.compiler.depreduce import reduced_program
from nprof.compiler.dmamerge import merge_dmas
from nprof.compiler.fusion import FusingBuilder
from nprof.compiler.listsched import list_schedule
from nprof.compiler.packing import (
    COLUMNS_NAME,
    INTS_NAME,
    PMAX,
    finish_stage,
    packed_program,
    plan_pack,
    staged_program,
)
from nprof.compiler.prefetch import hoist_loads, merge_front_loads, search_loads
from nprof.compiler.regather_check import finish_check
from nprof.compiler.rowpack import ROWS_NAME, plan_rows, rows_program
from nprof.compiler.tailstage import stage_tail
from nprof.device.columns import attach_columns, attached_columns, instruction_columns
from nprof.program.model import Program, TensorDecl, TensorKind


class Emitter:
    """One Program under construction (see module doc)."""

    def __init__(self, name: str, preset: str = "trn1") -> None:
        self.name = name
        self.builder = FusingBuilder(name, preset)
        self.preset = self.builder.preset
        self.tensors: dict[str, TensorDecl] = {}
        self.renames: dict[str, str] = {}  # promoted intermediates -> their output names (`promote`)
        self._pack_planned = False
        self.marking_nonfinite = False  # tensors declared now may hold +-inf/NaN (`nprof.compiler.finite`)
        self.taint: frozenset[str] = frozenset()  # graph inputs whose inf reaches the tensors declared now

    def hbm_tensor(
        self, name: str, shape: Sequence[int], dtype: str, kind: TensorKind, value: np.ndarray | None = None
    ) -> TensorDecl:
        decl = TensorDecl(name, tuple(int(s) for s in shape), dtype, kind)
        self.builder.hbm_tensor(name, decl.shape, dtype, kind, value)
        self.tensors[name] = decl
        if self.marking_nonfinite:
            self.builder.nonfinite.add(name)
        if self.taint:
            self.builder.input_taint[name] = self.taint
        return decl

    def promote(self, name: str, as_name: str) -> None:
        """Make the internal HBM tensor `name` the program output `as_name` (a graph output that is all of it):
        `build` renames it, the lowering may go on naming it `name`."""
        decl = dataclasses.replace(self.tensors[name], kind="output")
        self.builder.tensors()[name].kind = "output"
        self.tensors[name] = decl
        self.tensors[as_name] = dataclasses.replace(decl, name=as_name)
        self.renames[name] = as_name

    @contextmanager
    def scope(self, layer: str | None, hlo_name: str | None, source: str | None) -> Iterator[None]:
        with self.builder.scope(layer=layer, hlo_name=hlo_name, source=source):
            yield

    def call(self, kernel: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._pack_planned:  # every graph input is declared before the first kernel runs
            self._pack_planned = True
            self._plan_pack()
        return self.builder.call(kernel, *args, **kwargs)

    def _plan_pack(self) -> None:
        """Pack the small inputs declared so far into one HBM tensor (`nprof.compiler.packing`; with fusion
        only: the group tiles live in its cache)."""
        pack = plan_pack(list(self.tensors.values())) if self.builder.fusing else None
        if pack is not None:
            if pack.members:
                self.builder.hbm_tensor(pack.name, (pack.total,), "float32", "input", None)
                self.builder.hbm_tensor(COLUMNS_NAME, (PMAX * pack.width,), "float32", "input", None)
            if pack.ints:
                self.builder.hbm_tensor(INTS_NAME, (len(pack.ints),), "int32", "input", None)
            self.builder.pack = pack
        if self.builder.fusing and packing.ENABLED:  # the inputs of at most pmax rows (`compiler.rowpack`)
            filled = [name for name in self.tensors if name.startswith(packing.RNG_PREFIX)]  # after packing
            rows = plan_rows(list(self.tensors.values()), [*(pack.members if pack is not None else ()), *filled],
                             self.builder.preset.pmax)  # fmt: skip
            if rows is not None:
                self.builder.hbm_tensor(ROWS_NAME, (rows.parts * rows.width,), "float32", "input", None)
                self.builder.rows = rows

    def _emit(
        self,
        engine: Engine,
        opcode: Opcode,
        outs: Sequence[Access],
        ins: Sequence[Access],
        attributes: tuple[tuple[str, Scalar], ...] = (),
        queue: int = -1,
    ) -> int:
        with self.builder.active():
            index = self.builder.emit(engine, opcode, tuple(outs), tuple(ins), attributes)
        if queue >= 0:
            instructions = self.builder._instructions  # the builder assigns queues to DMAs only
            instructions[index] = dataclasses.replace(instructions[index], queue=queue)
        return index

    def build(self, meta: dict[str, str] | None = None) -> Program:
        self.builder.meta.update(meta or {})
        checks = (self.builder.check, self.builder.onehot_check, self.builder.conv_check, self.builder.nonfinite_check)
        for check in checks:  # row sums (`nprof.compiler.regather_check`, `nprof.compiler.conv_check`)
            if check is not None:
                self.builder.call(finish_check, check)
        stages = [(stage, self.builder.call(finish_stage, stage)) for stage in self.builder.stages]  # one DMA each
        blocks = self.builder.blocks
        parts, width = self.builder.call(finish_blocks, blocks) if blocks is not None else (0, 0)  # one DMA
        program = _renamed(self.builder.build(), self.renames)
        program = dead_stores(program) if self.builder.fusing else program
        if self.builder.pack is not None:
            program = packed_program(program, self.builder.pack)
        if self.builder.rows is not None:
            program = rows_program(program, self.builder.rows, self.builder.rows_written)
        for stage, k in stages:  # staged small outputs
            if k:
                program = staged_program(program, stage.columns, stage.sizes, k, stage.pmax, stage.name)
        if width and blocks is not None:
            members = {self.renames.get(name, name): m for name, m in blocks.members.items()}
            program = blocks_program(program, members, parts, width, self.builder.preset.pmax)
        program = merge_dmas(program) if self.builder.fusing else program  # equally spaced tile DMAs: one each
        program = reduced_program(program)  # implied deps dropped: the same waits, the passes below run ~3x faster
        program = hoist_loads(program) if self.builder.fusing else program  # prefetches first, the longest first
        internal = {t.name for t in program.tensors if t.kind == "internal"}
        marked = tuple(_mark_spills(ins, internal) for ins in program.instructions)
        program = dataclasses.replace(program, instructions=marked)  # (before the scheduler, which reads no mark)
        program = list_schedule(program) if self.builder.fusing else program  # engines never idle behind kernel order
        program = merge_front_loads(program) if self.builder.fusing else program  # loads of one pack: one DMA
        program = search_loads(program) if self.builder.fusing else program  # the loads' trigger order, timed
        program = stage_tail(program) if self.builder.fusing else program  # the last output stores: one DMA
        if attached_columns(program) is None:  # (the timed passes above replaced the scheduler's program)
            attach_columns(program, instruction_columns(program.instructions))
        return program


def _mark_spills(ins: Instruction, internal: set[str]) -> Instruction:
    if ins.opcode is not Opcode.DMA_DIRECT2D:
        return ins
    dst, src = ins.outs[0], ins.ins[0]
    spill = dst.space is Space.HBM and dst.tensor in internal
    reload = src.space is Space.HBM and src.tensor in internal
    if not (spill or reload):
        return ins
    extra = [("spill", True)] if spill else []
    extra += [("reload", True)] if reload else []
    return dataclasses.replace(ins, attrs=tuple(sorted((*ins.attrs, *extra))))


def _renamed(program: Program, renames: dict[str, str]) -> Program:
    """`program` with the HBM tensors named in `renames` renamed (declarations and every access)."""
    if not renames:
        return program

    def acc(a: Access) -> Access:
        return dataclasses.replace(a, tensor=renames[a.tensor]) if a.tensor in renames else a

    instructions = tuple(
        dataclasses.replace(ins, outs=tuple(map(acc, ins.outs)), ins=tuple(map(acc, ins.ins)))
        if any(a.tensor in renames for a in (*ins.outs, *ins.ins))
        else ins
        for ins in program.instructions
    )
    tensors = tuple(dataclasses.replace(t, name=renames.get(t.name, t.name)) for t in program.tensors)
    return dataclasses.replace(program, tensors=tensors, instructions=instructions)
