"""A Program's instructions held partly as columnar chunks: `Instruction` objects made only when someone asks.

Contract: `Instructions` is a sequence of `Instruction`s made of segments, each a list of `Instruction`s or a
`Chunk` (a producer's columnar block, e.g. loop iterations stamped out by `nprof.nki.stamp`). `len()` is O(1)
and never builds objects; reading an element, iterating, slicing or comparing turns the chunks into objects
once (`Chunk.materialize`) and from then on behaves as the tuple of all instructions. A tracer appends to it
(`append`, `add_chunk`, item assignment of an index it made) and gives the Program `frozen()`, a copy that does
not see later appends. Consumers that can use columns ask `segments()` before anything was materialised:
`Program.validate` checks a chunk's operands vectorised (`Chunk.in_bounds`) and the simulator's plan takes a
chunk's columns (`Chunk.columns`) without building an `Instruction`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, overload

from nprof.arch.isa import Instruction


class Chunk(Protocol):
    """A producer's columnar block of instructions (see module doc)."""

    def __len__(self) -> int: ...

    def materialize(self) -> list[Instruction]:
        """The block's `Instruction`s, in order."""
        ...

    def in_bounds(self, elements: dict[str, int]) -> bool:
        """Does every HBM operand name a tensor of `elements` (element counts by name) and stay within it?"""
        ...

    def columns(self) -> Any:
        """The block as `nprof.device.columns.Columns` (dependencies as indices in the whole program)."""
        ...


class Instructions(Sequence[Instruction]):
    """Instructions as segments of `Instruction` lists and `Chunk`s (see module doc)."""

    __slots__ = ("_done", "_n", "_segments", "_starts", "_tail")

    def __init__(self, items: Sequence[Instruction] = ()) -> None:
        self._tail: list[Instruction] = list(items)
        self._segments: list[list[Instruction] | Chunk] = [self._tail]
        self._starts = [0]
        self._n = len(self._tail)
        self._done: tuple[Instruction, ...] | None = None

    # -- building ---------------------------------------------------------------------------------------------
    def append(self, ins: Instruction) -> None:
        self._tail.append(ins)
        self._n += 1
        self._done = None

    def add_chunk(self, chunk: Chunk) -> None:
        """Append a chunk's instructions (not made into objects)."""
        if not len(chunk):
            return
        self._segments.append(chunk)
        self._starts.append(self._n)
        self._n += len(chunk)
        self._tail = []
        self._segments.append(self._tail)
        self._starts.append(self._n)
        self._done = None

    def __setitem__(self, index: int, ins: Instruction) -> None:
        k, at = self._locate(index)
        segment = self._segments[k]
        if not isinstance(segment, list):
            segment = self._segments[k] = segment.materialize()
        segment[at] = ins
        self._done = None

    def frozen(self) -> Instructions:
        """A copy that later appends do not change (chunks are shared: they are immutable)."""
        copy = Instructions()
        copy._segments = [list(s) if isinstance(s, list) else s for s in self._segments]
        copy._starts = list(self._starts)
        copy._n = self._n
        copy._tail = copy._segments[-1] if isinstance(copy._segments[-1], list) else []
        return copy

    # -- reading ----------------------------------------------------------------------------------------------
    def segments(self) -> list[tuple[int, list[Instruction] | Chunk]]:
        """(first index, segment) of every non-empty segment, in order."""
        return [(s, seg) for s, seg in zip(self._starts, self._segments, strict=True) if len(seg)]

    @property
    def materialized(self) -> bool:
        """Are all instructions objects already (no chunk left)?"""
        return self._done is not None or all(isinstance(s, list) for s in self._segments)

    def _locate(self, index: int) -> tuple[int, int]:
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("instruction index out of range")
        k = bisect.bisect_right(self._starts, index) - 1
        while not len(self._segments[k]):  # (an empty tail shares its start with the next segment)
            k += 1
        return k, index - self._starts[k]

    def as_tuple(self) -> tuple[Instruction, ...]:
        """All instructions as one tuple (chunks made into objects once)."""
        if self._done is None:
            out: list[Instruction] = []
            for k, segment in enumerate(self._segments):
                if not isinstance(segment, list):
                    segment = self._segments[k] = segment.materialize()
                out += segment
            self._done = tuple(out)
        return self._done

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Instruction: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Instruction, ...]: ...

    def __getitem__(self, index: int | slice) -> Instruction | tuple[Instruction, ...]:
        if isinstance(index, slice) or self._done is not None:
            return self.as_tuple()[index]
        k, at = self._locate(index)  # (one element: only its own chunk is made into objects)
        segment = self._segments[k]
        if not isinstance(segment, list):
            segment = self._segments[k] = segment.materialize()
        return segment[at]

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.as_tuple())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Instructions):
            other = other.as_tuple()
        if isinstance(other, tuple):
            return self.as_tuple() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # (a tuple compares equal to it; it is mutable while tracing)

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (self.as_tuple(),))

    def __repr__(self) -> str:
        return f"Instructions({len(self)} instructions)"
