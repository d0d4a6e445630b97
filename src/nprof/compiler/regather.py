"""A load whose elements a kept SBUF tile holds on other partitions, moved across partitions on TensorE.

Contract: the fusion cache (`nprof.compiler.fusion`) serves a load from SBUF when a kept tile holds its
elements as a window (same partitions). When a producer kept a tensor in another partition layout — an
attention output [T, (B, C)] with the positions on partitions, read next as [(B, T), C] rows by a matmul; a
row-major [(B, T), C] embedding read as [T, (B, C)] by a broadcast add — the engines cannot move data across
partitions, but TensorE can: ``S.T @ kept`` with a 0/1 selection matrix S puts kept partition q on output
partition p wherever S[q, p] = 1. `regather(builder, a)` returns an fp32 SBUF tile holding exactly the HBM
pattern `a` when one kept contiguous tile holds every element of it such that each run of `a`'s innermost
free dims sits contiguous on one kept partition and the runs split into at most `MAX_GROUPS` groups (same run
index, same kept column, kept partition = output partition + a constant over a contiguous range of output
partitions): one matmul per group (S built by a GpSimdE iota and a VectorE compare, one per distinct shift,
at most `MAX_SELECTIONS`), accumulated in PSUM per run and copied to SBUF. Otherwise None (the caller DMAs
it), and None when the tensor may hold +-inf or NaN by construction (`builder.nonfinite`, filled by the
lowering from `nprof.compiler.finite`: a -inf mask from masked_fill/full/where, a constant holding inf).
Exact when every kept element in the contraction is finite: each output element receives exactly one kept
element times 1.0 plus finite x 0.0 = 0 terms (fp32 PSUM accumulation of exact products). A kept element that
is +-inf or NaN makes 0 x inf = NaN in every output element of its column in its matmul group, not only in
its own. A graph input holding inf at run time: a regather records in `builder.guard_inputs` the float inputs
whose inf would reach its tensor (`builder.input_taint`, `finite.taint`); the backend checks those inputs on
every call and runs a lowering with them marked non-finite when one is not finite. A value that becomes
non-finite at run time from finite inputs (an activation overflowing to inf): every float regather copies its
PSUM result out through `builder.check` (`nprof.compiler.regather_check`), which sums each row into a program
output; a non-finite sum makes the backend drop the run's results and run the graph lowered with
`builder.regathers` False (no regather at all), whose results are eager's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from nprof.arch.isa import Access, Space
from nprof.compiler.subtile import addresses
from nprof.nki.tensor import NkiTensor

MAX_GROUPS = 16  # matmuls one regather may take (~0.05 us each, vs a DMA's ~2 us on the critical path)
MAX_SELECTIONS = 8  # distinct selection matrices it may build (an iota and a compare each, ~0.15 us)
MAX_RUN = 512  # elements of a run (one PSUM bank of fp32)
# Runs of a single element (a CNN's per-channel columns) are left to DMAs: they moved the resnet18-shaped zoo
# model's loss 7.5% off eager while main's conv_strided evicted stale PSUM values (fixed in main 9e961b9; with
# the fix the zoo model trains right with them too), and their effect on the CNN benches is not measured yet.
# Attention layouts move runs of 16..64 elements.
MIN_RUN = 2


def _trailing_run(a: Access) -> int:
    """Elements of the innermost free dims of `a` that merge into one run of consecutive HBM elements."""
    if not a.free:
        return 1
    stride, run = a.free[-1]
    if stride != 1:
        return run
    for outer_stride, size in reversed(a.free[:-1]):
        if outer_stride != run:
            break
        run *= size
    return run


def _nonfinite(builder: Any, a: Access) -> bool:
    """May `a`'s tensor hold +-inf or NaN by construction (a 0 x inf = NaN in the selection matmul), or does the
    lowering forbid regathers (`FusingBuilder.regathers` False: the program the backend runs when a check of
    the regathering one failed)?"""
    return a.tensor in getattr(builder, "nonfinite", ()) or not getattr(builder, "regathers", True)


def _check(builder: Any, a: Access) -> Any:
    """The builder's `regather_check.RegatherCheck` when `a` is a float pattern (integers and booleans are
    always finite), else None."""
    return getattr(builder, "check", None) if a.dtype in ("float32", "bfloat16", "float16") else None


def kept_positions(key: Access, a: Access) -> tuple[np.ndarray, np.ndarray] | None:
    """(kept partition, kept free index) of every element of `a` ([P, F]) in a tile holding `key`, or None."""
    flat = addresses(key).ravel()
    order = np.argsort(flat, kind="stable")
    table = flat[order]
    want = addresses(a)
    pos = np.minimum(np.searchsorted(table, want), table.size - 1)
    if not np.array_equal(table[pos], want):
        return None
    per = max(1, key.free_elements)
    return np.divmod(order[pos], per)


def matmul_groups(q: np.ndarray, f: np.ndarray, run: int) -> list[tuple[int, int, int, int, int]] | None:
    """The matmul groups (run index o, kept column, first output partition, end, kept partition of the first)
    of the positions `q`, `f` ([P, O * run]), or None when they do not split so."""
    parts = q.shape[0]
    q3, f3 = q.reshape(parts, -1, run), f.reshape(parts, -1, run)
    if not (q3 == q3[:, :, :1]).all() or not (np.diff(f3, axis=2) == 1).all():
        return None  # a run is not contiguous on one kept partition
    groups = []
    for o in range(q3.shape[1]):
        qs, fs = q3[:, o, 0], f3[:, o, 0]
        p0 = 0
        for p in range(1, parts + 1):
            if p < parts and fs[p] == fs[p0] and qs[p] - p == qs[p0] - p0:
                continue
            groups.append((o, int(fs[p0]), p0, p, int(qs[p0])))
            p0 = p
            if len(groups) > MAX_GROUPS:
                return None
    if len({(p1 - p0, q0, p0) for _, _, p0, p1, q0 in groups}) > MAX_SELECTIONS:
        return None
    return groups


def regather(builder: Any, a: Access) -> NkiTensor | None:
    """The SBUF tile of `a` moved across partitions from a kept tile (see module doc), or None."""
    run = _trailing_run(a)
    if a.partitions > builder.preset.pmax or not MIN_RUN <= run <= MAX_RUN or _nonfinite(builder, a):
        return None
    for key, tile in builder.kept_covering(a):
        flat = tile.flatten_free()
        if flat is None:
            continue
        found = kept_positions(key, a)
        groups = matmul_groups(*found, run) if found is not None else None
        if groups is None:
            continue
        guards = getattr(builder, "guard_inputs", None)
        if guards is not None:  # the runtime runs a program without this regather when one of these holds inf
            guards.update(builder.input_taint.get(a.tensor, ()))
        return _build(flat, a, groups, run, _check(builder, a))
    return None


BAND_NAME = "const.selection_band"  # the name the fusion cache keeps the selection band under (never in HBM)


def _selection(rows: int, kept_lo: int, p0: int, p1: int, parts: int) -> NkiTensor:
    """S [rows, parts] on kept partitions kept_lo.. (rows of them): S[k, m] = 1 iff m = p0 + k < p1, i.e.
    m = k - shift with shift = kept_lo - p0 over the whole [kept_lo + rows, parts] matrix. Every such S is a
    window of one band B [pmax, 3 * pmax], B[k, j] = 1 iff j = k + pmax: S = B[kept_lo : kept_lo + rows,
    pmax + shift : pmax + shift + parts] (|shift| < pmax, parts <= pmax). The band is built once per program
    (a GpSimdE iota and a compare) and kept by the fusion cache under a name no HBM tensor has, so nothing
    invalidates it (an eviction only means building it again): one iota per program instead of one per
    regather, off the GpSimdE queue of the later regathers."""
    from nprof.nki import isa as nisa
    from nprof.nki import language as nl
    from nprof.nki import trace

    builder = trace.current()
    pmax = builder.preset.pmax
    shift = kept_lo - p0
    key = Access(Space.HBM, BAND_NAME, "float32", 0, pmax, ((1, 3 * pmax),), 0, 3 * pmax)
    lookup, remember = getattr(builder, "lookup", None), getattr(builder, "remember", None)
    band = lookup(key) if lookup is not None else None
    if band is None:
        ramp = nisa.iota(nl.arange(pmax)[:, None] * -1 + nl.arange(3 * pmax)[None, :] - pmax, dtype=nl.float32)
        band = nisa.tensor_scalar(ramp, "is_equal", 0.0)
        if remember is not None:
            remember(key, band, stored=False)
    return band[kept_lo : kept_lo + rows, pmax + shift : pmax + shift + parts]


def _build(
    kept: NkiTensor, a: Access, groups: list[tuple[int, int, int, int, int]], run: int, check: Any = None
) -> NkiTensor:
    """Run the groups' matmuls: the [P, O * run] result in SBUF, shaped as `a` (each PSUM run copied out by
    `check.evacuate`, which also checks it, when `check` is given)."""
    from nprof.compiler.kernels import engines
    from nprof.nki import isa as nisa
    from nprof.nki import language as nl

    parts = a.partitions
    runs = max(o for o, *_ in groups) + 1
    res = nl.ndarray((parts, runs * run), dtype=nl.float32, buffer=nl.sbuf)
    selections: dict[tuple[int, int, int], NkiTensor] = {}  # one per partition shift, shared by the runs
    for o in range(runs):
        acc = nl.ndarray((parts, run), dtype=nl.float32, buffer=nl.psum)
        mine = [g for g in groups if g[0] == o]
        for i, (_, col, p0, p1, q0) in enumerate(mine):
            stationary = selections.get((p1 - p0, q0, p0))
            if stationary is None:
                stationary = selections[(p1 - p0, q0, p0)] = _selection(p1 - p0, q0, p0, p1, parts)
            moving = kept[q0 : q0 + (p1 - p0), col : col + run]
            if i == 0:
                acc[...] = nisa.nc_matmul(stationary, moving)
            else:
                acc += nisa.nc_matmul(stationary, moving)
        if check is not None:
            check.evacuate(acc, res[:, o * run : (o + 1) * run])
        else:
            engines.copy(acc, dst=res[:, o * run : (o + 1) * run])
    sizes = tuple(size for _, size in a.free)
    return res.unflatten_free(sizes) if len(sizes) > 1 else res


def assemble(builder: Any, a: Access) -> NkiTensor | None:
    """The SBUF tile of a row pattern `a` ([P, (1, F)]) whose column segments kept tiles hold (each a window of
    one, or moved across partitions by `regather`: the pieces of a concatenation its producer left in SBUF),
    copied side by side into one tile; None unless F splits into 2..`MAX_PIECES` equal segments so served."""
    from nprof.compiler.kernels import engines
    from nprof.nki import language as nl

    if len(a.free) != 1 or a.free[0][0] != 1 or a.partitions > builder.preset.pmax:
        return None
    width = a.free[0][1]
    for pieces in range(2, MAX_PIECES + 1):
        if width % pieces:
            continue
        seg = width // pieces
        parts = [dataclasses.replace(a, offset=a.offset + k * seg, free=((1, seg),)) for k in range(pieces)]
        if not all(builder.holds(p) or _regatherable(builder, p) for p in parts):
            continue
        res = nl.ndarray((a.partitions, width), dtype=nl.float32, buffer=nl.sbuf)
        for k, part in enumerate(parts):
            tile = builder.lookup(part)
            if tile is None:
                tile = regather(builder, part)
            if tile is None:
                return None  # cannot happen: checked above (an eviction in between would refuse here)
            engines.copy(tile, dst=res[:, k * seg : (k + 1) * seg])
        return res
    return None


MAX_PIECES = 4


def _regatherable(builder: Any, a: Access) -> bool:
    """Would `regather` serve `a` (without emitting anything)?"""
    run = _trailing_run(a)
    if a.partitions > builder.preset.pmax or not MIN_RUN <= run <= MAX_RUN or _nonfinite(builder, a):
        return False
    for key, tile in builder.kept_covering(a):
        if tile.flatten_free() is None:
            continue
        found = kept_positions(key, a)
        if found is not None and matmul_groups(*found, run) is not None:
            return True
    return False

