"""Turn the parsed slices of a Chrome trace into profile table columns.

Contract: `build_profile(...) -> Rows` (called by `chrome.events_to_profile`,
which documents the mapping) returns the columns of the instructions, dma and
counters tables, built column-wise from lists and numpy arrays, plus the
dominant input dtype of the FLOP-carrying ops (to choose a device peak).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress, repeat
from operator import is_not, itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from nprof.capture.chrome_dma import DMA_KEYS, dma_columns
from nprof.capture.chrome_events import ABSENT
from nprof.capture.chrome_host import (
    Host,
    Paths,
    attribute_flops,
    host_read_bytes,
    host_slices,
    opcode,
    own_flops,
    row_info,
)
from nprof.capture.chrome_tree import TRACK_SHIFT, Context, dep_lists, flow_deps, pair_codes, select_work
from nprof.capture.opclass import engine_of
from nprof.errors import NprofError

if TYPE_CHECKING:
    from nprof.capture.chrome_events import ArgColumns, SliceColumns

_KIND = {"trace": 0, "python_function": 1, "user_annotation": 1, "gpu_user_annotation": 1}
_KIND.update({"kernel": 3, "gpu_memcpy": 4, "gpu_memset": 5, "memcpy": 4, "memset": 5})  # + older torch names
_KIND["mtia_ccp_events"] = 3  # MTIA device-side work (Kineto ActivityType MTIA_CCP_EVENTS)
_KIND["cuda_sync"] = 0  # Stream Sync / Stream Wait Event / Context Sync: waits, not work: dropped


@dataclass
class Rows:
    instructions: dict[str, Any]
    dma: dict[str, Any]
    counters: dict[str, Any]
    dtype: str | None  # dominant input dtype of FLOP-carrying ops (torch names: float, c10::BFloat16...)
    origin_ns: int = 0  # trace time in ns (ts x 1000) that became ts = 0


def operands(args: dict[str, Any]) -> str | None:
    dims = args.get("Input Dims")
    if isinstance(dims, list):
        types = args.get("Input type") or []
        conc = args.get("Concrete Inputs") or []
        parts = []
        for k, d in enumerate(dims):
            t = types[k] if k < len(types) else ""
            if isinstance(d, list) and d:
                parts.append(f"{t}[{', '.join(str(v) for v in d)}]")
            elif k < len(conc) and conc[k] not in ("", None):
                parts.append(str(conc[k]))
            elif t:
                parts.append(str(t) + ("[]" if isinstance(d, list) and t != "Scalar" else ""))
        return ", ".join(parts) or None
    if "grid" in args or "block" in args:
        text = f"grid {args.get('grid')} block {args.get('block')}"
        if args.get("registers per thread") is not None:
            text += f", {args['registers per thread']} regs/thread"
        if args.get("shared memory") is not None:
            text += f", {args['shared memory']} B shared"
        return text
    if "bytes" in args:
        return f"{args['bytes']} bytes"
    return None


HOST_KEYS = ("Input Dims", "Input type", "Concrete Inputs", "bytes")
KERNEL_KEYS = ("grid", "block", "registers per thread", "shared memory", "bytes")


def operands_all(args: ArgColumns, keys: tuple[str, ...]) -> list[str | None]:
    """`operands` for many slices, computed once per distinct `keys` field objects + "bytes" (training loops
    repeat shapes, and the fast parse shares the value of each distinct text; the first slice of each key
    answers for all: `operands` depends on the values only). Column-wise: C-level passes only."""
    cols = [args.raw(k) for k in (*keys[:4], "bytes")]
    serial = list(zip(*(map(id, c) for c in cols), strict=True))  # the values outlive the memo
    first = dict(zip(reversed(serial), range(len(serial) - 1, -1, -1), strict=True))  # the earliest slice wins
    memo: dict[tuple[int, ...], str | None] = {key: operands(args.row(i)) for key, i in first.items()}
    return list(map(memo.__getitem__, serial))


@dataclass
class _Slices:
    """Every slice of the trace: name, args, kind (`_KIND`, 2 = host op), times in ns and track code."""

    names: list[str]
    args: ArgColumns
    kind: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    end: np.ndarray
    track: np.ndarray


@dataclass
class _Device:
    """The device slices (kind >= 3) linked to their launching host slice by correlation id."""

    idx: np.ndarray
    owner: list[int]  # the emitted host row that owns the launching op, -1 if none
    launch: list[int]  # the launching host slice, -1 if none
    kern: list[int]  # positions in idx of the kernels (kind 3)
    flops: np.ndarray  # per kernel
    bytes: np.ndarray  # per kernel


@dataclass
class _Instr:
    """Instruction rows before ordering: the n_r emitted host rows first, then the n_k kernels."""

    track: np.ndarray
    start: np.ndarray
    dur: np.ndarray
    name: list[str]
    flops: np.ndarray
    bytes: np.ndarray
    info: list[tuple[str | None, str | None, int]]
    hlo: list[str | None]
    ops: list[str | None]
    owner: list[int]
    n_r: int
    n_k: int


def _to_ns(
    ts_us: np.ndarray, dur_us: np.ndarray, c_ts: np.ndarray, f_ts: np.ndarray
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(base_us, start, dur, counter times, flow times): integer ns from the whole-µs floor of the earliest
    time (subtracting in µs first keeps ns precision); negative durations become 0."""
    mins = [float(a.min()) for a in (ts_us, c_ts, f_ts) if len(a)]
    base_us = float(np.floor(min(mins))) if mins else 0.0
    start = np.rint((ts_us - base_us) * 1000.0).astype(np.int64)
    dur = np.maximum(np.rint(dur_us * 1000.0).astype(np.int64), 0)
    c_ns = np.rint((c_ts - base_us) * 1000.0).astype(np.int64)
    f_ns = np.rint((f_ts - base_us) * 1000.0).astype(np.int64)
    return base_us, start, dur, c_ns, f_ns


