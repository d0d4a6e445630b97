"""Per-profile derived arrays shared by every analysis pass, computed once and cached.

Contract: `facts(profile)` returns a `Facts` whose attributes are numpy arrays
(int64 ns, codes) extracted from the Profile tables, computed lazily on first
use and cached for as long as the Profile object lives, so `run_all` touches
each column once whatever the number of passes. Nothing here mutates a Profile.
`Facts.shed(names)` drops cached per-event arrays (SHEDDABLE) a caller no longer needs; a later use
recomputes them (the same values), so shedding never changes a result, only when memory is held.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from functools import cached_property, partial
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.analysis import intervals as iv
from nprof.compiled import load_compiled
from nprof.profile import Profile
from nprof.profile.codes import plain, recall

# engines whose instructions count as "compute" for overlap findings (sync and cc only coordinate)
COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "other")
NEURON_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
TENSOR_MATRIX_TRACK = "tensor.moving"
# An engine's rows from which its per-engine loops run compiled (`nprof.analysis.engine_core`): numba costs
# ~0.5-0.7 s CPU once per process (shared with the pending-DMA window and the store's LOD core, which load it
# from about the same size), the numpy merges and waits ~0.05-0.1 us per row more than the loops.
ENGINE_COMPILED_FROM = 2_000_000
T = TypeVar("T")


def to_numpy(col: pa.ChunkedArray | pa.Array, dtype: type = np.int64) -> np.ndarray:
    """A numeric column as a numpy array of `dtype` (nulls become 0)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if col.null_count:
        col = col.fill_null(0)
    return np.asarray(col.to_numpy(zero_copy_only=False), dtype=dtype)


