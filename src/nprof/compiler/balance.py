"""Elementwise work spread over VectorE, ScalarE and GpSimdE by a build-time estimate of when each is free.

Contract: `EngineClock` follows the instructions a `FusingBuilder` appends, in program order, and estimates
each one's end with the cost model (`nprof.arch.cost.instruction_ns`): an instruction starts when its engine
is free (each engine runs its instructions in program order, as the simulator does with its scheduling
window of 1) and its dependencies have ended (plus the dependency latency of `cost.dependency_latency_ns`);
DMAs are triggered `dma_issue_gap_ns` apart. `choose(ins)` returns the engine among those that may run the
instruction on which it would end first (ties: its own engine), so copies, PSUM evacuations and small
elementwise ops queue on the engine with room instead of all on VectorE. Which engines may run what, from
the NKI ISA reference (nki.isa.tensor_copy / tensor_tensor / tensor_scalar):

* TENSOR_COPY on VectorE, ScalarE or GpSimdE; TENSOR_TENSOR on VectorE or GpSimdE; TENSOR_SCALAR on VectorE,
  GpSimdE, or ScalarE for add/subtract/multiply (an activation's scale and bias);
* never GpSimdE with an operand in PSUM ("GpSimd Engine cannot access PSUM"); never ScalarE unless every
  operand is fp32 ("Scalar Engine ... casting the input tile to FP32 internally": exact for fp32 only);
* only instructions the kernels left on VectorE (the default engine) move; an instruction a kernel placed on
  purpose stays where it is, and so do dynamic (runtime-addressed) copies and the model's free bookkeeping
  instructions (`inline`, `register`: `nprof.arch.cost`).

Numerics are unchanged: the three engines compute these fp32 operations alike in the simulator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nprof.arch.cost import dependency_latency_ns, instruction_cycles, instruction_ns
from nprof.arch.isa import Engine, Instruction, Opcode, Space
from nprof.arch.presets import Preset

ENABLED = True  # module switch (off: these stay on VectorE, copies alternating VectorE and ScalarE, as before)

_MOVABLE = {
    Opcode.TENSOR_COPY: (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD),
    Opcode.TENSOR_TENSOR: (Engine.VECTOR, Engine.GPSIMD),
    Opcode.TENSOR_SCALAR: (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD),
}
_PINNED = ("dynamic", "indirect", "inline", "register")  # runtime addressing, the model's bookkeeping: stay
_SCALAR_ALU = frozenset({"add", "subtract", "multiply"})
_FLOAT = frozenset({"float32"})


def candidates(ins: Instruction) -> Sequence[Engine]:
    """The engines that may run `ins` in its place (see module doc); () when it stays where it is."""
    allowed = _MOVABLE.get(ins.opcode)
    if allowed is None or ins.engine is not Engine.VECTOR or any(ins.attr(k) for k in _PINNED):
        return ()
    operands = (*ins.ins, *ins.outs)
    if any(a.space is Space.PSUM for a in operands):
        allowed = tuple(e for e in allowed if e is not Engine.GPSIMD)
    scalar_ok = all(a.dtype in _FLOAT for a in operands) and (
        ins.opcode is Opcode.TENSOR_COPY
        or (ins.attr("op0") in _SCALAR_ALU and ins.attr("op1") in (None, *_SCALAR_ALU))
    )
    if not scalar_ok:
        allowed = tuple(e for e in allowed if e is not Engine.SCALAR)
    return allowed


class EngineClock:
    """Estimated end of every appended instruction and the time each engine is free (see module doc)."""

    def __init__(self, preset: Preset) -> None:
        self.preset = preset
        self._end: list[float] = []
        self._start: list[float] = []
        self._free: dict[Engine, float] = {}
        self._last_trigger = -preset.dma_issue_gap_ns
        self._cycles: tuple[object, object, object, Opcode, float] | None = None  # `_ns`: the last priced by `choose`

    def _deps_end(self, ins: Instruction) -> float | None:
        """The latest estimated end among `ins`'s dependencies appended so far (None: none is)."""
        deps, ends = ins.deps, self._end
        if not deps:
            return None
        if max(deps) < len(ends):
            return max(map(ends.__getitem__, deps))
        found = [ends[d] for d in deps if d < len(ends)]
        return max(found) if found else None

    def _finish(self, ins: Instruction, engine: Engine, deps_end: float | bool | None = False) -> tuple[float, float]:
        """(start, end) of `ins` run on `engine` after everything appended so far (`deps_end`: `_deps_end(ins)`
        when the caller has it, else False)."""
        last = self._deps_end(ins) if deps_end is False else deps_end
        lat = dependency_latency_ns(engine, self.preset) if engine is not Engine.DMA else 0.0
        start = max(self._free.get(engine, 0.0), 0.0 if last is None else last + lat)
        if engine is Engine.DMA:
            start = max(start, self._last_trigger + self.preset.dma_issue_gap_ns)
        return start, start + self._ns(ins, engine)

    def _ns(self, ins: Instruction, engine: Engine) -> float:
        """`instruction_ns` of `ins` run on `engine`. GpSimdE is charged at VectorE's clock when `ins` moves
        there: the cost model runs the VectorE formulas at GpSimdE's faster clock, but its 8 general-purpose
        cores are no faster at elementwise work on hardware, so the choice never rests on that (the simulated
        time is the cost model's, as for every instruction). The engine cycles of a compute instruction do not
        depend on its engine (`cost.instruction_cycles` reads only its opcode, operands and attrs): those of the
        instruction `choose` last priced (the same operand and attrs objects) are reused, the clock applied as
        `instruction_ns` applies it."""
        last = self._cycles
        if last is None or last[0] is not ins.ins or last[1] is not ins.outs or last[2] is not ins.attrs \
                or last[3] is not ins.opcode:  # fmt: skip
            moved = ins if ins.engine is engine else _on(ins, Engine.VECTOR if engine is Engine.GPSIMD else engine)
            return instruction_ns(moved, self.preset)
        clock = Engine.VECTOR if engine is Engine.GPSIMD and ins.engine is not Engine.GPSIMD else engine
        return last[4] * 1e9 / self.preset.clock_hz(clock.value)

    def choose(self, ins: Instruction) -> Engine:
        """The engine among `candidates(ins)` on which `ins` would end first; its own engine when none."""
        options = candidates(ins)
        if len(options) < 2:
            return ins.engine
        last = self._deps_end(ins)  # the same for every engine: computed once
        self._cycles = (ins.ins, ins.outs, ins.attrs, ins.opcode, instruction_cycles(ins, self.preset))  # (once)
        return min(options, key=lambda e: (self._finish(ins, e, last)[1], e is not ins.engine))

    def arrived(self, index: int) -> None:
        """Record instruction `index` as done at time 0 (a prefetched input: `nprof.compiler.prefetch`)."""
        while len(self._end) <= index:
            self._end.append(0.0)
            self._start.append(0.0)

    def started(self, index: int) -> float:
        """The estimated start of instruction `index` (added; 0 for one appended without the clock)."""
        return self._start[index] if index < len(self._start) else 0.0

    def add(self, index: int, ins: Instruction) -> None:
        """Record `ins` (at program index `index`) as placed: its engine is busy until its estimated end."""
        while len(self._end) < index:  # instructions appended without us (stamped loop chunks): not estimated
            self._end.append(0.0)
            self._start.append(0.0)
        start, end = self._finish(ins, ins.engine)
        self._start.append(start)
        if ins.engine is Engine.DMA:
            self._last_trigger = start
            self._end.append(end)
            return
        self._free[ins.engine] = end
        self._end.append(end)


def _on(ins: Instruction, engine: Engine) -> Instruction:
    return dataclasses.replace(ins, engine=engine)