def _tracks(sl: SliceColumns, kind: np.ndarray) -> tuple[list[str], np.ndarray, dict[tuple[Any, Any], int]]:
    """(sorted track names, track code per slice, track code per (pid, tid)): device slices by (device,
    stream) from their args; others by (pid, tid), taking the device track of that (pid, tid) when it has
    one (gpu_user_annotation), else "cpu:<tid>" ("cpu:<pid>.<tid>" when host ops come from several pids)."""
    pids, tids, args = sl.pid, sl.tid, sl.args
    multi = len(set(map(pids.__getitem__, np.flatnonzero(kind == 2).tolist()))) > 1
    thread_label: dict[tuple[Any, Any], str] = {}
    dev_label: dict[tuple[Any, ...], str] = {}
    dev = np.flatnonzero(kind >= 3).tolist()
    columns = (pids, tids, args.raw("device"), args.raw("stream"), sl.cat)
    dev_keys = list(zip(*(map(col.__getitem__, dev) for col in columns), strict=True))
    label_of: dict[tuple[Any, ...], str] = {}
    for key in dict.fromkeys(dev_keys):  # distinct (pid, tid, device, stream, cat), in trace order
        pid, tid, device, stream, cat = key
        ds = (pid if device is ABSENT else device, tid if stream is ABSENT else stream)
        prefix = "mtia" if cat.startswith("mtia") else "cuda"
        label = dev_label.get((prefix, *ds)) or dev_label.setdefault((prefix, *ds), f"{prefix}:{ds[0]}:{ds[1]}")
        label_of[key] = label
        thread_label.setdefault((pid, tid), label)
    pair, first = pair_codes(pids, tids)  # (pid, tid) code per slice; the first slice of each pair
    reps = [(pids[i], tids[i]) for i in first]  # each pair as its first slice writes it
    keymap = {key: thread_label.get(key) or (f"cpu:{key[0]}.{key[1]}" if multi else f"cpu:{key[1]}") for key in reps}
    pair_labels = list(map(keymap.__getitem__, reps))
    dev_labels = list(map(label_of.__getitem__, dev_keys))
    # the distinct pair codes (0..k-1) of non-device slices, ascending: np.unique without an index would import
    # numpy.ma on its first call (1.1 MB of Python objects, 7-11 ms CPU: a real fraction of a small trace's import)
    host_pairs = np.flatnonzero(np.bincount(pair[kind < 3], minlength=len(first))).tolist()
    track_names = sorted({*map(pair_labels.__getitem__, host_pairs), *dev_labels})
    codes = {label: c for c, label in enumerate(track_names)}
    track_code = np.asarray([codes.get(label, -1) for label in pair_labels], dtype=np.int64)[pair]
    track_code[dev] = np.fromiter(map(codes.__getitem__, dev_labels), dtype=np.int64, count=len(dev))
    return track_names, track_code, {key: codes[label] for key, label in keymap.items()}