def encode(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode a string column: (int32 codes with -1 for null, list of distinct values)."""
    if isinstance(col, pa.Array):
        col = pa.chunked_array([col])
    if len(col) == 0:
        return np.empty(0, np.int32), []
    enc = col.dictionary_encode().unify_dictionaries()
    names = enc.chunk(0).dictionary.to_pylist() if enc.num_chunks else []
    codes = _indices(enc)
    return codes, names


def _indices(enc: pa.ChunkedArray) -> np.ndarray:
    """int32 dictionary indices of an encoded column, -1 for nulls (no fill pass when there are none)."""
    parts = [
        (c.indices.fill_null(-1) if c.indices.null_count else c.indices).to_numpy(zero_copy_only=False)
        for c in enc.chunks
    ]
    if not parts:
        return np.empty(0, np.int32)
    return (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(np.int32, copy=False)


def select(codes: np.ndarray, wanted: list[int], n_names: int) -> np.ndarray:
    """Rows whose code is in `wanted` (a lookup table: one pass, no sort)."""
    lut = np.zeros(n_names + 1, dtype=bool)
    lut[wanted] = True
    return lut[codes]  # code -1 (null) reads the last entry, which is False


def encode_arrow(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, pa.Array]:
    """Dictionary-encode a string column: (int32 codes with -1 for null, dictionary as an Arrow array)."""
    if isinstance(col, pa.Array):
        col = pa.chunked_array([col])
    if len(col) == 0:
        return np.empty(0, np.int32), pa.array([], pa.string())
    enc = col.dictionary_encode().unify_dictionaries()
    return _indices(enc), enc.chunk(0).dictionary


class Facts:
    """Lazily computed arrays of one profile (see module doc)."""

    def __init__(self, profile: Profile) -> None:
        # keep the tables, not the Profile, so the cache entry dies with the Profile object
        self.info = profile.info
        self.instructions = profile.instructions
        self.dma = profile.dma
        self.collectives = profile.collectives
        self.counters = profile.counters
        self.lean = False  # True: avoid per-event arrays that are not needed (set by streaming exporters)

    # ---- window -------------------------------------------------------------------------------------------------
    @cached_property
    def total_ns(self) -> int:
        if self.info.total_time_ns is not None:
            return int(self.info.total_time_ns)
        ends = []
        for name, table in (("i_end", self.instructions), ("d_end", self.dma)):
            if table.num_rows == 0:
                continue
            cached = self.__dict__.get(name)
            if cached is None and name == "d_end" and not self.lean:  # the analysis needs the DMA end times anyway
                cached = self.d_end
            if cached is not None:
                ends.append(int(cached.max()))
            else:  # no per-event array just for the maximum
                ends.append(int(pc.max(pc.add(table["ts"], table["duration"])).as_py()))
        c = self.collectives
        if c.num_rows:
            ends.append(int((to_numpy(c["ts"]) + to_numpy(c["duration"])).max()))
        return max(ends, default=0)

    # ---- instructions -------------------------------------------------------------------------------------------
    @cached_property
    def i_ts(self) -> np.ndarray:
        return to_numpy(self.instructions["ts"])

    @cached_property
    def i_dur(self) -> np.ndarray:
        return to_numpy(self.instructions["duration"])

    @cached_property
    def i_end(self) -> np.ndarray:
        return self.i_ts + self.i_dur

    @cached_property
    def i_ts_sorted(self) -> bool:
        return iv.is_sorted(self.i_ts)

    @cached_property
    def i_id(self) -> np.ndarray:
        return to_numpy(self.instructions["id"])

    @cached_property
    def engine(self) -> tuple[np.ndarray, list[str]]:
        return self.strings("instructions", "engine")

    @cached_property
    def track(self) -> tuple[np.ndarray, list[str]]:
        return self.strings("instructions", "track")

    def i_col(self, name: str) -> np.ndarray:
        """A numeric instructions column (cached)."""
        key = f"_i_{name}"
        if key not in self.__dict__:
            self.__dict__[key] = to_numpy(self.instructions[name])
        return self.__dict__[key]

    def i_sum(self, name: str) -> int:
        """The sum of a numeric instructions column (cached; 0 without instructions); `preset_sums` may give it
        for a column the profile no longer holds."""
        key = f"_isum_{name}"
        if key not in self.__dict__:
            n = self.instructions.num_rows
            self.__dict__[key] = int(to_numpy(self.instructions[name]).sum()) if n else 0
        return self.__dict__[key]

    def engine_mask(self, engine: str) -> np.ndarray:
        """Rows of one engine (not cached: a byte per instruction per engine, one comparison to remake)."""
        codes, names = self.engine
        return codes == names.index(engine) if engine in names else np.zeros(codes.size, dtype=bool)

    def engine_sum(self, engine: str, column: str) -> int:
        """Exact int64 sum of an instructions column over one engine's rows (one pass per column, cached; no
        per-row temporaries: an in-place accumulation by code, not a float bincount over intp codes)."""
        key = f"_esum_{column}"
        if key not in self.__dict__:
            codes, names = self.engine
            values = self.i_dur if column == "duration" else self.i_col(column)
            sums = np.zeros(len(names), np.int64)
            np.add.at(sums, codes, values)  # engine is non-nullable: codes >= 0
            self.__dict__[key] = {n: int(v) for n, v in zip(names, sums, strict=True)}
        return self.__dict__[key].get(engine, 0)

    @cached_property
    def engine_counts(self) -> dict[str, int]:
        codes, names = self.engine
        counts = np.zeros(len(names), np.int64)
        np.add.at(counts, codes, 1)  # in place (a bincount converts the codes to intp first)
        return {n: int(c) for n, c in zip(names, counts, strict=True)}  # engine is non-nullable: codes >= 0

    def engine_merged(self, engine: str) -> tuple[np.ndarray, np.ndarray]:
        """Disjoint busy intervals of one engine (cached)."""
        key = f"_merged_{engine}"
        if key not in self.__dict__:
            if engine not in self.engine[1]:
                return np.empty(0, np.int64), np.empty(0, np.int64)
            n = self.engine_counts[engine]
            core = load_compiled("nprof.analysis.engine_core", n, ENGINE_COMPILED_FROM, loaded="numba")
            if core is not None and self.i_ts_sorted:  # one pass over the columns in place (the same intervals)
                codes, names = self.engine
                self.__dict__[key] = core.merge_code(codes, names.index(engine), self.i_ts, self.i_dur)
            else:
                rows = self.engine_rows(engine)
                ts = self.i_ts[rows]
                self.__dict__[key] = iv.merge(ts, ts + self.i_dur[rows])
        return self.__dict__[key]

    def engine_rows(self, engine: str) -> np.ndarray:
        """Ascending table positions of one engine's instructions (a view of `engine_groups`)."""
        names = self.engine[1]
        if engine not in names:
            return np.empty(0, np.int64)
        group_codes, offsets, order = self.engine_groups
        g = int(np.searchsorted(group_codes, names.index(engine)))
        if g >= group_codes.size or group_codes[g] != names.index(engine):
            return np.empty(0, np.int64)
        return order[offsets[g] : offsets[g + 1]]

    @cached_property
    def engine_groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Instruction rows grouped by engine (one radix sort instead of a mask per engine)."""
        from nprof.analysis.sources import group_rows

        return group_rows(self.engine[0])

    @cached_property
    def engines_present(self) -> list[str]:
        """Engines with at least one instruction, in schema order then name order."""
        present = {n for n, c in self.engine_counts.items() if c}
        order = ("tensor", "vector", "scalar", "gpsimd", "sync", "cc", "other")
        return [e for e in order if e in present] + sorted(present - set(order))

    @cached_property
    def compute_merged(self) -> tuple[np.ndarray, np.ndarray]:
        """Union of the compute engines' busy time: their (cached, disjoint) per-engine unions merged into it one
        engine at a time (the union is the same whatever the grouping; timsort merges the two sorted runs of each
        step in about linear time). The running union is small where engines overlap, so each step's temporaries
        are about one engine's intervals, not all engines' at once (~15 bytes/event less peak at 10^7)."""
        union = np.empty(0, np.int64), np.empty(0, np.int64)
        for e in self.engine[1]:
            if e in COMPUTE_ENGINES:
                starts, ends = self.engine_merged(e)
                union = iv.merge(np.concatenate([union[0], starts]), np.concatenate([union[1], ends]))
        return union

    @cached_property
    def tensor_matrix_mask(self) -> np.ndarray:
        """Instructions drawn on the TensorMatrix row (the `tensor.moving` track, else every tensor instruction)."""
        encoded = "_str_instructions_track" in self.__dict__ or recall(self.instructions, "track") is not None
        if encoded:  # codes already made (perfetto export) or read from the file: no string comparison
            codes, names = self.track
            on_track = codes == names.index(TENSOR_MATRIX_TRACK) if TENSOR_MATRIX_TRACK in names else None
            return on_track if on_track is not None and on_track.any() else self.engine_mask("tensor")
        if self.instructions.num_rows == 0:
            return np.zeros(0, dtype=bool)
        # one string comparison is cheaper than dictionary-encoding the whole track column
        mask = to_numpy(pc.equal(self.instructions["track"], TENSOR_MATRIX_TRACK), bool)
        return mask if mask.any() else self.engine_mask("tensor")

    # ---- dma ----------------------------------------------------------------------------------------------------
    @cached_property
    def d_ts(self) -> np.ndarray:
        return to_numpy(self.dma["ts"])

    @cached_property
    def d_dur(self) -> np.ndarray:
        return to_numpy(self.dma["duration"])

    @cached_property
    def d_end(self) -> np.ndarray:
        return self.d_ts + self.d_dur

    @cached_property
    def d_id(self) -> np.ndarray:
        return to_numpy(self.dma["id"])

    @cached_property
    def d_bytes(self) -> np.ndarray:
        return to_numpy(self.dma["bytes"])

    @cached_property
    def d_partitions(self) -> np.ndarray:
        return np.maximum(to_numpy(self.dma["partitions"]), 1)

    @cached_property
    def queue(self) -> tuple[np.ndarray, list[str]]:
        return self.strings("dma", "queue")

    @cached_property
    def tensor(self) -> tuple[np.ndarray, list[str]]:
        return self.strings("dma", "tensor")

    @cached_property
    def queue_groups(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """DMA rows grouped by queue: (queue codes, offsets, rows) as in `sources.group_rows`."""
        from nprof.analysis.sources import group_rows

        return group_rows(self.queue[0])

    @cached_property
    def direction(self) -> tuple[np.ndarray, list[str]]:
        return self.strings("dma", "direction")

    def direction_mask(self, *, src: str | None = None, dst: str | None = None) -> np.ndarray:
        """DMA rows whose direction reads from `src` and/or writes to `dst` ("hbm->sbuf": src hbm, dst sbuf)."""
        codes, names = self.direction
        ok = []
        for i, name in enumerate(names):
            a, _, b = name.partition("->")
            if (src is None or a.strip() == src) and (dst is None or b.strip() == dst):
                ok.append(i)
        return select(codes, ok, len(names))

    @cached_property
    def dma_merged(self) -> tuple[np.ndarray, np.ndarray]:
        return iv.merge(self.d_ts, self.d_end)

    # ---- sources and memoised pass results -----------------------------------------------------------------------
    def source(self, table: str) -> tuple[np.ndarray, list[str]]:
        """Codes of each row's source location (nki_source_location, else hlo_name, else layer; -1 when none)."""
        key = f"_source_{table}"
        if key not in self.__dict__:
            t = self.instructions if table == "instructions" else self.dma
            if t.num_rows == 0:
                self.__dict__[key] = (np.empty(0, np.int32), [])
            else:
                from nprof.analysis.sources import coalesce_codes

                cols = [c for c in ("nki_source_location", "hlo_name", "layer") if t[c].null_count < t.num_rows]
                # the columns' own (shared, cached) encodings combined: no decoding and re-encoding of strings
                self.__dict__[key] = coalesce_codes([self.strings(table, c) for c in cols]) if cols else (
                    np.full(t.num_rows, -1, np.int32), [])  # fmt: skip
        return self.__dict__[key]

    def column(self, table: str, name: str) -> np.ndarray | tuple[np.ndarray, pa.Array]:
        """A column of `table` as numpy (numeric) or (codes, dictionary) for strings; cached."""
        key = f"_col_{table}_{name}"
        if key not in self.__dict__:
            t = self.instructions if table == "instructions" else self.dma
            col = t[name]
            if pa.types.is_dictionary(col.type):  # Profile.load(encoded=True): codes read from the file
                self.__dict__[key] = recall(t, name) or encode_arrow(plain(col))
            elif pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                self.__dict__[key] = recall(t, name) or encode_arrow(col)  # codes read from the file, if any
            else:
                self.__dict__[key] = to_numpy(col, bool if pa.types.is_boolean(col.type) else np.int64)
        return self.__dict__[key]

    def strings(self, table: str, name: str) -> tuple[np.ndarray, list[str]]:
        """A string column as (int32 codes, -1 for null; distinct values), sharing `column`'s encoding."""
        key = f"_str_{table}_{name}"
        if key not in self.__dict__:
            codes, dictionary = self.column(table, name)
            self.__dict__[key] = (codes, dictionary.to_pylist())
        return self.__dict__[key]

    def take(self, key: str, compute: Callable[[], T]) -> T:
        """The value `preset` gave for `key`, handed out once (then forgotten), else `compute()` (not cached)."""
        value = self.__dict__.pop(f"_once_{key}", None)
        return compute() if value is None else value

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """Compute a value once per profile (e.g. a pass result another pass reuses)."""
        key = f"_memo_{key}"
        if key not in self.__dict__:
            self.__dict__[key] = compute()
        return self.__dict__[key]

    def forget(self, key: str) -> None:
        """Drop the value `memo` keeps for `key`, if any (a later `memo(key, ...)` computes it again)."""
        self.__dict__.pop(f"_memo_{key}", None)

    def shed(self, names: Iterable[str]) -> None:
        """Drop these cached per-event arrays (names of SHEDDABLE) now, if computed: a later use computes them
        again, the same values (`nprof.analysis.each_pass` sheds each once no later pass reads it)."""
        for name in names:
            if name not in SHEDDABLE:
                raise ValueError(f"not a sheddable fact: {name!r}; one of {', '.join(SHEDDABLE)}")
            self.__dict__.pop(name, None)

    def i_end_now(self) -> np.ndarray:
        """`i_end`, cached or else made for the caller only (not cached: 8 bytes per instruction)."""
        cached = self.__dict__.get("i_end")
        return cached if cached is not None else self.i_ts + self.i_dur


