"""TensorE tiling mode in the timing model: matmuls on disjoint tiles of the PE array run at the same time.

Public source: AWS's NKI API reference, `nki.isa.nc_matmul`, "Tiling mode": "Tensor Engine supports both row
and column tiling modes, which allow multiple nc_matmul instructions with a stationary tile size smaller than
[128, 128] to run in parallel to improve hardware utilization" (rows and columns sliced into 64s from
NeuronCore-v2, 32s from NeuronCore-v3). The kernel side (`nprof.nki.pe_tiling`) checks the tile and tags the
instruction pair with the attr `pe_tile="start_row,start_column,row_size,column_size"`.

The rule (stated model, AWS publishes no timing detail): the 128 x 128 array is 16 quadrants of 32 x 32 PEs; a
MATMUL occupies the quadrants of its tile (no tag, or a TRANSPOSE: all 16) from its start to its end, and
waits until every quadrant it needs is free. Concretely, in program order (TensorE runs in order), a MATMUL's
`prev` on the tensor.moving track is the latest earlier MATMUL/TRANSPOSE sharing a quadrant with it (none: it
may overlap everything before it), and the other latest users of its quadrants become TensorE dependencies
(no latency between TensorE instructions, `device.schedule`). Its duration is the one of `arch.cost` (the
moving tensor streams through the tile as through the whole array). Weight loads keep their one track: a
tiled matmul loads its own weights every time (`nprof.nki.pending`), which may start once the matmul before
it has started, so tiled matmuls start at least one weight load apart (in-order issue).
"""

from __future__ import annotations

import numpy as np

QUADRANT = 32  # rows (and columns) of PEs per quadrant: the smallest tile (NeuronCore-v3)
PER_SIDE = 4  # quadrants per side of the 128 x 128 array
FULL = (1 << PER_SIDE * PER_SIDE) - 1


def tile_mask(tag: object) -> int:
    """The quadrant bit mask (bit row * 4 + column) of a `pe_tile` attr "start_row,start_column,rows,columns";
    0 (the whole array) for no tag."""
    if not isinstance(tag, str) or not tag:
        return 0
    row, col, rows, cols = (int(v) // QUADRANT for v in tag.split(","))
    mask = 0
    for r in range(row, row + max(rows, 1)):
        for c in range(col, col + max(cols, 1)):
            mask |= 1 << (r * PER_SIDE + c)
    return mask


def tile_links(prev: np.ndarray, offsets: np.ndarray, flat: np.ndarray, moving: np.ndarray,
               mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(prev, deps offsets, deps flat) with the tensor.moving links of the module doc: `prev` of each MATMUL /
    TRANSPOSE is the latest earlier one sharing a quadrant (n: none), the other latest users of its quadrants
    are added to its dependencies. `moving`: the instructions on tensor.moving (not elided); `mask` per
    instruction: `tile_mask` (0: the whole array)."""
    n = len(prev)
    out = prev.copy()
    last = [-1] * (PER_SIDE * PER_SIDE)
    extra: dict[int, list[int]] = {}
    for i in np.flatnonzero(moving).tolist():
        m = int(mask[i]) or FULL
        quads = [q for q in range(PER_SIDE * PER_SIDE) if m >> q & 1]
        users = sorted({last[q] for q in quads if last[q] >= 0})
        out[i] = users[-1] if users else n
        if len(users) > 1:
            extra[i] = users[:-1]
        for q in quads:
            last[q] = i
    if not extra:
        return out, offsets, flat
    lists = [list(flat[offsets[i] : offsets[i + 1]]) for i in range(n)]
    for i, more in extra.items():
        lists[i] = sorted(set(lists[i]) | set(more))
    new_offsets = np.zeros(n + 1, np.int64)
    np.cumsum([len(x) for x in lists], out=new_offsets[1:])
    new_flat = np.fromiter((d for x in lists for d in x), np.int64, int(new_offsets[-1]))
    return out, new_offsets, new_flat
