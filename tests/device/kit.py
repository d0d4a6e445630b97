"""A tiny hand-building kit for Programs in device tests: allocate tiles, emit instructions, run."""

from __future__ import annotations

from typing import Any

import numpy as np

from nprof.arch.isa import ITEMSIZE, Access, Engine, Instruction, Opcode, Space, attrs, numpy_dtype
from nprof.device import SimResult, simulate
from nprof.program.model import Program, TensorDecl


class Kit:
    """Builds a Program instruction by instruction; by default each instruction depends on the previous one."""

    def __init__(self, name: str = "t", preset: str = "trn1") -> None:
        self.name = name
        self.preset = preset
        self.tensors: list[TensorDecl] = []
        self.instrs: list[Instruction] = []
        self.constants: dict[str, np.ndarray] = {}
        self._sbuf = 0
        self._psum = 0
        self.inputs: dict[str, np.ndarray] = {}

    # --- tensors and tiles ---
    def hbm(self, name: str, shape: tuple[int, ...], dtype: str = "float32", kind: str = "input") -> Access:
        """Declare an HBM tensor; return the Access of its 2-D [rows, cols] view (rows as partitions)."""
        self.tensors.append(TensorDecl(name, tuple(shape), dtype, kind))  # type: ignore[arg-type]
        rows = shape[0]
        cols = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        return Access(Space.HBM, name, dtype, 0, rows, ((1, cols),), 0, cols)

    def input(self, name: str, value: np.ndarray, dtype: str = "float32") -> Access:
        self.inputs[name] = value
        return self.hbm(name, value.shape, dtype, "input")

    def sbuf(self, name: str, p: int, f: int | tuple[int, ...], dtype: str = "float32") -> Access:
        sizes = (f,) if isinstance(f, int) else f
        strides = [1]
        for size in reversed(sizes[1:]):
            strides.insert(0, strides[0] * size)
        acc = Access(Space.SBUF, name, dtype, self._sbuf, p, tuple(zip(strides, sizes, strict=True)))
        self._sbuf += ITEMSIZE[dtype] * int(np.prod(sizes))
        self._sbuf = (self._sbuf + 63) // 64 * 64
        return acc

    def psum(self, name: str, p: int, f: int, dtype: str = "float32") -> Access:
        acc = Access(Space.PSUM, name, dtype, self._psum, p, ((1, f),))
        self._psum += 2048
        return acc

    # --- instructions ---
    def emit(
        self,
        engine: Engine,
        opcode: Opcode,
        outs: tuple[Access, ...] = (),
        ins: tuple[Access, ...] = (),
        deps: tuple[int, ...] | None = None,
        queue: int = -1,
        source: str | None = None,
        **kw: Any,
    ) -> int:
        if deps is None:
            deps = (len(self.instrs) - 1,) if self.instrs else ()
        self.instrs.append(Instruction(engine, opcode, outs, ins, attrs(**kw), tuple(deps), queue=queue, source=source))
        return len(self.instrs) - 1

    def dma(self, dst: Access, src: Access, queue: int = 0, deps: tuple[int, ...] | None = None, **kw: Any) -> int:
        return self.emit(Engine.DMA, Opcode.DMA_DIRECT2D, (dst,), (src,), deps=deps, queue=queue, **kw)

    def load(self, name: str, value: np.ndarray, dtype: str = "float32") -> Access:
        """Input `name` DMA'd into a fresh SBUF tile of the same 2-D shape; returns the tile."""
        h = self.input(name, np.asarray(value).astype(numpy_dtype(dtype)), dtype)
        tile = self.sbuf(name + "_sb", h.partitions, h.free_elements, dtype)
        self.dma(tile, h)
        return tile

    def store(self, name: str, tile: Access) -> Access:
        """A fresh output tensor with the tile's 2-D shape, DMA'd from the tile."""
        h = self.hbm(name, (tile.partitions, tile.free_elements), tile.dtype, "output")
        flat = Access(tile.space, tile.tensor, tile.dtype, tile.offset, tile.partitions, ((1, tile.free_elements),))
        if tile.free and len(tile.free) > 1:
            self.dma(h, tile)
        else:
            self.dma(h, flat)
        return h

    def program(self) -> Program:
        return Program(
            self.name,
            self.preset,
            tuple(self.tensors),
            tuple(self.instrs),
            constants=dict(self.constants),
            sbuf_bytes=self._sbuf,
            psum_bytes=self._psum,
        )

    def run(self, **kw: Any) -> SimResult:
        return simulate(self.program(), self.inputs, **kw)


def rows(result: SimResult) -> dict[int, dict[str, Any]]:
    """Every event (instruction or DMA) of the profile by id."""
    out = {r["id"]: r for r in result.profile.instructions.to_pylist()}
    out.update({r["id"]: r for r in result.profile.dma.to_pylist()})
    return out
