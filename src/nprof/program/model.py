"""The Program: what runs on the virtual NeuronCore (our NEFF-like format).

A Program is a list of `Instruction`s (see `nprof.arch.isa` for their
semantics) over named HBM tensors (`TensorDecl`), plus the initial values of
weights/constants. Producers (the `nki` tracer, the compiler) build one; the
`device` simulator runs it; `program.file` saves and loads it.

Invariants (checked by `Program.validate`): every `deps` index points to an
earlier instruction; every HBM Access names a declared tensor and stays in its
bounds; SBUF/PSUM Accesses stay within the preset's partitions and bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from nprof.arch.isa import ITEMSIZE, Instruction, Space
from nprof.errors import NprofError

TensorKind = Literal["input", "output", "weight", "internal"]


@dataclass(frozen=True)
class TensorDecl:
    """A tensor in HBM."""

    name: str  # unique name; inputs/outputs are addressed by it on the command line
    shape: tuple[int, ...]  # logical shape (row-major)
    dtype: str  # one of nprof.arch.isa.DTYPES
    kind: TensorKind  # input (user-supplied), output, weight (value in constants), internal (scratch/spill)

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.elements * ITEMSIZE[self.dtype]


@dataclass(frozen=True)
class Program:
    """A compiled program for one NeuronCore."""

    name: str  # kernel or graph name
    preset: str  # device preset it was built for: "trn1" or "trn2"
    tensors: tuple[TensorDecl, ...]  # every HBM tensor
    instructions: tuple[Instruction, ...]  # in program order; deps index into it (a tracer may give a lazy
    # nprof.program.lazy.Instructions: the same sequence, made into objects when first read)
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)  # initial values of weight tensors
    sbuf_bytes: int = 0  # per-partition SBUF bytes the program allocates (high-water mark)
    psum_bytes: int = 0  # per-partition PSUM bytes the program allocates (high-water mark)
    meta: Mapping[str, str] = field(default_factory=dict)  # source file, kernel name, graph hash...

    def tensor(self, name: str) -> TensorDecl:
        for t in self.tensors:
            if t.name == name:
                return t
        raise NprofError(f"program {self.name!r} has no tensor {name!r}; tensors: {[t.name for t in self.tensors]}")

    @property
    def inputs(self) -> tuple[TensorDecl, ...]:
        return tuple(t for t in self.tensors if t.kind == "input")

    @property
    def outputs(self) -> tuple[TensorDecl, ...]:
        return tuple(t for t in self.tensors if t.kind == "output")

    def validate(self) -> None:
        """Raise NprofError naming the first instruction that breaks an invariant."""
        elements = {t.name: t.elements for t in self.tensors}
        from nprof.program.lazy import Instructions

        instrs = self.instructions
        if not isinstance(instrs, Instructions) or instrs.materialized:
            self._check(instrs, 0, elements)
            return
        for start, segment in instrs.segments():
            if isinstance(segment, list):
                self._check(segment, start, elements)
            elif not segment.in_bounds(elements):  # (its dependencies are earlier by construction)
                self._check(segment.materialize(), start, elements)

    def _check(self, instrs: Sequence[Instruction], start: int, elements: dict[str, int]) -> None:
        """`validate` for instructions `start`, `start + 1`, ... of the program."""
        hbm = Space.HBM
        for i, ins in enumerate(instrs, start):
            deps = ins.deps
            if deps and (min(deps) < 0 or max(deps) >= i):
                d = next(d for d in deps if not 0 <= d < i)
                raise NprofError(f"program {self.name!r}: instruction {i} depends on {d}, not an earlier one")
            for acc in (*ins.outs, *ins.ins):
                if acc.space is hbm:
                    size = elements.get(acc.tensor)
                    if size is None:
                        raise NprofError(
                            f"program {self.name!r}: instruction {i} uses undeclared tensor {acc.tensor!r}"
                        )
                    reach = [(acc.partitions - 1) * acc.partition_stride]
                    reach += [(n - 1) * stride for stride, n in acc.free]  # (negative strides reach down)
                    lowest = acc.offset + sum(r for r in reach if r < 0)
                    if lowest < 0 or acc.offset + sum(r for r in reach if r > 0) >= size:
                        where = f" ({ins.source})" if ins.source else ""
                        raise NprofError(
                            f"program {self.name!r}: instruction {i}{where} reads/writes {acc.tensor!r} out of bounds"
                        )
