"""Nesting of Chrome-trace slices: which slices become profile rows, and their context.

Chrome-trace slices on one thread nest (``aten::linear`` contains ``aten::t``
and ``aten::addmm``, which contains ``aten::copy_``...). A profile track must be
a sequence of non-overlapping rows, FLOPs must be counted once and engine busy
time must mean something, so:

* `nest` computes each slice's parent (the innermost slice of the same track
  containing it; a host op that overruns its parent is clamped to the parent's end, a
  context slice that does is not its child: `clamp`); `chrome_nest` vectorises it;
* `select_work` picks the *work level*: walking down from the top, a slice is
  emitted as one row when it is a leaf or when its own (self) time is at least
  half of its duration (its children are then absorbed into it: bookkeeping such
  as ``aten::copy_`` inside ``aten::addmm``); otherwise its children are visited
  and the parent's self time stays a gap (dispatcher / Python overhead). Callers
  may force or forbid slices: the importer forces FLOP-carrying ops and forbids
  the ops enclosing them, so matmul rows do not depend on timing noise. The
  emitted rows of a track never overlap and cover all the time spent in ops
  except that overhead;
* `flow_deps` binds flow events (s/t/f) to rows and chains them into dependencies;
* `Context` answers, for a row, the enclosing context slices (python_function,
  user_annotation): module path (``layer``), innermost user source line and
  ``ProfilerStep#N`` iteration.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Sequence
from itertools import repeat
from operator import eq, ne
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from nprof.capture.chrome_nest import TRACK_SHIFT, first_marked, vector_nest
from nprof.compiled import load_compiled

_PY_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
_UNSEEN = object()
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NOT_USER = ("site-packages", "dist-packages", "/lib/python3", "\\lib\\python3", "\\Lib\\")
_NPROF_DIR = str(Path(__file__).resolve().parent.parent)
# torch's Python tracer writes library files relative to their sys.path entry ("torch/nn/modules/linear.py")
_LIBRARIES = frozenset(sys.stdlib_module_names) | {
    "torch", "torchvision", "torchaudio", "functorch", "triton", "numpy", "scipy", "transformers", "accelerate",
    "deepspeed", "megatron", "apex", "lightning", "pytorch_lightning", "timm", "diffusers", "datasets", "peft",
    "tokenizers", "xformers", "einops", "fairscale", "torchmetrics", "sklearn", "jax", "flax", "nprof", "_pytest",
    "pytest", "pluggy", "typing_extensions", "tqdm",
}  # fmt: skip


# Slices from which a process loads the compiled passes (`chrome_core`): loading numba costs ~0.5 s CPU once
# per process, the vectorised passes (`chrome_nest`) ~0.3 us per slice. All give identical results, so the
# switch changes nothing.
COMPILED_FROM = 2_000_000


def compiled_core(n: int) -> ModuleType | None:
    """`chrome_core` for `n` slices, or None (small traces before it is loaded, or numba not installed)."""
    return load_compiled("nprof.capture.chrome_core", n, COMPILED_FROM)


def nest(
    track: np.ndarray, start: np.ndarray, end: np.ndarray, core: ModuleType | None = None, clamp: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (order, parent, clamped end): order sorts by (track, start, -duration), parents come first.
    A slice ending after its innermost open slice is clamped to that slice's end (`clamp`, host ops: rows
    never overlap), or (`clamp=False`, context slices: a ProfilerStep annotation opened inside a short Python
    frame) is not its child: it nests in the innermost open slice containing it. `core`: the compiled
    passes to use (default: `compiled_core(len(start))`; without them the vectorised
    `chrome_nest.vector_nest`, or the loop when a slice overruns)."""
    n = len(start)
    order = np.lexsort((start - end, start, track)) if n else np.zeros(0, dtype=np.int64)
    core = core or compiled_core(n)
    if core is not None:
        args = (track, start, end)
        cols = (np.ascontiguousarray(a, np.int64) for a in args)
        parent, end_c = core.nest_pass(order.astype(np.int64), *cols, clamp)
        return order, parent, end_c
    got = vector_nest(order, track, start, end) if clamp else None  # context slices: overruns are the rule
    return (order, *got) if got is not None else (order, *python_nest(order, track, start, end, clamp))


