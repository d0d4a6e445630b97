"""The tiling an elementwise or reduction kernel follows: the one its operands' producers stored them with.

Contract: a kernel whose operands were just written by other kernels reads them from SBUF (the fusion cache,
`nprof.compiler.fusion`) only when it asks for exactly the patterns, or windows of the tiles, they were
stored as. `tiles_for` picks, among the tilings the producers used (`FusingBuilder.tiling`) and the
kernel's own default, the one needing the fewest DMAs; `split_dims` splits a dim in two so that a
producer's blocked layout (rows on partitions in blocks) becomes boxes `nprof.compiler.views.retile` can
follow. Neither changes numerics: they choose only which tiles a kernel works on.
"""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Access
from nprof.compiler.extents import numel_of
from nprof.compiler.fusion import FusingBuilder


def tiles_for(out: Any, views: list[Any], fallback: list[Any] | None = None, periodic: bool = False
              ) -> list[Any] | None:  # fmt: skip
    """TileSpecs for an elementwise kernel writing View `out` from `views` (all broadcast to out.shape): among
    the tilings with which the producers of whole contiguous operands stored them (so their tiles are still
    in SBUF) and `fallback`, the one needing the fewest DMAs (operand loads not held in SBUF, plus stores of
    a non-internal output), the earlier on ties; None when there is no candidate. `periodic`: the kernel
    replicates operands that repeat along the partitions (`views.retile`)."""
    from nprof.compiler.views import retile
    from nprof.nki import trace

    builder = trace.current()
    if not isinstance(builder, FusingBuilder) or not builder.fusing:
        return fallback
    strides = [out.strides, *(v.strides for v in views)]
    candidates = []
    for v in views:
        decl = builder.tensors().get(v.tensor)
        if decl is None or v.offset != 0 or not v.is_contiguous or numel_of(decl.shape) != numel_of(v.shape):
            continue
        accesses = builder.tiling(v.tensor, tuple(v.shape))
        specs = retile(accesses, *split_dims(accesses, v.shape, strides), periodic=periodic) if accesses else None
        if specs is not None:
            candidates.append(specs)
    if fallback is not None:
        candidates.append(fallback)
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    kept_out = builder.tensors()[out.tensor].kind == "internal"

    def dmas(specs: list[Any]) -> int:
        loads = sum(not builder.holds(spec.access(k, v)) for spec in specs for k, v in enumerate(views, 1))
        return loads + (0 if kept_out else len(specs))

    return min(candidates, key=dmas)


def split_dims(accesses: list[Access], shape: Any, strides: list[Any]) -> tuple[list[int], list[tuple[int, ...]]]:
    """`shape` and the operands' `strides` with a dim split in two wherever a run of `accesses` (patterns on
    a contiguous tensor of that shape) steps by a multiple f of its contiguous stride below the next dim's:
    blocks of f rows on partitions (`kernels.norm_spread`'s layout) are then boxes `views.retile` follows.
    The same elements at the same offsets, for every operand."""
    from nprof.compiler.views import contiguous_strides

    shape, strides = [int(n) for n in shape], [list(st) for st in strides]
    steps = {st for a in accesses for st, n in ((a.partition_stride, a.partitions), *a.free) if n > 1 and st > 0}
    for step in sorted(steps, reverse=True):
        cs = contiguous_strides(shape)
        if step in cs:
            continue
        d = next((i for i in range(len(shape)) if cs[i] < step and (i == 0 or step < cs[i - 1])), None)
        if d is None or step % cs[d] or shape[d] % (step // cs[d]):
            continue
        f = step // cs[d]
        shape[d : d + 1] = [shape[d] // f, f]
        for st in strides:
            st[d : d + 1] = [st[d] * f, st[d]]
    return shape, [tuple(st) for st in strides]