def _device_work(s: _Slices, h: Host, own_l: list[int], flops: np.ndarray, read_bytes: np.ndarray) -> _Device:
    """The device slices linked to their launching host rows. On a GPU run an op's FLOPs move from its host
    row to its first kernel (tensor-engine kernels first) and its input bytes to its earliest kernel (reads
    of device memory; host rows then read none): `flops` and `read_bytes` are zeroed where moved."""
    h_corr = h.args.raw("correlation")
    present = list(map(is_not, h_corr, repeat(ABSENT)))
    corr = dict(zip(compress(h_corr, present), compress(range(len(h_corr)), present), strict=True))  # last wins
    dev = np.flatnonzero(s.kind >= 3)
    s_corr = s.args.raw("correlation")
    wanted = list(map(s_corr.__getitem__, dev.tolist()))
    if ABSENT in wanted:  # no correlation: looked up as null, as `dict.get` reads a missing key
        wanted = [None if c is ABSENT else c for c in wanted]
    dev_host = list(map(corr.get, wanted, repeat(-1)))
    dev_owner = np.asarray([*own_l, -1], dtype=np.int64)[np.asarray(dev_host, dtype=np.int64)].tolist()  # -1: none
    kern_a = np.flatnonzero(s.kind[dev] == 3)
    k_idx = dev[kern_a]
    engines = {nm: engine_of(nm) == "tensor" for nm in {s.names[i] for i in k_idx.tolist()}}
    is_tensor = np.fromiter(map(engines.__getitem__, map(s.names.__getitem__, k_idx.tolist())), bool, len(k_idx))
    owner_k = np.asarray(dev_owner, dtype=np.int64)[kern_a] if len(kern_a) else np.zeros(0, np.int64)
    k_flops, k_bytes = kernel_moves(is_tensor, s.start[k_idx], owner_k, flops, read_bytes)
    kern = kern_a.tolist()
    return _Device(dev, dev_owner, dev_host, kern, k_flops, k_bytes)


