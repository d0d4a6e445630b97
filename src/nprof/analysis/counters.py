"""The `counters` pass: timeline counter series computed from the events, plus sampled counters.

Contract: columns ts (ns), name, value (float64); each series is a step
function (a value holds until the series' next point), sorted by ts, with
consecutive equal values collapsed. Series:
* `tensor_util` (%): share of time the TensorMatrix row (`tensor.moving`, else
  every tensor instruction) is busy, per bin;
* `pending_dma` (count): DMA transfers in flight, at *exact* change points (a
  transfer is pending from its start to its end), so it stays exact at any zoom;
* `dma_throughput` (GB/s = bytes/ns): bytes moved per bin divided by the bin
  width, each transfer spreading its bytes evenly over its duration;
* every series of the profile's own `counters` table (sampled real-hardware
  data such as a throttle counter), unchanged.
Binned series use bins of `bin_width_ns(total)` = ceil(total / 100000) ns (at
least 1 ns): at most 100k bins per series whatever the event count, and 1 ns
(exact) for profiles shorter than 100 us. Values are exact integrals over each
bin (no sampling), so zooming never shows aliasing, only the bin resolution.
Series appear only when their source exists (no DMA -> no DMA series).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.analysis import intervals as iv
from nprof.analysis.facts import TENSOR_MATRIX_TRACK, facts, to_numpy
from nprof.compiled import load_compiled
from nprof.profile import Profile

SCHEMA = pa.schema(
    [
        pa.field("ts", pa.int64(), nullable=False),
        pa.field("name", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)
MAX_BINS = 100_000
BATCH = 1 << 18  # rows per batch of the batched computations (bounded temporaries)
SERIES = {  # name -> (label, unit) of the computed series
    "tensor_util": ("TensorMatrix utilization", "%"),
    "pending_dma": ("Pending DMA count", ""),
    "dma_throughput": ("DMA throughput", "GB/s"),
}


def bin_width_ns(total_ns: int) -> int:
    """Width of the bins of the binned series for a profile window of `total_ns`."""
    return max(1, math.ceil(total_ns / MAX_BINS))


def _collapse(ts: np.ndarray, value: np.ndarray, end: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Drop points whose value equals the previous point's; optionally close the series with 0 at `end`."""
    if ts.size:
        keep = np.empty(ts.size, dtype=bool)
        keep[0] = True
        np.not_equal(value[1:], value[:-1], out=keep[1:])
        ts, value = ts[keep], value[keep]
    if end is not None and value.size and value[-1] != 0 and end > ts[-1]:
        ts, value = np.append(ts, end), np.append(value, 0.0)
    return ts, value


def _snap(value: np.ndarray, digits: int = 10) -> np.ndarray:
    """Round to `digits` significant digits: removes float noise so constant stretches collapse to one point."""
    out = value.astype(np.float64, copy=True)
    if out.size:
        out[np.abs(out) < 1e-9 * np.abs(out).max()] = 0.0  # cancellation noise of the cumulative sums
    nz = out != 0
    if nz.any():
        scale = 10.0 ** (digits - 1 - np.floor(np.log10(np.abs(out[nz]))))
        out[nz] = np.round(out[nz] * scale) / scale
    return out


def _edges(total: int) -> np.ndarray:
    width = bin_width_ns(total)
    return np.arange(0, total + width, width, dtype=np.int64)


