"""The index of a multi-worker group: what the aggregated view needs of every rank, in one place.

A group of 1,024 ranks cannot be answered by opening 1,024 profile databases per request. `nprof view -d`
therefore writes, beside the store's profiles, `groups/<group id>/`:

* `ranks.parquet`: one row per rank (rank, profile_id, source, nd_idx, nc_idx, total_time_ns);
* `collectives.parquet`: every rank's own `collectives` rows (the rows whose `rank` is that rank), in rank
  order, without the `ranks` column (each op's participant list: ranks x ops x ranks values at scale) — the
  input of `nprof.analysis.collectives.analyze_group`;
* `exchanges.parquet`: the host's measured data exchanges of simulated collectives (system profiles: rows of
  track `nprof.exchange`), one row per (rank, op): rank, op, ts, wait_ns (`analysis.collectives.exchange_facts`);
* `busy.npy`: int64 [ranks, FINE_BINS]: per rank, the summed duration (ns) of its compute-engine instructions
  (COMPUTE_ENGINES) credited to the bin where each starts, bin = (ts * FINE_BINS) // span (capped to the last
  bin) on [0, span), span = the longest rank's total time. Any bin count dividing FINE_BINS is an exact sum
  of these (`busy_bins`).
* `index.json`: {"version", "span", "fine_bins", "ranks"}, written last (its presence marks a complete index).

Contract:
* `rank_digest(path, rank, span) -> RankDigest` reads one rank file (in a worker process: memory holds one
  rank); `write_index(directory, digests, span)` writes the files atomically (a temporary directory renamed
  into place), consuming `digests` one at a time (busy rows go straight to a memory-mapped file).
* `read_index(directory) -> GroupIndex | None` (None when there is no complete index of this version);
  `GroupIndex.facts()` gives rank -> RankFacts (with its exchanges); `busy_bins(index, bins) -> float64
  [ranks, bins]` (mean engines busy per bin, capped at len(COMPUTE_ENGINES); NprofError when `bins` does not
  divide FINE_BINS).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nprof.analysis.collectives import EXCHANGE_TRACK, RankFacts, exchange_facts
from nprof.errors import NprofError
from nprof.profile import Profile
from nprof.profile.schema import TABLES

COMPUTE_ENGINES = ("tensor", "vector", "scalar", "gpsimd", "sync")
FINE_BINS = 4800  # divisible by 16, 32, 64, 100, 200, 300, 400, 600, 800, 960, 1200, 1600, 2400
VERSION = 2
_EXCHANGES = pa.schema([("rank", pa.int64()), ("op", pa.int64()), ("ts", pa.int64()), ("wait_ns", pa.int64())])


@dataclass(frozen=True)
class RankDigest:
    """What the group index keeps of one rank."""

    rank: int
    profile_id: str
    source: str
    nd_idx: int
    nc_idx: int
    total_time_ns: int
    collectives: pa.Table
    busy: np.ndarray  # int64 [FINE_BINS]
    exchanges: pa.Table  # _EXCHANGES


def fine_busy(ts: np.ndarray, dur: np.ndarray, span: int, bins: int = FINE_BINS) -> np.ndarray:
    """int64 [bins]: durations summed by start bin (ts * bins) // span, capped to the last; negative ts dropped."""
    ts = np.asarray(ts, np.int64)
    keep = ts >= 0
    b = np.minimum((ts[keep] * bins) // max(int(span), 1), bins - 1)
    return np.bincount(b, weights=np.asarray(dur, np.int64)[keep], minlength=bins).astype(np.int64)


def rank_digest(path: str, rank: int, profile_id: str, span: int) -> RankDigest:
    """Read rank file `path` and digest it (see module doc)."""
    p = Profile.load(path)
    ins = p.instructions
    compute = pc.is_in(ins.column("engine"), pa.array(COMPUTE_ENGINES))
    sel = ins.filter(compute)
    busy = fine_busy(sel.column("ts").to_numpy(), sel.column("duration").to_numpy(), span)
    cc = p.collectives
    mine = cc.filter(pc.equal(cc.column("rank"), rank)) if cc.num_rows else cc
    ex: dict[int, tuple[int, int]] = {}
    if cc.num_rows and ins.num_rows:  # as nprof.web.group_api reads them from a rank's database
        rows = ins.filter(pc.equal(ins.column("track"), EXCHANGE_TRACK)).sort_by("ts")
        ex = exchange_facts(rows.column("hlo_name").to_pylist(), rows.column("ts").to_pylist(),
                            rows.column("wait_ns").to_pylist())  # fmt: skip
    exchanges = pa.table({"rank": [rank] * len(ex), "op": list(ex), "ts": [t for t, _ in ex.values()],
                          "wait_ns": [w for _, w in ex.values()]}, schema=_EXCHANGES)  # fmt: skip
    return RankDigest(
        rank, profile_id, str(path), int(p.info.nd_idx or 0), int(p.info.nc_idx or 0), int(p.total_time_ns or 0),
        mine, busy, exchanges,
    )  # fmt: skip


def write_index(directory: Path, digests: Iterable[RankDigest], n_ranks: int, span: int) -> None:
    """Write the index of `n_ranks` digests (in rank order) to `directory`, replacing any old one."""
    tmp = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    busy = np.lib.format.open_memmap(tmp / "busy.npy", mode="w+", dtype=np.int64, shape=(n_ranks, FINE_BINS))
    rows: dict[str, list] = {k: [] for k in ("rank", "profile_id", "source", "nd_idx", "nc_idx", "total_time_ns")}
    parts: list[pa.Table] = []
    exchanges: list[pa.Table] = []
    for i, d in enumerate(digests):
        for k in rows:
            rows[k].append(getattr(d, k))
        busy[i] = d.busy
        parts.append(d.collectives)
        exchanges.append(d.exchanges)
    busy.flush()
    del busy
    pq.write_table(pa.table(rows), tmp / "ranks.parquet")
    schema = pa.schema([f for f in TABLES["collectives"] if f.name != "ranks"])
    pq.write_table(pa.concat_tables([t.select(schema.names).cast(schema) for t in parts], promote_options="none")
                   if parts else schema.empty_table(), tmp / "collectives.parquet")  # fmt: skip
    pq.write_table(pa.concat_tables(exchanges) if exchanges else _EXCHANGES.empty_table(), tmp / "exchanges.parquet")
    (tmp / "index.json").write_bytes(orjson.dumps({"version": VERSION, "span": span, "fine_bins": FINE_BINS,
                                                   "ranks": n_ranks}))  # fmt: skip
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(tmp, directory)


@dataclass(frozen=True)
class GroupIndex:
    """An opened group index (see module doc)."""

    ranks: pa.Table
    collectives: pa.Table
    busy: np.ndarray  # memory-mapped int64 [ranks, FINE_BINS]
    span: int
    exchanges: pa.Table

    def facts(self) -> dict[int, RankFacts]:
        """rank -> RankFacts (its collectives rows, total time, nd/nc, profile id)."""
        cc = self.collectives
        ranks = cc.column("rank").to_numpy() if cc.num_rows else np.zeros(0, np.int64)
        if np.any(np.diff(ranks) < 0):  # written in rank order; sort if another writer did not
            order = np.argsort(ranks, kind="stable")
            cc, ranks = cc.take(pa.array(order)), ranks[order]
        wanted = self.ranks.column("rank").to_numpy()
        starts = np.searchsorted(ranks, wanted, side="left").tolist()
        ends = np.searchsorted(ranks, wanted, side="right").tolist()
        ex: dict[int, dict[int, tuple[int, int]]] = {}
        for r, op, t, w in zip(*(self.exchanges.column(k).to_pylist() for k in ("rank", "op", "ts", "wait_ns")),
                               strict=True):  # fmt: skip
            ex.setdefault(r, {})[op] = (t, w)
        out = {}
        for row, a, b in zip(self.ranks.to_pylist(), starts, ends, strict=True):
            out[row["rank"]] = RankFacts(cc.slice(a, b - a), row["total_time_ns"], row["nd_idx"], row["nc_idx"],
                                         row["profile_id"], ex.get(row["rank"], {}))  # fmt: skip
        return out


def read_index(directory: Path) -> GroupIndex | None:
    """The complete index at `directory`, or None (see module doc)."""
    try:
        head = orjson.loads((directory / "index.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if head.get("version") != VERSION or head.get("fine_bins") != FINE_BINS:
        return None
    return GroupIndex(
        pq.read_table(directory / "ranks.parquet"),
        pq.read_table(directory / "collectives.parquet"),
        np.load(directory / "busy.npy", mmap_mode="r"),
        int(head["span"]),
        pq.read_table(directory / "exchanges.parquet"),
    )


def busy_bins(index: GroupIndex, bins: int) -> np.ndarray:
    """float64 [ranks, bins]: mean compute engines busy per bin of [0, span) (see module doc)."""
    if bins < 1 or FINE_BINS % bins:
        raise NprofError(f"bins={bins} must divide {FINE_BINS} (e.g. 16, 64, 400, 600, 1200)")
    width = max(1.0, index.span / bins)
    sums = np.asarray(index.busy).reshape(index.busy.shape[0], bins, FINE_BINS // bins).sum(axis=2)
    return np.minimum(sums / width, len(COMPUTE_ENGINES))