def python_nest(
    order: np.ndarray, track: np.ndarray, start: np.ndarray, end: np.ndarray, clamp: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(parent, clamped end) of `nest` by a plain stack loop (the reference of `chrome_core.nest_pass`)."""
    n = len(start)
    parent = np.full(n, -1, dtype=np.int64)
    end_out = end.copy()
    trk_l, st_l, en_l = track.tolist(), start.tolist(), end_out.tolist()
    par_l = parent.tolist()
    stack: list[int] = []
    prev = None
    for i in order.tolist():
        t = trk_l[i]
        s = st_l[i]
        if t != prev:
            stack.clear()
            prev = t
        while stack and (en_l[stack[-1]] <= s or (not clamp and en_l[stack[-1]] < en_l[i])):
            stack.pop()
        if stack:
            p = stack[-1]
            par_l[i] = p
            if en_l[i] > en_l[p]:  # only when clamping
                en_l[i] = en_l[p]
        stack.append(i)
    return np.asarray(par_l, dtype=np.int64), np.asarray(en_l, dtype=np.int64)


def select_work(
    order: np.ndarray,
    parent: np.ndarray,
    duration: np.ndarray,
    force: np.ndarray | None = None,
    never: np.ndarray | None = None,
    core: ModuleType | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (emitted mask, owner): owner[i] = the emitted ancestor-or-self of slice i, or -1.

    `force` marks slices that are rows whatever their timing (when no ancestor is one), `never`
    those that are never rows (their children are visited), e.g. an op enclosing a FLOP op. `core`: the
    compiled passes to use (default: `compiled_core(len(parent))`)."""
    n = len(parent)
    child_sum = np.zeros(n, dtype=np.int64)
    has_child = np.zeros(n, dtype=bool)
    inner = parent >= 0
    np.add.at(child_sum, parent[inner], duration[inner])
    has_child[parent[inner]] = True
    candidate = (~has_child) | (2 * (duration - child_sum) >= duration)
    if never is not None:
        candidate &= ~never
    if force is not None:
        candidate |= force
    core = core or compiled_core(n)
    if core is not None:
        return core.work_pass(order.astype(np.int64), parent.astype(np.int64), candidate)
    owner = first_marked(parent.astype(np.int64), candidate)  # = `python_work` (the reference loop)
    return owner == np.arange(n), owner


def python_work(order: np.ndarray, parent: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(emitted, owner) of `select_work` by a plain top-down loop (the reference of `chrome_core.work_pass`)."""
    n = len(parent)
    cand_l = candidate.tolist()
    par_l = parent.tolist()
    owner = [-1] * n
    emitted = [False] * n
    for i in order.tolist():
        p = par_l[i]
        up = owner[p] if p >= 0 else -1
        if up >= 0:
            owner[i] = up
        elif cand_l[i]:
            emitted[i] = True
            owner[i] = i
    return np.asarray(emitted, dtype=bool), np.asarray(owner, dtype=np.int64)


@functools.lru_cache(maxsize=65536)  # a trace repeats its frames every step
def user_frame(name: str) -> str | None:
    """`file.py:line` for a python_function slice name `file.py(line): func` in user code, else None."""
    m = _PY_FRAME.match(name)
    if not m:
        return None
    path = m.group(1)
    if path.startswith(("<", _NPROF_DIR)) or any(mark in path for mark in _NOT_USER):
        return None
    if not path.startswith(("/", "\\")) and path[1:2] != ":":
        top = path.replace("\\", "/").split("/", 1)[0].removesuffix(".py")
        if top in _LIBRARIES:
            return None
    return f"{path}:{m.group(2)}"


class Context:
    """Context slices (python_function, user_annotation) of a trace and per-row lookups."""

    def __init__(self, names: Sequence[str], track: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.names = list(names)
        order, parent, end_c = nest(track, start, end, clamp=False)
        self.order = order
        self.parent_a = parent
        self.parent = parent.tolist()
        self.end_c = end_c[order].astype(np.int64)  # in sorted order
        self.track = track[order]
        self.keys = (track[order].astype(np.int64) << TRACK_SHIFT) | start[order]
        self.rank = np.empty(len(order), dtype=np.int64)
        self.rank[order] = np.arange(len(order))
        self._memo: dict[int, tuple[str | None, str | None, int, bool]] = {}
        self._frames: dict[str, str | None] = {}  # user_frame per distinct name (a loop repeats its frames)
        self._kinds: dict[str, tuple[int, str | None, int | None]] = {}  # `_kind` per distinct name

    def innermost(self, track: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[int]:
        """Innermost context slice containing each [start, end) on the same track (-1 if none): from the
        last context slice starting at or before `start` on its track, up its parents to the first that
        contains the span (all queries a step at a time: `python_innermost` is the plain loop)."""
        if not len(self.order) or not len(start):
            return [-1] * len(start)
        track, end = np.asarray(track, dtype=np.int64), np.asarray(end, dtype=np.int64)
        keys = (track << TRACK_SHIFT) | start
        pos = np.searchsorted(self.keys, keys, side="right") - 1
        c = np.where(pos >= 0, self.order[np.maximum(pos, 0)], -1)
        live = np.flatnonzero(c >= 0)
        while len(live):
            r = self.rank[c[live]]
            live = live[(self.track[r] != track[live]) | (self.end_c[r] < end[live])]  # not containing: go up
            c[live] = self.parent_a[c[live]]
            live = live[c[live] >= 0]
        return c.tolist()

    def python_innermost(self, track: np.ndarray, start: np.ndarray, end: np.ndarray) -> list[int]:
        """`innermost` by a plain loop per span (its reference in the tests)."""
        out = []
        order, rank, trk, ends = self.order.tolist(), self.rank.tolist(), self.track.tolist(), self.end_c.tolist()
        for t, s, e in zip(track.tolist(), start.tolist(), end.tolist(), strict=True):
            k = int(np.searchsorted(self.keys, (t << TRACK_SHIFT) | s, side="right")) - 1
            c = order[k] if k >= 0 else -1
            while c >= 0:
                r = rank[c]
                if trk[r] == t and ends[r] >= e:
                    break
                c = self.parent[c]
            out.append(c)
        return out

    def _user_frame(self, name: str) -> str | None:
        """`user_frame(name)`, once per distinct name."""
        got = self._frames.get(name, _UNSEEN)
        if got is _UNSEEN:
            got = self._frames[name] = user_frame(name)
        return got  # type: ignore[return-value]

    def _kind(self, name: str) -> tuple[int, str | None, int | None]:
        """(kind, value, step) of a context slice name, as `info` reads it: 1 nn.Module (value: the module),
        2 nprof.module (the layer), 3 nprof.src (the source); else 0 with its user frame (or None) and
        ProfilerStep number (or None)."""
        for kind, prefix in ((1, "nn.Module: "), (2, "nprof.module: "), (3, "nprof.src: ")):
            if name.startswith(prefix):
                return kind, name[len(prefix) :], None
        step = _STEP.match(name)
        return 0, self._user_frame(name), None if step is None else int(step.group(1))

    def info(self, c: int) -> tuple[str | None, str | None, int, bool]:
        """(layer, source, iteration, explicit source) for context slice c (memoised, computed from its parents)."""
        if c < 0:
            return None, None, 0, False
        got = self._memo.get(c)
        if got is not None:
            return got
        chain = []
        node = c
        while node >= 0 and node not in self._memo:
            chain.append(node)
            node = self.parent[node]
        layer, source, iteration, explicit = self._memo[node] if node >= 0 else (None, None, 0, False)
        kinds = self._kinds
        for node in reversed(chain):
            name = self.names[node]
            named = kinds.get(name)
            if named is None:
                named = kinds[name] = self._kind(name)
            kind, value, step = named
            if kind == 1:  # nn.Module: a level of the module path
                layer = f"{layer}.{value}" if layer else value
            elif kind == 2:  # nprof.module: the whole path
                layer = value
            elif kind == 3:  # nprof.src: an explicit source line
                source, explicit = value, True
            elif not explicit and value:  # a user frame
                source = value
            elif step is not None:
                iteration = step
            self._memo[node] = (layer, source, iteration, explicit)
        return self._memo[c]


def flow_deps(
    flows: dict[str, Any],
    f_ns: np.ndarray,
    by_thread: dict[tuple[Any, Any], int],
    track: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    ids: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Bind flow points to rows (enclosing slice; `f` without bp=e: next slice) and chain them as deps:
    (dependent row ids, the row ids they depend on), as `chain_flows`."""
    if not len(f_ns) or not len(ids):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort((start, track))
    keys = (track[order] << TRACK_SHIFT) | start[order]
    t_sorted, e_sorted, id_sorted = track[order], end[order], ids[order]
    threads = zip(flows["pid"], flows["tid"], strict=True)
    f_trk = np.fromiter(map(by_thread.get, threads, repeat(-1)), dtype=np.int64, count=len(f_ns))
    pos = np.searchsorted(keys, (np.maximum(f_trk, 0) << TRACK_SHIFT) | f_ns, side="right") - 1
    n = len(keys)
    p = np.clip(pos, 0, n - 1)
    q = np.clip(pos + 1, 0, n - 1)
    enclosing = (pos >= 0) & (t_sorted[p] == f_trk) & (e_sorted[p] >= f_ns)
    is_f = np.asarray(list(map(eq, flows["ph"], repeat("f"))), dtype=bool)
    next_ok = is_f & np.asarray(list(map(ne, flows["bp"], repeat("e"))), dtype=bool) & (pos + 1 < n)
    next_ok &= t_sorted[q] == f_trk
    bound = np.where(enclosing, id_sorted[p], np.where(next_ok, id_sorted[q], -1))
    bound[f_trk < 0] = -1
    k = np.flatnonzero(bound >= 0).tolist()
    chain = pair_codes(list(map(flows["cat"].__getitem__, k)), list(map(flows["id"].__getitem__, k)))[0]
    return chain_flows(chain, f_ns[k], bound[k])


def pair_codes(pids: list[Any], tids: list[Any]) -> tuple[np.ndarray, list[int]]:
    """(code of each item's (pid, tid) pair, 0..k-1; the first item of each code): the pairs a dict of
    (pid, tid) tuples tells apart (1, 1.0 and True are one pid), without a tuple per item."""
    n = len(pids)
    pid_of = {p: i for i, p in enumerate(dict.fromkeys(pids))}
    tid_of = {t: i for i, t in enumerate(dict.fromkeys(tids))}
    combo = np.fromiter(map(pid_of.__getitem__, pids), np.int64, n) * len(tid_of)
    combo += np.fromiter(map(tid_of.__getitem__, tids), np.int64, n)
    _, first, inverse = np.unique(combo, return_index=True, return_inverse=True)
    return inverse.reshape(-1), first.tolist()


def chain_flows(chain: np.ndarray, times: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Chain bound flow points: points with equal `chain` codes (of their (cat, id): `pair_codes`), taken by
    (time, row), each depend on the previous one's row unless it is the same row: (dependent rows, the rows
    they depend on)."""
    if not len(chain):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    o = np.lexsort((rows, times, chain))  # each chain's points by (time, row)
    a_row, b_row = rows[o[:-1]], rows[o[1:]]
    link = (chain[o[:-1]] == chain[o[1:]]) & (a_row != b_row)
    return b_row[link], a_row[link]


def dep_lists(n: int, dst: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The dependencies of rows 0..n-1 from (dependent, dependency) pairs, as (offsets, values): row r's are
    values[offsets[r]:offsets[r + 1]], sorted and distinct (`sorted(set(...))` of its pairs)."""
    o = np.lexsort((src, dst))
    d, v = dst[o], src[o]
    keep = np.ones(len(d), dtype=bool)
    keep[1:] = (d[1:] != d[:-1]) | (v[1:] != v[:-1])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(d[keep], minlength=n), out=offsets[1:])
    return offsets, v[keep].astype(np.int64)