def tensor_util(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    f = facts(profile)
    instr = profile.instructions
    if instr.num_rows == 0 or f.total_ns <= 0:
        return np.empty(0, np.int64), np.empty(0)
    edges = _edges(f.total_ns)
    width, nbins = int(edges[1]), edges.size - 1
    if not f.lean:  # analysing: the row mask is cached and shared
        mask = f.tensor_matrix_mask
        busy = _busy_per_bin(instr, None, mask, width, nbins) if mask.any() else None
    else:  # streaming export: no per-event array, compare batch by batch
        on_track = pc.any(pc.equal(instr["track"], TENSOR_MATRIX_TRACK)).as_py()
        column, value = ("track", TENSOR_MATRIX_TRACK) if on_track else ("engine", "tensor")
        busy = _busy_per_bin(instr, column, value, width, nbins)
    if busy is None:
        return np.empty(0, np.int64), np.empty(0)
    ends = np.minimum(edges[1:], f.total_ns)
    util = _snap(100.0 * busy / np.maximum(ends - edges[:-1], 1))
    return _collapse(edges[:-1], util, f.total_ns)


def _busy_per_bin(
    table: pa.Table, column: str | None, value: str | np.ndarray, width: int, nbins: int
) -> np.ndarray | None:
    """ns per bin covered by the union of the rows where `column == value`, read in batches of BATCH rows.

    Batches in table order are merged with a carried `reach`: when the selected
    starts are non-decreasing, whatever a batch's interval has in common with the
    earlier batches is exactly [its start, reach), so clipping its start to reach
    removes the overlap. Out-of-order starts fall back to one global merge.
    Rows are selected by `column == value`, or by `value` itself, a boolean mask,
    when `column` is None. None when no row is selected.
    """
    busy = np.zeros(nbins, np.float64)
    reach, last, seen = np.iinfo(np.int64).min, np.iinfo(np.int64).min, False
    for b0 in range(0, table.num_rows, BATCH):
        sl = table.slice(b0, BATCH)
        mask = value[b0 : b0 + BATCH] if column is None else to_numpy(pc.equal(sl[column], value), bool)
        ts = to_numpy(sl["ts"])[mask]
        end = ts + to_numpy(sl["duration"])[mask]
        if ts.size == 0:
            continue
        seen = True
        if ts[0] < last or not iv.is_sorted(ts):
            everything = value if column is None else to_numpy(pc.equal(table[column], value), bool)
            all_ts = to_numpy(table["ts"])[everything]
            ms, me = iv.merge(all_ts, all_ts + to_numpy(table["duration"])[everything])
            return spread_over_bins(ms, me, (me - ms).astype(np.float64), width, nbins)
        last = int(ts[-1])
        ms, me = iv.merge(ts, end)
        ms = np.maximum(ms, reach)
        keep = me > ms
        ms, me = ms[keep], me[keep]
        if me.size:
            reach = max(reach, int(me.max()))
            busy += spread_over_bins(ms, me, (me - ms).astype(np.float64), width, nbins)
    return busy if seen else None


def pending_dma_chunks(profile: Profile, batch: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The exact `pending_dma` series in time order, as (ts, value) chunks of about `batch` transfers each.

    Time windows start at every `batch`-th transfer start; each window merges
    its starts with the ends falling in it, so memory is bounded by the window
    (plus one sorted copy of the end times), and the series can be streamed.
    What the windows read is taken from the profile's facts by this call; the returned iterator reads
    only those arrays (it may run on another thread while the analysis goes on: `counter_batches`).
    """
    f = facts(profile)
    if f.d_ts.size == 0:
        return iter(())
    step = batch or BATCH
    starts = f.d_ts if iv.is_sorted(f.d_ts) else np.sort(f.d_ts, kind="stable")
    ends = f.__dict__.get("d_end")  # reuse the analysis' array when it exists
    if ends is None:
        ends = f.d_ts + f.d_dur  # our own temporary: sorted in place below
        if not iv.is_sorted(ends):
            ends.sort(kind="stable")  # nearly sorted: fast
    elif not iv.is_sorted(ends):
        ends = np.sort(ends, kind="stable")
    bounds = [int(t) for t in starts[::step]] + [int(ends[-1]) + 1]
    return _windows(starts, ends, bounds, window_function(starts.size))


def _windows(
    starts: np.ndarray,
    ends: np.ndarray,
    bounds: list[int],
    steps: Callable[[np.ndarray, np.ndarray, int, float | None], tuple[np.ndarray, np.ndarray]],
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The windows of `pending_dma_chunks` between consecutive `bounds`, each by `steps`."""
    previous = None
    for t_lo, t_hi in itertools.pairwise(bounds):
        if t_hi <= t_lo:
            continue
        s_lo, s_hi = np.searchsorted(starts, [t_lo, t_hi], side="left")
        e_lo, e_hi = np.searchsorted(ends, [t_lo, t_hi], side="left")
        if s_hi == s_lo and e_hi == e_lo:
            continue
        ts, value = steps(starts[s_lo:s_hi], ends[e_lo:e_hi], int(s_lo - e_lo), previous)
        if ts.size:
            previous = float(value[-1])
            yield ts, value


def window_steps(
    starts: np.ndarray, ends: np.ndarray, base: int, previous: float | None
) -> tuple[np.ndarray, np.ndarray]:
    """One window of `pending_dma_chunks` by numpy (the readable reference of `pending_core.window_steps`):
    the instants where the count in flight changes, with the count after the last change there, without
    instants repeating the value before them (`previous`: the last value emitted, None at the start)."""
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(starts.size, np.int64), np.full(ends.size, -1, np.int64)])
    order = np.argsort(times, kind="stable")  # timsort merges the two sorted runs in linear time
    times = times[order]
    count = np.cumsum(steps[order]) + base
    last = np.empty(times.size, dtype=bool)  # the count after the last change at each instant
    last[-1] = True
    np.not_equal(times[1:], times[:-1], out=last[:-1])
    ts, value = times[last], count[last].astype(np.float64)
    keep = np.empty(ts.size, dtype=bool)
    keep[0] = previous is None or value[0] != previous
    np.not_equal(value[1:], value[:-1], out=keep[1:])
    return ts[keep], value[keep]


