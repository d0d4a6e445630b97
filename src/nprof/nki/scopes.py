"""Tile lifetimes by loop scope, as the Neuron compiler allocates them.

The compiler gives a tile allocated in the body of an `nl.affine_range` or
`nl.sequential_range` loop the lifetime of one iteration of that loop: its
memory is reused by the next iteration and the tile cannot be used after the
loop (AWS NKI docs, "NKI programming model": a tensor's scope is the loop body
that declares it). Tracing unrolls loops, so `loop(r)` iterates `r` and, at
the end of each iteration, ends the tiles allocated during it: their SBUF/PSUM
ranges are free for the next iteration whether or not a Python name still
refers to them, which is what lets per-iteration allocations fit as they do on
hardware. A later use of such a tile is a KernelError naming the loop.
`nl.static_range` and plain `range` are not scopes (fully unrolled by the
compiler too; their tiles live until unreferenced or the kernel returns).

Within a scope the compiler allocates by liveness (a tile's range is free
after its last use). Tracing cannot see the future, so when scope lifetimes
do not fit (`OverCapacity`), `nki.jit` traces the kernel twice more: a probe
with unbounded memory counts each tile's uses (`use_counts`, tiles numbered
in allocation order), then the real trace frees every tile right after the
instruction that makes its last use (`plan_lifetimes(uses_total=...)`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nprof.errors import KernelError
from nprof.nki.source import user_location

if TYPE_CHECKING:
    from nprof.nki.tensor import OnChip


class LoopScopes:
    """Mixin of `ProgramBuilder`: a stack of open loop iterations and the tiles each allocated."""

    _loops: list[tuple[str, list[weakref.ref[OnChip]]]]
    flush: Any
    _release: Any

    abandoned_loops: list[str]  # loops left before their last iteration (checked when the kernel returns)
    use_counts: dict[int, int]
    _uses_total: dict[int, int] | None
    _dying: list[OnChip]
    _sbuf: Any
    _psum: Any

    def plan_lifetimes(self, *, virtual: bool = False, uses_total: dict[int, int] | None = None) -> None:
        """`virtual`: unbounded SBUF/PSUM (a probe trace); `uses_total`: tile -> uses, each tile freed after
        its last one (from a probe of the same kernel and arguments)."""
        self.use_counts, self._uses_total, self._dying, self.abandoned_loops = {}, uses_total, [], []
        if virtual:
            self._sbuf.capacity = self._psum.capacity = 1 << 40

    def note_use(self, base: OnChip) -> None:
        """An instruction being built reads or writes `base`; after its last use it dies (see module doc)."""
        n = self.use_counts[base.seq] = self.use_counts.get(base.seq, 0) + 1
        if self._uses_total is not None and self._uses_total.get(base.seq) == n:
            self._dying.append(base)

    def release_dead(self) -> None:
        """Free the tiles whose last use was the instruction just appended."""
        for base in self._dying:
            self._release(base)
        self._dying.clear()

    def check_loops_completed(self) -> None:
        """KernelError when the kernel left an nl.affine_range/sequential_range loop early (return or break
        inside the body): NKI traces a loop body once for all its iterations, so such a kernel still runs every
        iteration there, while unrolled tracing would silently skip the rest."""
        if self.abandoned_loops:
            where = self.abandoned_loops[0]
            self.abandoned_loops.clear()
            raise KernelError(
                f"{where}: the kernel leaves this loop before its last iteration (a return or break inside the "
                "body); NKI runs a loop body for every iteration — move the return after the loop"
            )

    def in_loop_scope(self, base: OnChip) -> None:
        """Record that `base` was allocated in the innermost open loop iteration (if any)."""
        if self._loops:
            self._loops[-1][1].append(weakref.ref(base))

    def open_iteration(self, where: str) -> int:
        """Start one iteration of the loop at `where`; returns the depth to pass to `close_iteration`."""
        self._loops.append((where, []))
        return len(self._loops)

    def close_iteration(self, depth: int) -> None:
        """End the iteration opened at `depth` (and any left open inside it): free the tiles it allocated."""
        if len(self._loops) < depth:
            return  # already closed (the kernel returned from inside the loop)
        self.flush()  # a pending load/matmul into one of these tiles commits first
        while len(self._loops) >= depth:
            where, refs = self._loops.pop()
            for ref in refs:
                base = ref()
                if base is not None and base.alive:
                    base.ended_at = where
                    self._release(base)


class Loop:
    """`nl.affine_range(...)` / `nl.sequential_range(...)`: iterates like `range`, each iteration a tile scope."""

    def __init__(self, r: range) -> None:
        self.range = r
        self.where = user_location(full_path=True) or "<loop>"

    def __len__(self) -> int:
        return len(self.range)

    def __iter__(self) -> Iterator[int]:
        from nprof.nki import trace

        builder = trace._ACTIVE[-1] if trace._ACTIVE else None
        if builder is None:
            yield from self.range
            return
        last = len(self.range) - 1
        for n, i in enumerate(self.range):
            depth = builder.open_iteration(self.where)
            try:
                yield i
            except GeneratorExit:  # the body returned or broke out of the loop
                if n < last:
                    builder.abandoned_loops.append(self.where)
                raise
            finally:
                builder.close_iteration(depth)
