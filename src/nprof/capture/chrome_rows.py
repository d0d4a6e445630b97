"""Turn the parsed slices of a Chrome trace into profile table columns.

Contract: `build_profile(...) -> Rows` (called by `chrome.events_to_profile`,
which documents the mapping) returns the columns of the instructions, dma and
counters tables, built column-wise from lists and numpy arrays, plus the
dominant input dtype of the FLOP-carrying ops (to choose a device peak).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq
from typing import Any

import numpy as np
import orjson

from nprof.capture.chrome_dma import dma_columns
from nprof.capture.chrome_tree import TRACK_SHIFT, Context, flow_deps, nest, select_work
from nprof.capture.opclass import engine_of, input_bytes, op_flops
from nprof.errors import NprofError

_KIND = {"trace": 0, "python_function": 1, "user_annotation": 1, "gpu_user_annotation": 1}
_KIND.update({"kernel": 3, "gpu_memcpy": 4, "gpu_memset": 5, "memcpy": 4, "memset": 5})  # + older torch names
_KIND["mtia_ccp_events"] = 3  # MTIA device-side work (Kineto ActivityType MTIA_CCP_EVENTS)
_KIND["cuda_sync"] = 0  # Stream Sync / Stream Wait Event / Context Sync: waits, not work: dropped
_BWD = "autograd::engine::evaluate_function: "


@dataclass
class Rows:
    instructions: dict[str, Any]
    dma: dict[str, Any]
    counters: dict[str, Any]
    dtype: str | None  # dominant input dtype of FLOP-carrying ops (torch names: float, c10::BFloat16...)
    origin_ns: int = 0  # trace time in ns (ts x 1000) that became ts = 0


def _operands(args: dict[str, Any]) -> str | None:
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


_HOST_KEYS = ("Input Dims", "Input type", "Concrete Inputs", "bytes")
_KERNEL_KEYS = ("grid", "block", "registers per thread", "shared memory", "bytes")


def _operands_all(all_args: list[dict[str, Any]], keys: tuple[str, ...]) -> list[str | None]:
    """`_operands` for many slices, cached on their serialised `keys` fields (training loops repeat shapes)."""
    memo: dict[bytes, str | None] = {}
    out = []
    k0, k1, k2, k3 = keys[0], keys[1], keys[2], keys[3]
    for a in all_args:
        key = orjson.dumps((a.get(k0), a.get(k1), a.get(k2), a.get(k3), a.get("bytes")))
        got = memo.get(key, memo)
        if got is memo:
            got = memo[key] = _operands(a)
        out.append(got)
    return out


def _read_bytes(h_args: list[dict[str, Any]], par_l: list[int], emitted: list[int], own_l: list[int]) -> np.ndarray:
    """Estimated memory reads per host slice, on emitted rows only: a row's own input bytes, or, for a
    row without shapes (a runtime call), those of its nearest shaped ancestor above the work level
    (given once, to its first emitted descendant). Caches are ignored: an upper bound of DRAM reads."""
    out = np.zeros(len(h_args), dtype=np.int64)
    memo: dict[bytes, int] = {}
    taken: set[int] = set()
    for e in emitted:
        src = e
        while src >= 0 and "Input Dims" not in h_args[src]:
            src = par_l[src]
        if src < 0 or (src != e and (own_l[src] >= 0 or src in taken)):
            continue
        taken.add(src)
        a = h_args[src]
        key = orjson.dumps((a["Input Dims"], a.get("Input type")))
        got = memo.get(key)
        if got is None:
            got = memo[key] = input_bytes(a)
        out[e] = got
    return out


def _opcode(name: str) -> str:
    return name[len(_BWD) :] if name.startswith(_BWD) else name


def build_profile(
    sl: Any, ts_us: np.ndarray, dur_us: np.ndarray, counters: list, c_ts: np.ndarray, flows: list, f_ts: np.ndarray
) -> Rows:
    n = len(sl.name)
    mins = [float(a.min()) for a in (ts_us, c_ts, f_ts) if len(a)]
    base_us = float(np.floor(min(mins))) if mins else 0.0  # subtract in microseconds first: keeps ns precision
    start = np.rint((ts_us - base_us) * 1000.0).astype(np.int64)
    dur = np.maximum(np.rint(dur_us * 1000.0).astype(np.int64), 0)
    end = start + dur
    c_ns = np.rint((c_ts - base_us) * 1000.0).astype(np.int64)
    f_ns = np.rint((f_ts - base_us) * 1000.0).astype(np.int64)
    if n and int(end.max()) >= 1 << TRACK_SHIFT:
        raise NprofError("the trace spans more than 9 hours; nprof imports traces up to 2**45 ns long")
    kind = np.fromiter(map(_KIND.get, sl.cat, repeat(2)), dtype=np.int8, count=n)
    names, args = sl.name, sl.args

    # tracks: device slices by (device, stream) from their args; others by (pid, tid), taking the device
    # track of that (pid, tid) when it has one (gpu_user_annotation), else "cpu:<tid>"
    kind_l = kind.tolist()
    pids, tids = sl.pid, sl.tid
    multi = len(set(compress(pids, map(eq, kind_l, repeat(2))))) > 1
    labels: list[str | None] = [None] * n
    thread_label: dict[tuple[Any, Any], str] = {}
    dev_label: dict[tuple[Any, ...], str] = {}
    for i in [i for i, k in enumerate(kind_l) if k >= 3]:
        a, key = args[i], (pids[i], tids[i])
        ds = (a.get("device", key[0]), a.get("stream", key[1]))
        prefix = "mtia" if sl.cat[i].startswith("mtia") else "cuda"
        label = dev_label.get((prefix, *ds)) or dev_label.setdefault((prefix, *ds), f"{prefix}:{ds[0]}:{ds[1]}")
        labels[i] = label
        thread_label.setdefault(key, label)
    pairs = list(zip(pids, tids, strict=True))
    keymap = {
        key: thread_label.get(key) or (f"cpu:{key[0]}.{key[1]}" if multi else f"cpu:{key[1]}") for key in set(pairs)
    }
    dev_labels = labels
    labels = list(map(keymap.__getitem__, pairs))
    for i in np.flatnonzero(kind >= 3).tolist():
        labels[i] = dev_labels[i]
    track_names = sorted(set(labels))
    codes = {label: c for c, label in enumerate(track_names)}
    track_code = np.fromiter(map(codes.__getitem__, labels), dtype=np.int64, count=n)
    by_thread = {key: codes[label] for key, label in keymap.items()}

    # host slices: nesting, work level, context
    host = np.flatnonzero(kind == 2)
    h_names = list(map(names.__getitem__, host.tolist()))
    h_args = list(map(args.__getitem__, host.tolist()))
    order, parent, h_end = nest(track_code[host], start[host], end[host])
    h_start = start[host]
    h_dur = h_end - h_start
    ctx_idx = np.flatnonzero(kind == 1)
    ctx = Context([names[i] for i in ctx_idx.tolist()], track_code[ctx_idx], start[ctx_idx], end[ctx_idx])
    par_l = parent.tolist()

    # backward nodes: nearest evaluate_function ancestor-or-self
    is_bwd = list(map(str.startswith, h_names, repeat(_BWD)))
    bwd_of = [-1] * len(host)
    if any(is_bwd):
        for i in order.tolist():
            p = par_l[i]
            bwd_of[i] = i if is_bwd[i] else (bwd_of[p] if p >= 0 else -1)

    # FLOPs: own formula per op, attributed once to its row
    own = [0] * len(host)
    flops = np.zeros(len(host), dtype=np.int64)
    dtype_weight: Counter[str] = Counter()
    flops_memo: dict[bytes, int] = {}
    tensor_names = {nm for nm in set(h_names) if engine_of(nm) == "tensor"}
    for i in [i for i, nm in enumerate(h_names) if nm in tensor_names and "Input Dims" in h_args[i]]:
        nm, a = h_names[i], h_args[i]
        key = orjson.dumps([nm, a["Input Dims"], a.get("Concrete Inputs")])
        got = flops_memo.get(key)
        if got is None:
            got = flops_memo[key] = op_flops(nm, a["Input Dims"], a.get("Concrete Inputs"))
        own[i] = got
    # innermost wins: an op counts only if no op inside it has a formula (aten::linear > aten::addmm -> addmm)
    has_inner = [False] * len(host)
    for i in [j for j, f in enumerate(own) if f > 0]:
        p = par_l[i]
        while p >= 0 and not has_inner[p]:
            has_inner[p] = True
            p = par_l[p]
    # the work level: a counted FLOP op (innermost with a formula) is always one row, never split or
    # absorbed into an enclosing op, so matmul rows do not depend on timing noise
    counted = np.asarray([f > 0 and not h for f, h in zip(own, has_inner, strict=True)], dtype=bool)
    emitted, owner = select_work(order, parent, h_dur, counted, np.asarray(has_inner, dtype=bool))
    own_l = owner.tolist()
    carrier: dict[int, int] = {}  # counted op above the work level -> its first emitted descendant
    for e in np.flatnonzero(emitted).tolist():
        a = par_l[e]
        while a >= 0 and own[a] == 0:
            a = par_l[a]
        if a >= 0 and own_l[a] < 0 and (a not in carrier or h_start[e] < h_start[carrier[a]]):
            carrier[a] = e
    for i in [j for j, f in enumerate(own) if f > 0 and not has_inner[j]]:
        o = own_l[i] if own_l[i] >= 0 else carrier.get(i, -1)
        if o < 0:
            continue
        flops[o] += own[i]
        types = [t for t in (h_args[i].get("Input type") or []) if t and t != "Scalar"]
        if types:
            dtype_weight[str(types[0])] += own[i]

    read_bytes = _read_bytes(h_args, par_l, np.flatnonzero(emitted).tolist(), own_l)

    rows = np.flatnonzero(emitted)
    r_ctx = ctx.innermost(track_code[host][rows], h_start[rows], h_end[rows])
    info_of: dict[int, tuple[str | None, str | None, int]] = {}
    for r, c in zip(rows.tolist(), r_ctx, strict=True):
        layer, source, iteration, _ = ctx.info(c)
        info_of[r] = (layer, source, iteration)
    fwd: dict[Any, tuple[str | None, str | None]] = {}
    if any(is_bwd):  # forward ops that created autograd nodes, by sequence number
        seq_idx = [i for i in range(len(host)) if bwd_of[i] < 0 and "Sequence number" in h_args[i]]
        seq_ctx = ctx.innermost(track_code[host][seq_idx], h_start[seq_idx], h_end[seq_idx])
        for i, c in zip(seq_idx, seq_ctx, strict=True):
            layer, source, _, _ = ctx.info(c)
            fwd.setdefault(h_args[i]["Sequence number"], (layer, source))
        for r in rows.tolist():
            b = bwd_of[r]
            if b >= 0 and (f := fwd.get(h_args[b].get("Sequence number"))) is not None:
                layer, source, iteration = info_of[r]
                info_of[r] = (f[0] or layer, f[1] or source, iteration)

    path_memo: dict[int, str] = {}

    def path(r: int) -> str:
        """Op path of slice r: names of its ancestors and itself, outer first, repeats collapsed."""
        got = path_memo.get(r)
        if got is None:
            name = _opcode(h_names[r])
            p = par_l[r]
            if p < 0:
                got = name
            else:
                above = path(p)
                got = above if above.endswith(name) and above.rsplit(" > ", 1)[-1] == name else f"{above} > {name}"
            path_memo[r] = got
        return got

    def chain(r: int, include_self: bool) -> str | None:
        if include_self:
            return path(r)
        return path(par_l[r]) if par_l[r] >= 0 else None

    # device slices: kernels (instructions), memcpy/memset (dma), linked to the launching host row
    corr = {a["correlation"]: i for i, a in enumerate(h_args) if "correlation" in a}
    dev = np.flatnonzero(kind >= 3)
    dev_owner, dev_host = [], []
    for i in dev.tolist():
        h = corr.get(args[i].get("correlation"), -1)
        dev_owner.append(own_l[h] if h >= 0 else -1)
        dev_host.append(h)
    kern = [j for j, i in enumerate(dev.tolist()) if kind[i] == 3]
    k_flops = np.zeros(len(kern), dtype=np.int64)
    first: dict[int, int] = {}
    for j in sorted(kern, key=lambda j: (engine_of(names[dev[j]]) != "tensor", start[dev[j]])):
        o = dev_owner[j]
        if o >= 0 and flops[o] > 0 and o not in first:
            first[o] = j
    kern_pos = {j: k for k, j in enumerate(kern)}
    for o, j in first.items():
        k_flops[kern_pos[j]] = flops[o]
        flops[o] = 0
    k_bytes = np.zeros(len(kern), dtype=np.int64)
    if kern:  # GPU run: input bytes are device-memory reads of the op's first kernel; host rows read none
        earliest: dict[int, int] = {}
        for j in sorted(kern, key=lambda j: start[dev[j]]):
            earliest.setdefault(dev_owner[j], j)
        for o, j in earliest.items():
            if o >= 0:
                k_bytes[kern_pos[j]] = read_bytes[o]
        read_bytes[:] = 0

    # instruction rows: emitted host slices then kernels
    r_list = rows.tolist()
    k_idx = [int(dev[j]) for j in kern]
    n_r, n_k = len(r_list), len(kern)
    i_track = np.concatenate([track_code[host][rows], track_code[k_idx]]) if n_r + n_k else np.zeros(0, np.int64)
    i_start = np.concatenate([h_start[rows], start[k_idx]]).astype(np.int64)
    i_dur = np.concatenate([h_dur[rows], dur[k_idx]]).astype(np.int64)
    i_name = [h_names[r] for r in r_list] + [names[i] for i in k_idx]
    i_flops = np.concatenate([flops[rows], k_flops]).astype(np.int64)
    i_bytes = np.concatenate([read_bytes[rows], k_bytes]).astype(np.int64)
    i_info = [info_of[r] for r in r_list] + [info_of.get(dev_owner[j], (None, None, 0)) for j in kern]
    i_hlo = [chain(r, False) for r in r_list] + [chain(dev_host[j], False) if dev_host[j] >= 0 else None for j in kern]
    i_ops = _operands_all([h_args[r] for r in r_list], _HOST_KEYS) + _operands_all(
        [args[i] for i in k_idx], _KERNEL_KEYS
    )
    i_owner = [r for r in r_list] + [dev_owner[j] for j in kern]

    d_idx = [int(dev[j]) for j, i in enumerate(dev.tolist()) if kind[i] >= 4]
    d_owner = [dev_owner[j] for j, i in enumerate(dev.tolist()) if kind[i] >= 4]
    d_host = [dev_host[j] for j, i in enumerate(dev.tolist()) if kind[i] >= 4]

    t0_parts = [i_start, start[d_idx], h_start, start[dev]]  # every work slice, emitted or not
    if len(c_ts):
        t0_parts.append(c_ns)
    allstarts = np.concatenate(t0_parts) if any(len(x) for x in t0_parts) else np.zeros(1, np.int64)
    t0 = int(allstarts.min()) if len(allstarts) else 0

    i_order = np.lexsort((i_track, i_start))
    n_i = len(i_order)
    row_id = np.empty(n_i, dtype=np.int64)
    row_id[i_order] = np.arange(n_i)
    id_of_host = {r: int(row_id[k]) for k, r in enumerate(r_list)}
    d_order = np.argsort(start[d_idx], kind="stable") if d_idx else np.zeros(0, np.int64)
    d_id = np.empty(len(d_idx), dtype=np.int64)
    d_id[d_order] = np.arange(len(d_idx)) + n_i

    deps: list[list[int]] = [[] for _ in range(n_i + len(d_idx))]
    for k in range(n_r, n_i):
        o = i_owner[k]
        if o >= 0:
            deps[int(row_id[k])].append(id_of_host[o])
    for j, o in enumerate(d_owner):
        if o >= 0:
            deps[int(d_id[j])].append(id_of_host[o])
    flow_deps(
        flows,
        f_ns,
        by_thread,
        np.concatenate([i_track, track_code[d_idx]]),
        np.concatenate([i_start, start[d_idx]]),
        np.concatenate([i_start + i_dur, end[d_idx]]),
        np.concatenate([row_id, d_id]),
        deps,
    )

    engines = [engine_of(nm) for nm in i_name]
    engines = ["tensor" if f > 0 and e == "other" else e for e, f in zip(engines, i_flops.tolist(), strict=True)]
    if n_k:  # device work present: host rows are their own engine, so engine totals are device-only
        engines[:n_r] = ["host"] * n_r

    def perm(values: list[Any]) -> list[Any]:
        return [values[k] for k in i_order.tolist()]

    instructions = {
        "id": np.arange(n_i, dtype=np.int64),
        "ts": (i_start - t0)[i_order],
        "duration": i_dur[i_order],
        "engine": perm(engines),
        "track": [track_names[t] for t in i_track[i_order].tolist()],
        "opcode": perm([_opcode(nm) for nm in i_name]),
        "operands": perm(i_ops),
        "layer": perm([x[0] for x in i_info]),
        "hlo_name": perm(i_hlo),
        "nki_source_location": perm([x[1] for x in i_info]),
        "flops": i_flops[i_order],
        "hw_flops": i_flops[i_order],
        "hbm_read_bytes": i_bytes[i_order],
        "deps": [sorted(set(d)) for d in deps[:n_i]],
        "iteration": np.asarray(perm([x[2] for x in i_info]), dtype=np.int32),
    }
    dma = dma_columns(d_idx, d_owner, d_host, d_order, d_id, names, args, start, dur, t0, info_of, chain, deps, n_i)
    counter_cols = {
        "ts": c_ns - t0,
        "name": [c[1] for c in counters],
        "value": np.asarray([float(c[2]) for c in counters], dtype=np.float64),
    }
    dtype = dtype_weight.most_common(1)[0][0] if dtype_weight else None
    return Rows(instructions, dma, counter_cols, dtype, int(base_us) * 1000 + t0)
