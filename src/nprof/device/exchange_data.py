"""The data of one collective moved between the processes of a job over a gloo group, with a traffic per process
that does not grow with the process count (except all-gather's, whose result is N contributions).

Contract: `exchange_collective(group, rank, world, opcode, op, payload, wait) -> np.ndarray` is this rank's
flat result, bit-identical to ``collectives.combine(opcode, op, contributions, sizes)[rank]``:

* all-reduce and reduce-scatter: a chain reduction in float64, in rank order. Rank 0 sends its contribution
  (as float64) to rank 1; rank r combines (`op`) what it received with its own contribution, in that order,
  and passes the partial result on; so the last rank holds ``((x0 op x1) op x2) ... op x_{N-1}``, exactly the
  order and precision of `combine` (the device model's: float64 in rank order, rounded once to the output
  dtype when written). The last rank then scatters N equal chunks (zero-padded); for reduce-scatter rank r
  keeps chunk r, for all-reduce the ranks all-gather the chunks. Each process sends and receives about twice
  its contribution in float64, whatever N (an all-gather of float64 contributions, as before, was N times).
* all-gather: torch.distributed ``all_gather`` of the contributions in their own dtype (bfloat16/float8 as
  their raw bits).
* all-to-all: N - 1 pairwise steps (step s: send chunk r + s to rank r + s, receive chunk r from rank r - s),
  in the contributions' dtype.
Sizes that `combine` refuses (reduce-scatter or all-to-all of a size that does not split into N chunks) raise
the same ValueError before anything is sent (every rank has the same sizes: the caller checked the headers).
`wait(work)` waits for one torch.distributed request (the caller's timeout and error); ranks are global
ranks of the job (the group spans the whole world).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from nprof.arch.isa import Opcode

_REDUCE = {"add": np.add, "maximum": np.maximum, "minimum": np.minimum, "multiply": np.multiply}
_WIRE = {np.dtype(t) for t in (np.float64, np.float32, np.float16, np.int32, np.int16, np.int8, np.uint8)}


def _to_wire(arr: np.ndarray) -> Any:
    """A torch tensor holding `arr` exactly (dtypes torch lacks, e.g. ml_dtypes' bfloat16: their bits)."""
    import torch

    flat = np.ascontiguousarray(arr).reshape(-1)
    if flat.dtype not in _WIRE:
        flat = flat.view(np.dtype(f"i{flat.dtype.itemsize}"))
    return torch.from_numpy(flat.copy())


def _from_wire(t: Any, like: np.dtype) -> np.ndarray:
    arr = t.numpy()
    return arr.view(like) if arr.dtype != like else arr


def _check_split(opcode: Opcode, size: int, world: int) -> None:
    if opcode in (Opcode.REDUCE_SCATTER, Opcode.ALL_TO_ALL) and size % world:
        what = "reduce-scatter" if opcode is Opcode.REDUCE_SCATTER else "all-to-all"
        raise ValueError(f"{what} of {size} elements does not split into {world} equal chunks")
    if opcode not in (Opcode.ALL_REDUCE, Opcode.REDUCE_SCATTER, Opcode.ALL_GATHER, Opcode.ALL_TO_ALL):
        raise ValueError(f"{opcode} is not a collective")


def exchange_collective(
    group: Any, rank: int, world: int, opcode: Opcode, op: str, payload: np.ndarray, wait: Callable[[Any], None]
) -> np.ndarray:
    """This rank's flat result of one collective (see module doc)."""
    flat = np.asarray(payload).reshape(-1)
    _check_split(opcode, flat.size, world)
    if opcode is Opcode.ALL_GATHER:
        return _all_gather(group, world, _to_wire(flat), wait, flat.dtype)
    if opcode is Opcode.ALL_TO_ALL:
        return _all_to_all(group, rank, world, flat, wait)
    fn = _REDUCE.get(op)
    if fn is None:
        raise ValueError(f"unsupported reduction op {op!r}; use one of {', '.join(sorted(_REDUCE))}")
    total = _chain_reduce(group, rank, world, flat.astype(np.float64), fn, wait)
    chunk = -(-flat.size // world)
    mine = _scatter_from_last(group, rank, world, total, chunk, wait)
    if opcode is Opcode.REDUCE_SCATTER:
        return mine
    import torch

    return _all_gather(group, world, torch.from_numpy(mine), wait, np.dtype(np.float64))[: flat.size]


def _chain_reduce(group: Any, rank: int, world: int, mine: np.ndarray, fn: Any, wait: Callable[[Any], None]) -> Any:
    """The rank-order reduction, held by the last rank (None elsewhere)."""
    import torch
    import torch.distributed as dist

    acc = mine
    if rank > 0:
        partial = torch.empty(mine.size, dtype=torch.float64)
        wait(dist.irecv(partial, src=rank - 1, group=group))
        acc = partial.numpy()
        fn(acc, mine, out=acc)
    if rank < world - 1:
        wait(dist.isend(torch.from_numpy(acc), dst=rank + 1, group=group))
        return None
    return acc


def _scatter_from_last(
    group: Any, rank: int, world: int, total: np.ndarray | None, chunk: int, wait: Callable[[Any], None]
) -> np.ndarray:
    """Chunk `rank` (of `chunk` elements) of the total the last rank holds."""
    import torch
    import torch.distributed as dist

    out = torch.empty(chunk, dtype=torch.float64)
    pieces = None
    if rank == world - 1:
        assert total is not None
        padded = np.zeros(chunk * world, dtype=np.float64)
        padded[: total.size] = total
        pieces = list(torch.from_numpy(padded).split(chunk))
    wait(dist.scatter(out, pieces, src=world - 1, group=group, async_op=True))
    return out.numpy()


def _all_gather(group: Any, world: int, tensor: Any, wait: Callable[[Any], None], like: np.dtype) -> np.ndarray:
    import torch
    import torch.distributed as dist

    out = [torch.empty_like(tensor) for _ in range(world)]
    wait(dist.all_gather(out, tensor, group=group, async_op=True))
    return np.concatenate([_from_wire(t, like) for t in out])


def _all_to_all(group: Any, rank: int, world: int, flat: np.ndarray, wait: Callable[[Any], None]) -> np.ndarray:
    """Chunk `rank` of every rank's contribution, in rank order (pairwise steps, see module doc)."""
    import torch.distributed as dist

    chunks = np.split(flat, world)
    result: list[np.ndarray] = [chunks[rank]] * world
    for step in range(1, world):
        dst, src = (rank + step) % world, (rank - step) % world
        incoming = _to_wire(chunks[src])  # a buffer of the right size and wire dtype
        sent = dist.isend(_to_wire(chunks[dst]), dst=dst, group=group)
        wait(dist.irecv(incoming, src=src, group=group))
        wait(sent)
        result[src] = _from_wire(incoming, flat.dtype)
    return np.concatenate(result)