# cached per-event arrays a caller may drop (`Facts.shed`): derived from the columns, recomputed on use
SHEDDABLE = ("i_end", "d_end", "d_partitions", "engine_groups", "queue_groups", "tensor_matrix_mask")


_CACHE: dict[int, tuple[weakref.ref[Profile], Facts]] = {}


def _evict(key: int, _ref: object) -> None:
    """Drop a collected profile's facts (the weakref callback)."""
    _CACHE.pop(key, None)


def facts(profile: Profile) -> Facts:
    """The cached Facts of `profile` (dropped when the profile is garbage-collected)."""
    key = id(profile)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is profile:
        return hit[1]
    f = Facts(profile)
    _CACHE[key] = (weakref.ref(profile, partial(_evict, key)), f)
    return f


def preset(profile: Profile, sums: dict[str, int], once: dict[str, object]) -> None:
    """Give the facts of `profile` these instructions column sums (`Facts.i_sum`: column -> sum as it computes
    it) and values read once (`Facts.take`: key -> value as its reader computes it), so a profile cut to fewer
    columns (the store's ingest: `nprof.store.lean`) answers them without the columns."""
    f = facts(profile)
    for name, total in sums.items():
        f.__dict__[f"_isum_{name}"] = total
    for key, value in once.items():
        f.__dict__[f"_once_{key}"] = value


def release(profile: Profile, keep_strings: bool = False, into: Profile | None = None) -> None:
    """Drop the cached Facts of `profile` now (a caller done with the analysis frees its per-event arrays;
    a later `facts(profile)` recomputes them). `keep_strings`: the string columns' codes (`Facts.column`)
    stay cached in a fresh Facts (4 bytes per row each, dear to recompute for a Profile not read from a file),
    of `into` when given: a profile holding the same instructions and dma rows (a column subset of them)."""
    hit = _CACHE.get(id(profile))
    if hit is not None and hit[0]() is profile:
        del _CACHE[id(profile)]
        if keep_strings:
            kept = {k: v for k, v in hit[1].__dict__.items() if k.startswith("_col_") and isinstance(v, tuple)}
            facts(into if into is not None else profile).__dict__.update(kept)