# Transfers from which the pending-DMA windows run compiled (`pending_core`): loading numba costs ~0.5-0.7 s
# CPU once per process (measured; shared with the store's LOD core), the numpy window ~0.17 us per transfer
# more than the loop: worth it alone from about 4 M transfers, with the LOD core loading it anyway from 2 M.
COMPILED_FROM = 2_000_000


def window_function(n: int) -> Callable[[np.ndarray, np.ndarray, int, float | None], tuple[np.ndarray, np.ndarray]]:
    """The compiled window for `n` transfers when worth loading (or numba is loaded), else the numpy one."""
    core = load_compiled("nprof.analysis.pending_core", n, COMPILED_FROM, loaded="numba")  # numba loaded: ~0.1 s more
    if core is None:
        return window_steps
    compiled = core.window_steps

    def run(starts: np.ndarray, ends: np.ndarray, base: int, previous: float | None) -> tuple[np.ndarray, np.ndarray]:
        prev = 0.0 if previous is None else previous
        return compiled(starts.astype(np.int64, copy=False), ends.astype(np.int64, copy=False), base, prev,
                        previous is not None)  # fmt: skip

    return run


def pending_dma(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """The whole exact series at once (one window: no concatenation; streaming writers use the chunks)."""
    parts = list(pending_dma_chunks(profile, batch=max(1, profile.dma.num_rows)))
    if not parts:
        return np.empty(0, np.int64), np.empty(0)
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def spread_over_bins(start: np.ndarray, end: np.ndarray, amount: np.ndarray, width: int, nbins: int) -> np.ndarray:
    """Distribute each amount evenly over its [start, end) interval into bins of `width` ns; O(n), no sort.

    Zero-length intervals put their whole amount in the bin of `start`.
    """
    out = np.zeros(nbins + 1, np.float64)
    b0 = np.clip(start // width, 0, nbins - 1)
    b1 = np.clip(np.maximum(end - 1, start) // width, 0, nbins - 1)
    same = b0 == b1
    out += np.bincount(b0[same], weights=amount[same], minlength=nbins + 1)
    cross = ~same
    if cross.any():
        s, e, a, c0, c1 = start[cross], end[cross], amount[cross], b0[cross], b1[cross]
        rate = a / (e - s)
        out += np.bincount(c0, weights=rate * ((c0 + 1) * width - s), minlength=nbins + 1)
        out += np.bincount(c1, weights=rate * (e - c1 * width), minlength=nbins + 1)
        diff = np.bincount(c0 + 1, weights=rate * width, minlength=nbins + 1)
        diff -= np.bincount(c1, weights=rate * width, minlength=nbins + 1)
        out += np.cumsum(diff)
    return out[:nbins]


def dma_throughput(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    f = facts(profile)
    if f.d_ts.size == 0 or f.total_ns <= 0:
        return np.empty(0, np.int64), np.empty(0)
    edges = _edges(f.total_ns)
    nbins = edges.size - 1
    per_bin = np.zeros(nbins, np.float64)
    dma = profile.dma
    for b0 in range(0, dma.num_rows, BATCH):  # batches of the table keep the temporaries bounded
        sl = dma.slice(b0, BATCH)
        ts = to_numpy(sl["ts"])
        nbytes = to_numpy(sl["bytes"]).astype(np.float64)
        per_bin += spread_over_bins(ts, ts + to_numpy(sl["duration"]), nbytes, int(edges[1]), nbins)
    ends = np.minimum(edges[1:], f.total_ns)
    value = _snap(np.maximum(per_bin, 0.0) / np.maximum(ends - edges[:-1], 1))
    return _collapse(edges[:-1], value, f.total_ns)


def repeat_string(value: str, n: int) -> pa.Array:
    """A string array of `n` copies of `value`, built from raw buffers (no per-item work)."""
    raw = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32)
    offsets *= len(raw)  # in place: no int64 temporary, and the buffer is shared, not copied
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


COMPUTED_SERIES = "computed_series"  # the Facts memo key of `computed_series` (`Facts.forget` drops it)


def computed_series(profile: Profile) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The series computed from events, by name: (ts, value) arrays; series without a source are left out."""
    f = facts(profile)
    return f.memo(COMPUTED_SERIES, lambda: _computed(profile))


def _computed(profile: Profile) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for name, fn in (("tensor_util", tensor_util), ("pending_dma", pending_dma), ("dma_throughput", dma_throughput)):
        ts, value = fn(profile)
        if ts.size:
            out[name] = (ts, value)
    return out


def counters(profile: Profile) -> pa.Table:
    """All counter series of `profile` (see module doc)."""
    parts: list[pa.Table] = []
    for name, (ts, value) in computed_series(profile).items():
        parts.append(pa.table({"ts": ts, "name": repeat_string(name, ts.size), "value": value}, schema=SCHEMA))
    sampled = _sampled(profile)
    if sampled is not None:
        parts.append(sampled)
    if not parts:
        return SCHEMA.empty_table()
    return pa.concat_tables(parts)


def _sampled(profile: Profile) -> pa.Table | None:
    """The profile's own counters as rows of SCHEMA, by name then ts (None when it has none)."""
    sampled = profile.counters
    if not sampled.num_rows:
        return None
    return sampled.select(SCHEMA.names).cast(SCHEMA).sort_by([("name", "ascending"), ("ts", "ascending")])


def counter_batches(profile: Profile, batch: int | None = None) -> pa.RecordBatchReader:
    """The rows of `counters(profile)`, in its order, as a stream of record batches: the pending-DMA series is
    made window by window (`pending_dma_chunks`, about `batch` transfers each) as the stream is read, never
    whole, and no table of every series is built (the store's ingest writes the stream as it comes: the series
    of 10^7 events has ~5 M points). The binned series (at most MAX_BINS points each) and everything the
    windows read are taken from the profile by this call, so the stream may be read on another thread while
    the analysis goes on. Series the counters pass computes are not memoised by this call."""
    util, throughput = tensor_util(profile), dma_throughput(profile)
    pending = pending_dma_chunks(profile, batch)
    sampled = _sampled(profile)

    def batches() -> Iterator[pa.RecordBatch]:
        for name, chunks in (("tensor_util", iter([util])), ("pending_dma", pending),
                             ("dma_throughput", iter([throughput]))):  # fmt: skip
            for ts, value in chunks:
                if ts.size:
                    names = repeat_string(name, ts.size)
                    yield pa.record_batch({"ts": ts, "name": names, "value": value}, schema=SCHEMA)
        if sampled is not None:
            yield from sampled.to_batches()

    return pa.RecordBatchReader.from_batches(SCHEMA, batches())