def kernel_moves(
    is_tensor: np.ndarray, k_start: np.ndarray, owner: np.ndarray, flops: np.ndarray, read_bytes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes read) per kernel, moved from the host rows that own them (`owner`, -1 if none): an
    owner's FLOPs go to its first kernel by (tensor-engine first, start, position), its input bytes to its
    earliest kernel by (start, position); `flops` is zeroed where moved, `read_bytes` wholly when there are
    kernels (host rows then read none)."""
    n = len(owner)
    k_flops, k_bytes = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    if not n:
        return k_flops, k_bytes
    pos = np.arange(n)
    order = np.lexsort((pos, k_start, ~is_tensor))
    o = owner[order]
    ok = o >= 0
    ok[ok] = flops[o[ok]] > 0
    owners, first = np.unique(o[ok], return_index=True)
    k_flops[order[ok][first]] = flops[owners]
    flops[owners] = 0
    order = np.lexsort((pos, k_start))
    o = owner[order]
    owners, first = np.unique(o[o >= 0], return_index=True)
    k_bytes[order[o >= 0][first]] = read_bytes[owners]
    read_bytes[:] = 0
    return k_flops, k_bytes


def _instruction_rows(
    s: _Slices,
    h: Host,
    rows: np.ndarray,
    d: _Device,
    flops: np.ndarray,
    read_bytes: np.ndarray,
    info_of: dict[int, tuple[str | None, str | None, int]],
    paths: Paths,
) -> _Instr:
    """The instruction rows: the emitted host rows, then the kernels (which take the context and op path
    of their launching op)."""
    r_list = rows.tolist()
    k_idx = d.idx[np.asarray(d.kern, dtype=np.int64)].tolist()
    n_r, n_k = len(r_list), len(d.kern)
    i_track = np.concatenate([h.track[rows], s.track[k_idx]]) if n_r + n_k else np.zeros(0, np.int64)
    i_hlo = paths.parent_paths(r_list + list(map(d.launch.__getitem__, d.kern)))
    i_ops = operands_all(h.args.take(r_list), HOST_KEYS) + operands_all(s.args.take(k_idx), KERNEL_KEYS)
    return _Instr(
        track=i_track,
        start=np.concatenate([h.start[rows], s.start[k_idx]]).astype(np.int64),
        dur=np.concatenate([h.dur[rows], s.dur[k_idx]]).astype(np.int64),
        name=list(map(h.names.__getitem__, r_list)) + list(map(s.names.__getitem__, k_idx)),
        flops=np.concatenate([flops[rows], d.flops]).astype(np.int64),
        bytes=np.concatenate([read_bytes[rows], d.bytes]).astype(np.int64),
        info=list(map(info_of.__getitem__, r_list)) + [info_of.get(d.owner[j], (None, None, 0)) for j in d.kern],
        hlo=i_hlo,
        ops=i_ops,
        owner=list(r_list) + list(map(d.owner.__getitem__, d.kern)),
        n_r=n_r,
        n_k=n_k,
    )


def _t0(parts: list[np.ndarray]) -> int:
    """The earliest start among `parts` (0 when all are empty)."""
    allstarts = np.concatenate(parts) if any(len(x) for x in parts) else np.zeros(1, np.int64)
    return int(allstarts.min()) if len(allstarts) else 0


def _ids_and_deps(
    s: _Slices,
    ins: _Instr,
    rows: np.ndarray,
    d_idx: list[int],
    d_owner: list[int],
    flows: dict[str, Any],
    f_ns: np.ndarray,
    by_thread: dict[tuple[Any, Any], int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """(i_order, d_order, d_id, deps): instruction ids in (start, track) order, dma ids after them
    in start order; each kernel and dma depends on its owner's row (`rows`: the emitted host slices, first
    in `ins`), plus the trace's flow events; deps as `chrome_tree.dep_lists` of every id."""
    i_order = np.lexsort((ins.track, ins.start))
    n_i = len(i_order)
    row_id = np.empty(n_i, dtype=np.int64)
    row_id[i_order] = np.arange(n_i)
    id_of_host = np.full(int(rows.max()) + 1 if len(rows) else 0, -1, dtype=np.int64)
    id_of_host[rows] = row_id[: len(rows)]  # host rows come first
    d_order = np.argsort(s.start[d_idx], kind="stable") if d_idx else np.zeros(0, np.int64)
    d_id = np.empty(len(d_idx), dtype=np.int64)
    d_id[d_order] = np.arange(len(d_idx)) + n_i
    k_owner = np.asarray(ins.owner[ins.n_r :], dtype=np.int64)
    d_own = np.asarray(d_owner, dtype=np.int64)
    flow_dst, flow_src = flow_deps(
        flows,
        f_ns,
        by_thread,
        np.concatenate([ins.track, s.track[d_idx]]),
        np.concatenate([ins.start, s.start[d_idx]]),
        np.concatenate([ins.start + ins.dur, s.end[d_idx]]),
        np.concatenate([row_id, d_id]),
    )
    dst = np.concatenate([row_id[ins.n_r :][k_owner >= 0], d_id[d_own >= 0], flow_dst])
    src = np.concatenate([id_of_host[k_owner[k_owner >= 0]], id_of_host[d_own[d_own >= 0]], flow_src])
    return i_order, d_order, d_id, dep_lists(n_i + len(d_idx), dst.astype(np.int64), src.astype(np.int64))


