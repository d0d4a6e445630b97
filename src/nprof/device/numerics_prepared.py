"""Numerics of one Program prepared once and run many times (a compiled graph executed every training step).

Contract: `PreparedNumerics(program, preset)` builds, once, one step per instruction bound to the numpy views
of a Memory it keeps; `run(inputs)` resets that Memory to zeros (as a fresh `Memory` is), loads the checked
inputs and the program's weights, runs every step in program order and returns the output tensors exactly
as `nprof.device.simulate(program, inputs, numerics=True)` returns them — bit for bit: the steps are the
`numerics.HANDLERS` of the instructions, except for these fast paths, which compute the same values without
the per-instruction copies and conversions:

* a DMA or TENSOR_COPY between equal dtypes (static addresses, no `rmw`) is one `np.copyto` between the two
  views (numpy copies through a temporary when they overlap, as the handler's explicit copy does);
* a TENSOR_TENSOR add/subtract/multiply/divide/maximum/minimum on float32 operands and result of one shape
  is the ufunc written straight into the result view (float32 arithmetic either way);
* a MEMSET is one `np.copyto` of its value, converted to the output dtype once (`memory.convert` is
  element-wise: the handler converts the value broadcast to every element), into the output view;
* LDWEIGHTS (no numerics) is no step at all.

An instruction whose views cannot be made (out of bounds) keeps its handler, which raises at run time. Errors
raise `NprofError` naming the instruction as `simulate` does; non-finite outputs are a warning when
`lenient`, else an error (`collect_outputs`). Inputs are checked by `simulate.prepare_inputs`; a missing
input runs on zeros. Not thread-safe (one Memory).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial

import numpy as np

from nprof.arch.isa import Instruction, Opcode
from nprof.arch.presets import Preset
from nprof.device import numerics as num
from nprof.device.memory import AccessError, Memory, convert
from nprof.errors import NprofError
from nprof.program.model import Program

Step = Callable[[], object]
_UFUNCS = {name: getattr(np, name) for name in ("add", "subtract", "multiply", "divide", "maximum", "minimum")}
_COPIES = (Opcode.DMA_DIRECT2D, Opcode.TENSOR_COPY)


class PreparedNumerics:
    """The numerics of one Program, prepared for repeated runs (see module doc)."""

    def __init__(self, program: Program, preset: Preset) -> None:
        from nprof.device.simulate import check_input

        self.program = program
        self.mem = Memory(program, preset)
        self._weights = {
            t.name: check_input(t, program.constants[t.name])
            for t in program.tensors
            if t.kind == "weight" and t.name in program.constants
        }
        self._steps: list[tuple[int, Step]] = []
        for i, ins in enumerate(program.instructions):
            step = self._prepare(ins)
            if step is not None:
                self._steps.append((i, step))

    def _prepare(self, ins: Instruction) -> Step | None:
        """The step of one instruction (None: it has no numerics)."""
        if ins.opcode is Opcode.LDWEIGHTS:
            return None
        try:
            if (
                ins.opcode in _COPIES
                and len(ins.ins) == 1  # not runtime-addressed (nprof.device.indirect)
                and ins.attr("rmw") is None
                and not ins.attr("transpose")  # a DMA transpose permutes: its handler
                and ins.ins[0].dtype == ins.outs[0].dtype
            ):
                return _copy_step(self.mem, ins)
            if ins.opcode is Opcode.TENSOR_TENSOR:
                step = _tensor_tensor_step(self.mem, ins)
                if step is not None:
                    return step
            if ins.opcode is Opcode.MEMSET and len(ins.outs) == 1:
                return _memset_step(self.mem, ins)
        except (AccessError, ValueError, IndexError, TypeError):
            pass  # the handler raises the same error when the instruction runs
        return partial(num.HANDLERS[ins.opcode], ins, self.mem)

    def run(self, inputs: Mapping[str, object] | None, lenient: bool = True) -> dict[str, np.ndarray]:
        """The program's outputs for `inputs` (see module doc)."""
        from nprof.device.simulate import collect_outputs, one_blas_thread, prepare_inputs

        checked, missing = prepare_inputs(self.program, inputs)
        mem = self.mem
        mem.sbuf.fill(0)
        mem.psum.fill(0)
        for arr in mem.hbm.values():
            arr.fill(0)
        for name, value in (*checked.items(), *self._weights.items()):
            mem.load(name, value)
        i = -1
        try:
            with np.errstate(all="ignore"), one_blas_thread():
                for i, step in self._steps:  # noqa: B007 (i names the failing instruction)
                    step()
        except (AccessError, ValueError, IndexError, KeyError, TypeError) as exc:
            ins = self.program.instructions[i]
            where = f"instruction {i} ({ins.opcode.value}{', ' + ins.source if ins.source else ''})"
            raise NprofError(f"execution error in {where}: {exc}; fix the program") from exc
        return collect_outputs(self.program, mem, lenient or bool(missing), [])


def _copy_step(mem: Memory, ins: Instruction) -> Step:
    src, dst = mem.view(ins.ins[0]), mem.view(ins.outs[0])
    if src.size != dst.size:
        raise ValueError("sizes differ")  # the handler reports it
    if src.shape != dst.shape:
        try:
            src = np.reshape(src, dst.shape, copy=False)
        except ValueError:  # not expressible as a view: reshape (a copy) at every run
            return partial(_copy_reshaped, dst, src)
    return partial(np.copyto, dst, src)


def _memset_step(mem: Memory, ins: Instruction) -> Step:
    out = ins.outs[0]
    value = convert(np.asarray(np.float64(ins.attr("value", 0.0))), out.dtype)  # as the handler's write converts
    return partial(np.copyto, mem.view(out), value)


def _copy_reshaped(dst: np.ndarray, src: np.ndarray) -> None:
    np.copyto(dst, src.reshape(dst.shape))


def _tensor_tensor_step(mem: Memory, ins: Instruction) -> Step | None:
    fn = _UFUNCS.get(str(ins.attr("op", "add")))
    accesses = (*ins.ins[:2], ins.outs[0])
    if fn is None or len(ins.ins) != 2 or any(a.dtype != "float32" for a in accesses):
        return None
    a, b, out = (mem.view(x) for x in accesses)
    if not a.shape == b.shape == out.shape:
        return None
    return partial(fn, a, b, out=out)
