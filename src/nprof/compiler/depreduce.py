"""Fewer dependencies, the same waits: every dependency another one already implies is dropped.

Contract: `reduced_program(program)` returns `program` with each instruction's dependencies reduced
(`reduced_deps` on the CSR arrays): instruction C's dependency A is dropped when A is reached from another
of C's dependencies B through a chain of dependencies (C -> B -> ... -> A). With an unbounded `budget` that
is the transitive reduction of the dependency graph (unique for a DAG); with a bound, a DFS that used up its
visits stops, and the dependencies not reached by then are kept: fewer may be dropped, never a wrong one.
Kept dependencies stay sorted ascending; the instructions, their order and everything else are unchanged.

Why the timing is the same (`nprof.device.schedule`; held to it bit for bit in tests/compiler/test_depreduce.py,
with the plain reference scheduler too): an instruction waits for `max(end of dep + its latency)` over its
dependencies, the latency being the consumer's own (none between TensorE instructions); a DMA for the max of
their ends; the device's window order (`device.order`) for the max of their estimated ends, plus its latency.
Along a chain B -> ... -> A every link only adds non-negative latencies and durations (an elided PSUM fill ends
when its dependencies end), so end(B) >= end(A) + the chain's latencies >= end(A) (floats round monotonically),
and when C is TensorE and A is not while B is TensorE, the chain's first link onto TensorE already pays TensorE's
latency: B's contribution is never below A's, and the max is the same number. Reachability is unchanged, so the
order of every conflicting pair is kept (numerics), and the compiler's reordering passes, which `Emitter.build`
runs after the reduction (`compiler.prefetch`, `compiler.listsched`: their clocks and path lengths are the same
max-plus rules), choose the same order (held to it on the zoo's graphs; ~3x less of their CPU on resnet18).
A PSUM fill's first dependent keeps it (a dependent reaching it through another would have a smaller index):
the fills `device.psum` elides are the same.
What changes: the Profile's "deps" lists show the direct waits only (38 -> 2.3 per instruction on resnet18's
backward), and what reads them (the plan's columns, the program file) is that much smaller.
"""

from __future__ import annotations

import dataclasses
from itertools import chain

import numpy as np

from nprof.compiled import njit, run_detached
from nprof.program.model import Program

ENABLED = True  # module switch (tests compare the timing with the full dependency lists)
BUDGET = 1 << 14  # DFS visits per instruction before the rest of its dependencies are kept as they are
_WARM: list[bool] = []


@njit()
def _search(
    d: int, ds: np.ndarray, low: int, j: int, i: int, out_off: np.ndarray, out: np.ndarray, implied: np.ndarray,
    seen: np.ndarray, stack: np.ndarray, visits: int, budget: int,
) -> tuple[int, int]:  # fmt: skip
    """DFS from the kept dependency `d` (= ds[j]) of instruction `i` over the reduced lists: every node reached is
    `implied` for `i`; nothing below the earliest dependency not known to be implied (ds[low]) is entered, and the
    search stops once all of ds[:j] are implied or `budget` visits are spent. Returns (low, visits)."""
    top = 1
    stack[0] = d
    seen[d] = i
    while top > 0 and visits < budget:
        top -= 1
        v = stack[top]
        for e in range(out_off[v], out_off[v + 1]):
            u = out[e]
            if u < ds[low] or seen[u] == i:
                continue
            implied[u] = i
            seen[u] = i
            stack[top] = u
            top += 1
            visits += 1
        while low < j and implied[ds[low]] == i:
            low += 1
        if low >= j:
            break
    return low, visits


@njit()
def _reduce(offsets: np.ndarray, flat: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, flat) of the reduced lists (module doc). Per instruction: first what its dependencies wait for
    directly is marked implied (most implied ones are found there); then its dependencies from the latest down:
    one not implied is kept, and a DFS from it (`_search`) marks what it reaches, while some earlier one is not
    known to be implied yet."""
    n = len(offsets) - 1
    implied = np.full(n, -1, np.int64)  # i: reached from a dependency of instruction i
    seen = np.full(n, -1, np.int64)  # i: expanded by a search for instruction i
    stack = np.empty(n + 1, np.int64)
    out_off = np.zeros(n + 1, np.int64)
    out = np.empty(len(flat), np.int64)
    k = 0
    for i in range(n):
        out_off[i] = k
        ds = np.unique(flat[offsets[i] : offsets[i + 1]])  # sorted, distinct
        for d in ds:
            for e in range(out_off[d], out_off[d + 1]):
                implied[out[e]] = i
        low = 0  # ds[low]: the earliest dependency not known to be implied
        visits = 0
        for j in range(len(ds) - 1, -1, -1):
            d = ds[j]
            if implied[d] == i:
                continue
            out[k] = d
            k += 1
            while low < j and implied[ds[low]] == i:
                low += 1
            if low < j and visits < budget:
                low, visits = _search(d, ds, low, j, i, out_off, out, implied, seen, stack, visits, budget)
        out[out_off[i] : k] = out[out_off[i] : k][::-1].copy()  # ascending
    out_off[n] = k
    return out_off, out[:k].copy()


def _warm() -> None:
    """Compile (or load) `_reduce` on a thread of its own (`nprof.compiled.run_detached`: a first compile keeps
    the frames of its caller alive)."""
    _reduce(np.zeros(2, np.int64), np.zeros(0, np.int64), 1)
    _WARM.append(True)


def reduced_deps(offsets: np.ndarray, flat: np.ndarray, budget: int = BUDGET) -> tuple[np.ndarray, np.ndarray]:
    """The reduced dependency lists of the CSR arrays `offsets` [n + 1] / `flat` (int64; every dependency an
    earlier index), as new CSR arrays (module doc)."""
    if not _WARM:
        run_detached(_warm)
    # C-contiguous writable int64: `_reduce`'s one signature (a read-only array would compile another, `warm_cores`)
    stable = [np.require(a, np.int64, ("C", "W")) for a in (offsets, flat)]
    return _reduce(stable[0], stable[1], int(budget))


def reduced_program(program: Program, budget: int = BUDGET) -> Program:
    """`program` with every implied dependency dropped (module doc); itself when `ENABLED` is off or none is."""
    instrs = program.instructions
    lists = [ins.deps for ins in instrs]
    offsets = np.zeros(len(lists) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, lists), np.int64, len(lists)), out=offsets[1:])
    if not ENABLED or int(offsets[-1]) == 0:
        return program
    flat = np.fromiter(chain.from_iterable(lists), np.int64, int(offsets[-1]))
    new_off, new_flat = reduced_deps(offsets, flat, budget)
    if len(new_flat) == len(flat):
        return program
    bounds, values = new_off.tolist(), new_flat.tolist()
    out = []
    for i, ins in enumerate(instrs):
        deps = tuple(values[bounds[i] : bounds[i + 1]])
        out.append(ins if deps == ins.deps else dataclasses.replace(ins, deps=deps))
    return dataclasses.replace(program, instructions=tuple(out))
