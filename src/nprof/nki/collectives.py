"""Collective calls of the kernel language: `all_reduce`, `all_gather`, `reduce_scatter`, `all_to_all`.

Named after the public `nki.collectives` module (signatures are ours). Each call records one instruction on
the CC-cores (engine "cc", track `cc.<k>`) that moves HBM data between the workers of a multi-worker run
(`nprof.device.workers.simulate_workers`, `nprof capture -r N`); see `nprof.arch.isa` for the semantics:

* `all_reduce(dst, src, op=nl.add, replica_group=None)`: dst = op-reduction of every rank's src
  (same element count);
* `all_gather(dst, src, replica_group=None)`: dst = every rank's src concatenated in rank order
  (dst holds n x src elements);
* `reduce_scatter(dst, src, op=nl.add, replica_group=None)`: rank i's dst = chunk i of the reduction
  (src holds n x dst elements);
* `all_to_all(dst, src, replica_group=None)`: rank j's dst = chunk j of every rank's src, in rank order.

`src`/`dst` must be HBM tensors (kernel arguments or `nl.ndarray(..., buffer=nl.shared_hbm)`).
`replica_group`: None (every worker), a sequence of ranks, or a `ReplicaGroup`. `cc_core` picks the
CC-core (default: round-robin per kernel). With one worker a collective is a copy (n = 1). Shape mistakes
that can be seen at trace time raise KernelError at the user's line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nprof.arch.isa import Engine, Opcode, attrs
from nprof.nki import trace as _trace
from nprof.nki.isa import alu_name
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor


@dataclass(frozen=True)
class ReplicaGroup:
    """The ranks taking part in a collective (all workers when empty)."""

    ranks: tuple[int, ...] = ()

    def __init__(self, ranks: Sequence[int] = ()) -> None:
        object.__setattr__(self, "ranks", tuple(int(r) for r in ranks))


def _group(replica_group: Any) -> tuple[int, ...]:
    if replica_group is None:
        return ()
    if isinstance(replica_group, ReplicaGroup):
        ranks = replica_group.ranks
    else:
        try:
            ranks = tuple(int(r) for r in replica_group)
        except (TypeError, ValueError):
            raise kernel_error(
                f"replica_group must be a list of ranks or a ReplicaGroup, got {replica_group!r}"
            ) from None
    if len(set(ranks)) != len(ranks) or any(r < 0 for r in ranks):
        raise kernel_error(f"replica_group {ranks} must list distinct ranks >= 0")
    return tuple(sorted(ranks))


def _hbm(t: Any, what: str) -> NkiTensor:
    if not isinstance(t, NkiTensor) or not t.is_hbm:
        raise kernel_error(f"{what} of a collective must be an HBM tensor (a kernel argument or nl.shared_hbm)")
    return t


def _emit(opcode: Opcode, dst: Any, src: Any, op: str | None, replica_group: Any, cc_core: int | None) -> None:
    d, s = _hbm(dst, "dst"), _hbm(src, "src")
    group = _group(replica_group)
    n_dst, n_src = d.access().elements, s.access().elements
    n = len(group)
    if opcode is Opcode.ALL_REDUCE and n_dst != n_src:
        raise kernel_error(f"all_reduce needs dst and src of equal size, got {d.shape} and {s.shape}")
    if opcode is Opcode.ALL_GATHER and (n_dst % n_src or (n and n_dst != n * n_src)):
        raise kernel_error(f"all_gather dst {d.shape} must hold (ranks x) src {s.shape} elements")
    if opcode is Opcode.REDUCE_SCATTER and (n_src % n_dst or (n and n_src != n * n_dst)):
        raise kernel_error(f"reduce_scatter src {s.shape} must hold (ranks x) dst {d.shape} elements")
    if opcode is Opcode.ALL_TO_ALL and n_dst != n_src:
        raise kernel_error(f"all_to_all needs dst and src of equal size, got {d.shape} and {s.shape}")
    builder = _trace.current()
    index = builder.emit(Engine.CC, opcode, (d.access(),), (s.access(),), attrs(op=op, group=group if group else None))
    core = cc_core if cc_core is not None else builder.cc_next
    builder.cc_next = core + 1  # round-robin over CC-cores, per traced program
    _set_core(builder, index, core % builder.preset.cc_cores)


def _set_core(builder: Any, index: int, core: int) -> None:
    """Put instruction `index` on CC-core `core` (its `queue`), keeping everything else."""
    from dataclasses import replace

    instrs = builder._instructions  # the builder's instruction list (same package)
    instrs[index] = replace(instrs[index], queue=core)


def all_reduce(dst: Any, src: Any, op: Any = "add", replica_group: Any = None, *, cc_core: int | None = None) -> None:
    """dst = op-reduction of `src` over the workers (see module doc)."""
    _emit(Opcode.ALL_REDUCE, dst, src, alu_name(op), replica_group, cc_core)


def all_gather(dst: Any, src: Any, replica_group: Any = None, *, cc_core: int | None = None) -> None:
    """dst = every worker's `src`, concatenated in rank order."""
    _emit(Opcode.ALL_GATHER, dst, src, None, replica_group, cc_core)


def reduce_scatter(
    dst: Any, src: Any, op: Any = "add", replica_group: Any = None, *, cc_core: int | None = None
) -> None:
    """dst = this worker's chunk of the op-reduction of `src` over the workers."""
    _emit(Opcode.REDUCE_SCATTER, dst, src, alu_name(op), replica_group, cc_core)


def all_to_all(dst: Any, src: Any, replica_group: Any = None, *, cc_core: int | None = None) -> None:
    """dst = chunk <this rank> of every worker's `src`, in rank order."""
    _emit(Opcode.ALL_TO_ALL, dst, src, None, replica_group, cc_core)


__all__ = ["ReplicaGroup", "all_gather", "all_reduce", "all_to_all", "reduce_scatter"]
