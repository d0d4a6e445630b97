"""The host (CPU) side of a Chrome trace's rows: nesting, FLOPs, bytes read, context and op paths.

Contract (used by `chrome_rows.build_profile`, in this order): `host_slices` nests the host ops per
track; `own_flops` gives each op its formula's FLOPs and marks the ops enclosing one (innermost
wins); `attribute_flops` and `read_bytes` give FLOPs and input bytes to the rows of the work level
(`chrome_tree.select_work`); `row_info` their layer, source line and iteration, a backward row taking
its forward op's; `Paths` their op paths (the ancestors' names, outer first).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not

import numpy as np

from nprof.capture.chrome_events import ABSENT, ArgColumns
from nprof.capture.chrome_nest import fold_down, nearest_marked
from nprof.capture.chrome_tree import Context, nest
from nprof.capture.opclass import engine_of, input_bytes, op_flops

_BWD = "autograd::engine::evaluate_function: "
# host slices from which `Paths.parent_paths` folds every path down the tree (measured, CPU: 0.53 ms by the
# loop, 0.66 by the fold on mlp8 of bench/chrome_import.py, 2.5 k host slices; 3.6 and 2.0 on mlp32.cuda, 12 k)
FOLD_FROM = 8192


def opcode(name: str) -> str:
    return name[len(_BWD) :] if name.startswith(_BWD) else name


@dataclass
class Host:
    """The host slices (kind 2) nested per track; `par` is `parent` as a list, -1 at a root."""

    idx: np.ndarray
    names: list[str]
    args: ArgColumns
    order: np.ndarray
    parent: np.ndarray
    par: Sequence[int]  # an int64 array: 8 bytes a slice, not a list of int objects
    start: np.ndarray
    end: np.ndarray
    dur: np.ndarray
    track: np.ndarray
    bwd_of: list[int]  # nearest evaluate_function ancestor-or-self, -1 if none
    any_bwd: bool


def int64_array(values: np.ndarray) -> array[int]:
    """`values` as an array.array of int64: indexed and iterated like `values.tolist()` (Python ints), at 8
    bytes an item instead of a list's 8 plus an int object's 28 (the import's peak memory)."""
    out = array("q")
    out.frombytes(np.ascontiguousarray(values, dtype=np.int64).tobytes())
    return out


def host_slices(
    names: list[str],
    args: ArgColumns,
    host: np.ndarray,
    track: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
) -> Host:
    """The host slices (trace indices `host`; per-slice columns of the whole trace) nested per track, each
    with its nearest backward (evaluate_function) node."""
    h_names = list(map(names.__getitem__, host.tolist()))
    h_args = args.take(int64_array(host))
    order, parent, h_end = nest(track[host], start[host], end[host])
    h_start = start[host]
    par_l = int64_array(parent)
    is_bwd = list(map(str.startswith, h_names, repeat(_BWD)))
    bwd_of = nearest_marked(parent, np.asarray(is_bwd, dtype=bool)).tolist() if any(is_bwd) else [-1] * len(host)
    return Host(
        host, h_names, h_args, order, parent, par_l, h_start, h_end, h_end - h_start, track[host], bwd_of, any(is_bwd)
    )


def own_flops(h: Host) -> tuple[list[int], list[bool]]:
    """(own, has_inner) per host slice: the FLOPs of its own formula (0 without one, memoised on name and
    shapes), and whether an op with a formula lies inside it (then the inner op counts: innermost wins,
    aten::linear > aten::addmm -> addmm)."""
    own = [0] * len(h.names)
    flops_memo: dict[tuple[str, int, int], int] = {}
    tensor_names = {nm for nm in set(h.names) if engine_of(nm) == "tensor"}
    dims, conc = h.args.raw("Input Dims"), h.args.raw("Concrete Inputs")
    candidates = compress(range(len(h.names)), map(tensor_names.__contains__, h.names))
    for i in [i for i in candidates if dims[i] is not ABSENT]:
        nm, c = h.names[i], None if conc[i] is ABSENT else conc[i]
        key = (nm, id(dims[i]), id(c))  # the values outlive the memo; equal texts share one (chrome_fast)
        got = flops_memo.get(key)
        if got is None:
            got = flops_memo[key] = op_flops(nm, dims[i], c)
        own[i] = got
    has_inner = [False] * len(h.names)
    for i in [j for j, f in enumerate(own) if f > 0]:
        p = h.par[i]
        while p >= 0 and not has_inner[p]:
            has_inner[p] = True
            p = h.par[p]
    return own, has_inner


def attribute_flops(
    h: Host, own: list[int], has_inner: list[bool], emitted: list[int], own_l: list[int]
) -> tuple[np.ndarray, Counter[str]]:
    """(FLOPs per host slice, FLOPs per input dtype): each counted op (innermost with a formula) gives its
    FLOPs once, to the emitted row that owns it or, above the work level, to its first emitted descendant."""
    flops = np.zeros(len(h.names), dtype=np.int64)
    dtype_weight: Counter[str] = Counter()
    in_types = h.args.raw("Input type")
    carrier = flop_carriers(h, own, emitted, own_l)
    for i in [j for j, f in enumerate(own) if f > 0 and not has_inner[j]]:
        o = own_l[i] if own_l[i] >= 0 else carrier.get(i, -1)
        if o < 0:
            continue
        flops[o] += own[i]
        types = [t for t in (in_types[i] or []) if t and t != "Scalar"]
        if types:
            dtype_weight[str(types[0])] += own[i]
    return flops, dtype_weight


def flop_carriers(h: Host, own: list[int], emitted: list[int], own_l: list[int]) -> dict[int, int]:
    """Counted op above the work level (nearest FLOP-carrying strict ancestor of an emitted row, itself not
    owned by a row) -> its first emitted descendant (earliest start, then lowest index)."""
    em = np.asarray(emitted, dtype=np.int64)
    if not len(em):
        return {}
    flop_anc = nearest_marked(h.parent, np.asarray(own) > 0)
    p = h.parent[em]
    a = np.where(p >= 0, flop_anc[np.maximum(p, 0)], -1)
    keep = a >= 0
    keep[keep] = np.asarray(own_l)[a[keep]] < 0
    em, a = em[keep], a[keep]
    o = np.lexsort((em, h.start[em], a))
    first = np.concatenate([[True], a[o][1:] != a[o][:-1]]) if len(o) else np.zeros(0, bool)
    return dict(zip(a[o][first].tolist(), em[o][first].tolist(), strict=True))


def row_info(h: Host, ctx: Context, rows: np.ndarray) -> dict[int, tuple[str | None, str | None, int]]:
    """(layer, source, iteration) of each emitted host row from its innermost context; a backward row takes
    the layer and source of the forward op that created its autograd node (same sequence number)."""
    r_ctx = ctx.innermost(h.track[rows], h.start[rows], h.end[rows])
    per_ctx = {c: ctx.info(c)[:3] for c in set(r_ctx)}  # rows share their context slices
    info_of: dict[int, tuple[str | None, str | None, int]] = dict(
        zip(rows.tolist(), map(per_ctx.__getitem__, r_ctx), strict=True)
    )
    if not h.any_bwd:
        return info_of
    seq = h.args.raw("Sequence number")
    bwd_of = np.asarray(h.bwd_of, dtype=np.int64)
    numbered = np.fromiter(map(is_not, seq, repeat(ABSENT)), dtype=bool, count=len(seq))
    seq_idx = np.flatnonzero((bwd_of < 0) & numbered).tolist()  # forward ops that created autograd nodes
    seq_ctx = ctx.innermost(h.track[seq_idx], h.start[seq_idx], h.end[seq_idx])
    seq_info = {c: ctx.info(c)[:2] for c in set(seq_ctx)}
    numbers, infos = list(map(seq.__getitem__, seq_idx)), list(map(seq_info.__getitem__, seq_ctx))
    fwd = dict(zip(reversed(numbers), reversed(infos), strict=True))  # the first op of a sequence number wins
    for r in rows[bwd_of[rows] >= 0].tolist():
        b = h.bwd_of[r]
        if b >= 0 and (f := fwd.get(None if seq[b] is ABSENT else seq[b])) is not None:
            layer, source, iteration = info_of[r]
            info_of[r] = (f[0] or layer, f[1] or source, iteration)
    return info_of


class Paths:
    """Op paths of host slices: the names of a slice's ancestors and itself, outer first, repeats collapsed
    (`path`: one slice, memoised up its ancestors; `parent_paths`: many, by `chrome_nest.fold_down`)."""

    def __init__(self, h: Host) -> None:
        self._names, self._par = h.names, h.par
        self._memo: dict[int, str] = {}
        self._folded: tuple[np.ndarray, list[str]] | None = None

    def path(self, r: int) -> str:
        """The op path of host slice r, itself included."""
        memo, par = self._memo, self._par
        got = memo.get(r)
        if got is not None:
            return got
        up = []  # r and its ancestors up to the first with a path (a loop: no recursion per level)
        node = r
        while node >= 0 and node not in memo:
            up.append(node)
            node = par[node]
        above = memo[node] if node >= 0 else None
        for node in reversed(up):
            above = _joined(above, opcode(self._names[node]))
            memo[node] = above
        return above  # type: ignore[return-value]

    def parent_paths(self, slices: list[int]) -> list[str | None]:
        """`chain(r, False)` for each host slice r of `slices` (None for -1): from FOLD_FROM host slices, the op
        paths of every slice folded down the tree at once (`_joined` once per distinct (parent path, op name));
        below, `path` per distinct parent (faster there, and it touches no more of numpy's code pages)."""
        if len(self._names) < FOLD_FROM:
            parents = [self._par[r] if r >= 0 else -1 for r in slices]
            memo = {p: self.path(p) if p >= 0 else None for p in set(parents)}
            return list(map(memo.__getitem__, parents))
        par = np.asarray(self._par, dtype=np.int64)
        if not len(par):
            return [None] * len(slices)
        if self._folded is None:
            ops: dict[str, int] = {}
            label = {nm: ops.setdefault(opcode(nm), len(ops)) for nm in dict.fromkeys(self._names)}
            labels = np.fromiter(map(label.__getitem__, self._names), np.int64, len(self._names))
            op_names = list(ops)
            self._folded = fold_down(par, labels, lambda above, k: _joined(above, op_names[k]))
        codes, values = self._folded
        s = np.asarray(slices, dtype=np.int64)
        p = np.where(s >= 0, par[np.maximum(s, 0)], -1)
        table: list[str | None] = [*values, None]  # code -1: None
        return list(map(table.__getitem__, np.where(p >= 0, codes[np.maximum(p, 0)], -1).tolist()))

    def chain(self, r: int, include_self: bool) -> str | None:
        """The op path of host slice r, or of its parent (None at a root) without include_self."""
        if include_self:
            return self.path(r)
        return self.path(self._par[r]) if self._par[r] >= 0 else None


def _joined(above: str | None, name: str) -> str:
    """The op path of a slice named `name` (an opcode) under the path `above` (None at a root)."""
    if above is None:
        return name
    return above if above.endswith(name) and above.rsplit(" > ", 1)[-1] == name else f"{above} > {name}"


def host_read_bytes(h_args: ArgColumns, parent: np.ndarray, emitted: list[int], own_l: list[int]) -> np.ndarray:
    """Estimated memory reads per host slice, on emitted rows only: a row's own input bytes, or, for a
    row without shapes (a runtime call), those of its nearest shaped ancestor above the work level
    (given once, to its first emitted descendant). Caches are ignored: an upper bound of DRAM reads.
    (`python_read_bytes` in tests/capture/test_chrome_core.py is the plain loop this vectorises.)"""
    out = np.zeros(len(h_args), dtype=np.int64)
    dims, types = h_args.raw("Input Dims"), h_args.raw("Input type")
    em = np.asarray(emitted, dtype=np.int64)
    if not len(em) or "Input Dims" not in h_args.present_keys():
        return out
    shaped = np.fromiter(map(is_not, dims, repeat(ABSENT)), dtype=bool, count=len(dims))
    src = nearest_marked(parent, shaped)[em]  # nearest shaped ancestor-or-self
    own = np.asarray(own_l, dtype=np.int64)
    inherited = (src >= 0) & (src != em)
    inherited[inherited] = own[src[inherited]] < 0  # an ancestor above the work level
    first = np.flatnonzero(inherited)
    first = first[np.unique(src[first], return_index=True)[1]]  # its first emitted descendant takes it
    take = np.flatnonzero((src >= 0) & (src == em))
    rows = np.concatenate([em[take], em[first]])
    srcs = np.concatenate([src[take], src[first]]).tolist()
    # one input_bytes per distinct (Input Dims, Input type) objects: the values outlive the keys, and equal
    # texts share one value (chrome_fast)
    keys = list(zip(map(id, map(dims.__getitem__, srcs)), map(id, map(types.__getitem__, srcs)), strict=True))
    one = dict(zip(keys, srcs, strict=True))  # a slice of each key
    value = {key: input_bytes(h_args.row(s)) for key, s in one.items()}
    out[rows] = np.fromiter(map(value.__getitem__, keys), dtype=np.int64, count=len(keys))
    return out