def deps_column(deps: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> pa.Array:
    """The deps of ids lo..hi-1 (`chrome_tree.dep_lists`) as an Arrow list<int64> column (no list per row).
    The offsets are narrowed to int32 by numpy where they fit (Arrow's own cast would create its compute
    function registry: 2.2 MB of libarrow code pages touched for mlp8 in bench/chrome_import.py) and the column
    wraps the numpy buffers (`ListArray.from_arrays` touched 320 kB more of pyarrow's code); past int32 Arrow's
    cast raises as before."""
    offsets, values = deps
    off = offsets[lo : hi + 1] - offsets[lo]
    fits = not off.size or (int(off.min()) >= 0 and int(off.max()) <= np.iinfo(np.int32).max)
    items = numpy_array(values[offsets[lo] : offsets[hi]], pa.int64())
    if not fits or not off.size:
        return pa.ListArray.from_arrays(pa.array(off, pa.int32()), items, pool=pa.system_memory_pool())
    narrow = pa.py_buffer(np.ascontiguousarray(off, np.int32))
    return pa.Array.from_buffers(pa.list_(pa.int64()), hi - lo, [None, narrow], children=[items])


_NUMPY_OF = {pa.int64(): np.dtype(np.int64), pa.int32(): np.dtype(np.int32), pa.float64(): np.dtype(np.float64)}


def numpy_array(values: np.ndarray, typ: pa.DataType) -> pa.Array:
    """A 1-d numpy array as an Arrow array of `typ` (no nulls), as `pa.array(values, typ)` makes it: sharing the
    array's buffer when its dtype is `typ`'s (int64, int32, float64), else by `pa.array`. Why not always
    `pa.array`: its first call on a numpy array imports numpy.ma (1.1 MB of Python objects, 7-11 ms CPU on a
    quiet machine: a real part of a small trace's import; bench/chrome_import.py counts it apart from the import
    only when pandas is installed, which imports numpy.ma itself)."""
    want = _NUMPY_OF.get(typ)
    if want is None or values.dtype != want or values.ndim != 1:
        return pa.array(values, typ)
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(typ, len(values), [None, pa.py_buffer(values)])


def _instruction_columns(
    ins: _Instr, i_order: np.ndarray, deps: tuple[np.ndarray, np.ndarray], t0: int, track_names: list[str]
) -> dict[str, Any]:
    """The instructions table's columns in id order; with device work present, host rows are engine "host"
    (so engine totals are device-only)."""
    distinct = set(ins.name)
    engines = list(map({nm: engine_of(nm) for nm in distinct}.__getitem__, ins.name))
    engines = ["tensor" if f > 0 and e == "other" else e for e, f in zip(engines, ins.flops.tolist(), strict=True)]
    if ins.n_k:
        engines[: ins.n_r] = ["host"] * ins.n_r
    order = i_order.tolist()

    def perm(values: list[Any]) -> list[Any]:
        return list(map(values.__getitem__, order))

    return {
        "id": np.arange(len(order), dtype=np.int64),
        "ts": (ins.start - t0)[i_order],
        "duration": ins.dur[i_order],
        "engine": perm(engines),
        "track": list(map(track_names.__getitem__, ins.track[i_order].tolist())),
        "opcode": perm(list(map({nm: opcode(nm) for nm in distinct}.__getitem__, ins.name))),
        "operands": perm(ins.ops),
        "layer": perm(list(map(itemgetter(0), ins.info))),
        "hlo_name": perm(ins.hlo),
        "nki_source_location": perm(list(map(itemgetter(1), ins.info))),
        "flops": ins.flops[i_order],
        "hw_flops": ins.flops[i_order],
        "hbm_read_bytes": ins.bytes[i_order],
        "deps": deps_column(deps, 0, len(order)),
        "iteration": np.asarray(perm(list(map(itemgetter(2), ins.info))), dtype=np.int32),
    }


def build_profile(
    sl: SliceColumns, ts_us: np.ndarray, dur_us: np.ndarray, counters: list, c_ts: np.ndarray, flows: dict[str, Any],
    f_ts: np.ndarray,
) -> Rows:
    """The Rows of a parsed trace (`sl`: the slices' name/cat/pid/tid/args columns; times in µs): tracks,
    host nesting and work level, FLOPs and bytes, context, device links, then ids, deps and columns with
    ts from the earliest start (`Rows.origin_ns`). A trace over 2**45 ns long raises NprofError. `sl.args`
    keeps only the columns of `chrome_dma.DMA_KEYS` afterwards (the others are dropped once read: peak memory)."""
    n = len(sl.name)
    base_us, start, dur, c_ns, f_ns = _to_ns(ts_us, dur_us, c_ts, f_ts)
    end = start + dur
    if n and int(end.max()) >= 1 << TRACK_SHIFT:
        raise NprofError("the trace spans more than 9 hours; nprof imports traces up to 2**45 ns long")
    kind = np.fromiter(map(_KIND.get, sl.cat, repeat(2)), dtype=np.int8, count=n)
    track_names, track_code, by_thread = _tracks(sl, kind)
    s = _Slices(sl.name, sl.args, kind, start, dur, end, track_code)
    h = host_slices(s.names, s.args, np.flatnonzero(kind == 2), track_code, start, end)
    ctx_idx = np.flatnonzero(kind == 1)
    ctx = Context(list(map(s.names.__getitem__, ctx_idx.tolist())), track_code[ctx_idx], start[ctx_idx], end[ctx_idx])
    own, has_inner = own_flops(h)
    # the work level: a counted FLOP op (innermost with a formula) is always one row, never split or
    # absorbed into an enclosing op, so matmul rows do not depend on timing noise
    counted = (np.asarray(own, dtype=np.int64) > 0) & ~np.asarray(has_inner, dtype=bool)
    emitted, owner = select_work(h.order, h.parent, h.dur, counted, np.asarray(has_inner, dtype=bool))
    own_l = owner.tolist()
    rows = np.flatnonzero(emitted)
    flops, dtype_weight = attribute_flops(h, own, has_inner, rows.tolist(), own_l)
    read_bytes = host_read_bytes(h.args, h.parent, rows.tolist(), own_l)
    info_of = row_info(h, ctx, rows)
    paths = Paths(h)
    d = _device_work(s, h, own_l, flops, read_bytes)
    del own, has_inner, own_l, owner, emitted, ctx  # dead from here: the peak below is smaller without them
    s.args.keep_only({*HOST_KEYS, *KERNEL_KEYS, *DMA_KEYS})  # the only args read from here on
    h.args.keep_only(HOST_KEYS)
    ins = _instruction_rows(s, h, rows, d, flops, read_bytes, info_of, paths)
    h.args.cols.clear()  # the host args columns gathered for the rows above: each re-gathered if read again
    s.args.keep_only(DMA_KEYS)  # the only args read from here on (`dma_columns`)
    dma_pos = np.flatnonzero(kind[d.idx] >= 4)
    d_idx = d.idx[dma_pos].tolist()
    d_owner = list(map(d.owner.__getitem__, dma_pos.tolist()))
    d_host = list(map(d.launch.__getitem__, dma_pos.tolist()))
    t0 = _t0([ins.start, start[d_idx], h.start, start[d.idx]] + ([c_ns] if len(c_ts) else []))
    i_order, d_order, d_id, deps = _ids_and_deps(s, ins, rows, d_idx, d_owner, flows, f_ns, by_thread)
    instructions = _instruction_columns(ins, i_order, deps, t0, track_names)
    n_i = len(i_order)
    dma = dma_columns(d_idx, d_owner, d_host, d_order, d_id, s.names, s.args, start, dur, t0, info_of, paths.chain, n_i)
    dma["deps"] = deps_column(deps, n_i, n_i + len(d_idx))
    counter_cols = {
        "ts": c_ns - t0,
        "name": [c[1] for c in counters],
        "value": np.asarray([float(c[2]) for c in counters], dtype=np.float64),
    }
    dtype = dtype_weight.most_common(1)[0][0] if dtype_weight else None
    return Rows(instructions, dma, counter_cols, dtype, int(base_us) * 1000 + t0)
