"""Collective operations across workers: the ring cost model and the numerics of one operation.

Contract:
* `Topology(world_size, workers_per_node)`: rank r lives on node
  `r // workers_per_node`, on Neuron device `(r % workers_per_node) // cores_per_chip` and NeuronCore
  `r % cores_per_chip` of that device (`place(rank, preset)` -> (node, nd_idx, nc_idx)).
* `ring_schedule(opcode, nbytes, n)` -> (steps, bytes per step) of the ring algorithm on `n` ranks, where
  `nbytes` is one rank's *input* payload:
  all-reduce 2(n-1) steps of nbytes/n (reduce-scatter then all-gather), all-gather n-1 steps of nbytes,
  reduce-scatter n-1 steps of nbytes/n, all-to-all n-1 steps of nbytes/n (pairwise exchange).
* `ring_time_ns(opcode, nbytes, ranks, topology, preset)`: every step all ranks send one chunk to their ring
  neighbour at once, so a step lasts as long as its slowest hop: `link_latency_ns + chunk / link_bandwidth`
  when every rank is on one node (NeuronLink), `efa_latency_ns + chunk / efa_bandwidth` when the ring
  crosses nodes (EFA). One rank alone: a local copy at one DMA queue's bandwidth.
* `combine(opcode, op, contributions, out_sizes)`: the results, one flat float64 array per participating rank
  (in group order), of an operation whose participants contributed the flat arrays `contributions`:
  all-reduce: every rank gets op-reduce of all; all-gather: the concatenation in group order; reduce-scatter:
  rank i gets chunk i of the reduction; all-to-all: rank j gets chunk j of every rank, concatenated. Sizes
  that do not divide raise ValueError (the runner turns it into an NprofError naming the instruction).
* `KIND`: opcode -> profile `collectives.kind` name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nprof.arch.isa import Opcode
from nprof.arch.presets import Preset

KIND = {
    Opcode.ALL_REDUCE: "all-reduce",
    Opcode.ALL_GATHER: "all-gather",
    Opcode.REDUCE_SCATTER: "reduce-scatter",
    Opcode.ALL_TO_ALL: "all-to-all",
}

_REDUCE = {
    "add": np.add,
    "maximum": np.maximum,
    "max": np.maximum,
    "minimum": np.minimum,
    "min": np.minimum,
    "multiply": np.multiply,
}


@dataclass(frozen=True)
class Topology:
    """How the job's ranks are spread over nodes."""

    world_size: int
    workers_per_node: int

    def node(self, rank: int) -> int:
        return rank // self.workers_per_node

    def place(self, rank: int, preset: Preset) -> tuple[int, int, int]:
        """(node, nd_idx, nc_idx) of `rank`."""
        local = rank % self.workers_per_node
        return self.node(rank), local // preset.cores_per_chip, local % preset.cores_per_chip

    def crosses_nodes(self, ranks: Sequence[int]) -> bool:
        return len({self.node(r) for r in ranks}) > 1


def ring_schedule(opcode: Opcode, nbytes: int, n: int) -> tuple[int, float]:
    """(steps, bytes each rank sends per step) of the ring algorithm for `opcode` on `n` ranks."""
    if n <= 1:
        return 0, 0.0
    if opcode is Opcode.ALL_REDUCE:
        return 2 * (n - 1), nbytes / n
    if opcode is Opcode.ALL_GATHER:
        return n - 1, float(nbytes)
    return n - 1, nbytes / n  # reduce-scatter, all-to-all


def ring_time_ns(opcode: Opcode, nbytes: int, ranks: Sequence[int], topology: Topology, preset: Preset) -> float:
    """Duration of the collective once every rank has arrived (see module doc)."""
    n = len(ranks)
    if n <= 1:
        return nbytes / preset.dma_queue_bandwidth * 1e9
    steps, chunk = ring_schedule(opcode, nbytes, n)
    if topology.crosses_nodes(ranks):
        latency, bandwidth = preset.efa_latency_ns, preset.efa_bandwidth
    else:
        latency, bandwidth = preset.link_latency_ns, preset.link_bandwidth
    return steps * (latency + chunk / bandwidth * 1e9)


def algorithm(ranks: Sequence[int], topology: Topology) -> str:
    """The `collectives.algorithm` text: which ring and which link."""
    return "ring/efa" if topology.crosses_nodes(ranks) else "ring/neuronlink"


def _reduce(op: str, arrays: Sequence[np.ndarray]) -> np.ndarray:
    fn = _REDUCE.get(op)
    if fn is None:
        raise ValueError(f"unsupported reduction op {op!r}; use one of {', '.join(sorted(_REDUCE))}")
    out = np.array(arrays[0], dtype=np.float64, copy=True)
    for a in arrays[1:]:
        fn(out, a, out=out)
    return out


def combine(opcode: Opcode, op: str, contributions: Sequence[np.ndarray], out_sizes: Sequence[int]) -> list[np.ndarray]:
    """Per-rank flat results of one collective (see module doc)."""
    n = len(contributions)
    flat = [np.asarray(c, dtype=np.float64).reshape(-1) for c in contributions]
    size = flat[0].size
    if any(f.size != size for f in flat):
        raise ValueError(f"ranks contribute different element counts: {sorted({f.size for f in flat})}")
    if opcode is Opcode.ALL_REDUCE:
        total = _reduce(op, flat)
        results = [total] * n
    elif opcode is Opcode.ALL_GATHER:
        results = [np.concatenate(flat)] * n
    elif opcode is Opcode.REDUCE_SCATTER:
        if size % n:
            raise ValueError(f"reduce-scatter of {size} elements does not split into {n} equal chunks")
        results = list(_reduce(op, flat).reshape(n, size // n))
    elif opcode is Opcode.ALL_TO_ALL:
        if size % n:
            raise ValueError(f"all-to-all of {size} elements does not split into {n} equal chunks")
        stacked = np.stack(flat).reshape(n, n, size // n)  # [source rank, destination chunk, ...]
        results = [stacked[:, j].reshape(-1) for j in range(n)]
    else:
        raise ValueError(f"{opcode} is not a collective")
    for r, (res, want) in enumerate(zip(results, out_sizes, strict=True)):
        if res.size != want:
            raise ValueError(
                f"{KIND[opcode]} on {n} ranks produces {res.size} elements per rank but rank position {r}'s "
                f"output holds {want}"
            )
    return results
