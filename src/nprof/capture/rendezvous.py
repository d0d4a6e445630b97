"""Host rendezvous of a multi-process capture: the ranks' measured waits, and one clock for several nodes.

Contract:
* Rendezvous rows: the host spans of blocking operations every rank enters — gloo's collectives (track
  `cc:gloo`) and nprof's data exchange of each simulated collective (track `nprof.exchange`, an all-gather).
  The k-th row (by start) of a track is the same operation on every rank (gloo and the exchange run in order).
* `match_waits(profiles)`: every rendezvous row's `wait_ns` — and the gloo rows' `collectives` wait — becomes
  the last rank's start minus this rank's start, capped at the row's measured duration (a rank cannot wait
  longer than it was inside), on the profiles' common clock. Host clock, measured.
* `estimate_offsets(spans, hosts)`: the clock offset of every host against the reference host (that of the
  lowest rank), from the rendezvous of *blocking-for-all* kinds (all-reduce, all-gather, reduce-scatter,
  all-to-all, barrier, nprof's exchange: no rank can leave before every rank entered). With host clocks
  `local = true + o_h` and Δ = o_B - o_A, causality gives for every such operation, A-rank a and B-rank b:
  exit_b - o_B >= enter_a - o_A and exit_a - o_A >= enter_b - o_B, so Δ lies in
  [L, U] = [max(enter_b - exit_a), min(exit_b - enter_a)] over all operations. The estimate is the median
  over the operations of (median exit on B - median exit on A) — the end of a blocking collective is
  (nearly) one instant for all ranks — clamped into [L, U]; the error bound max(estimate - L, U - estimate)
  holds whenever the clocks do not drift during the run. `Offset(None, None)` when no operation was seen.
* `align_ranks(profiles) -> profiles`: every rank on one clock. With one host (one clock) the ranks are only
  moved so that ts = 0 is the earliest trace start of all ranks; with several hosts each host's estimated
  offset is removed first. Then `match_waits`. The manifest records `system.job_origin_unix_ns` (reference
  host's Unix ns of ts = 0), `system.ranks`, and with several hosts `system.clock_host`,
  `system.clock_reference_host`, `system.clock_offset_ns` (this host's clock minus the reference's, removed)
  and `system.clock_offset_error_ns` ("unknown" when not estimable: the rank is then left unaligned).
* `needs_alignment(infos)`: True when the ranks' manifests do not share one job clock (several captures,
  e.g. one per node) — `nprof view -d` then aligns them before ingest (`aligned_files`: aligned copies in a
  work directory, the user's files untouched).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nprof.capture.host_collectives import ALGORITHM as GLOO_ALGORITHM
from nprof.capture.host_collectives import TRACK as GLOO_TRACK
from nprof.capture.system import EXCHANGE_TRACK, origin_unix_ns, shift_profile
from nprof.profile import Profile, ProfileInfo

TRACKS = (GLOO_TRACK, EXCHANGE_TRACK)
_BLOCKING = {"gloo:all_reduce", "gloo:allreduce", "gloo:all_gather", "gloo:allgather", "gloo:reduce_scatter",
             "gloo:all_to_all", "gloo:alltoall", "gloo:barrier", "nprof::exchange"}  # fmt: skip


@dataclass(frozen=True)
class Spans:
    """One rank's rendezvous rows of one track, in start order (ns on the profile's clock unless said)."""

    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray
    blocking: np.ndarray  # bool: a blocking-for-all kind


@dataclass(frozen=True)
class Offset:
    """A host's clock minus the reference host's, and the bound on its error (None: not estimable)."""

    ns: int | None
    error_ns: int | None


def rank_spans(profile: Profile, track: str) -> Spans:
    """The rendezvous rows of `track` in `profile` (see module doc)."""
    t = profile.instructions
    t = t.filter(pc.equal(t["track"], track)) if t.num_rows else t
    t = t.sort_by("ts") if t.num_rows else t
    start = t["ts"].to_numpy().astype(np.int64) if t.num_rows else np.zeros(0, np.int64)
    dur = t["duration"].to_numpy().astype(np.int64) if t.num_rows else np.zeros(0, np.int64)
    ops = t["opcode"].to_pylist() if t.num_rows else []
    ids = t["id"].to_numpy().astype(np.int64) if t.num_rows else np.zeros(0, np.int64)
    return Spans(ids, start, start + dur, np.array([o in _BLOCKING for o in ops], bool))


def _matrix(values: list[np.ndarray], k: int) -> np.ndarray:
    """ranks x k float matrix of the first k values of each rank, NaN where a rank has fewer."""
    out = np.full((len(values), k), np.nan)
    for i, v in enumerate(values):
        out[i, : min(k, v.size)] = v[:k]
    return out


def host_waits(spans: list[Spans]) -> list[np.ndarray]:
    """Per rank, the measured wait of each of its rows: last start among the ranks that have the k-th row,
    minus its start, capped at its duration (never negative)."""
    k = max((s.start.size for s in spans), default=0)
    if k == 0:
        return [np.zeros(0, np.int64) for _ in spans]
    start = _matrix([s.start for s in spans], k)
    last = np.nanmax(start, axis=0)
    out = []
    for s in spans:
        n = s.start.size
        out.append(np.clip(np.minimum(last[:n] - s.start, s.end - s.start), 0, None).astype(np.int64))
    return out


def _set_waits(profile: Profile, track: str, spans: Spans, waits: np.ndarray) -> Profile:
    """`profile` with the wait of its `track` rows (and, for gloo, its gloo `collectives` rows) replaced."""
    if spans.ids.size == 0:
        return profile
    ins = profile.instructions
    wait = ins["wait_ns"].to_numpy().astype(np.int64).copy()
    row_of = {int(i): j for j, i in enumerate(ins["id"].to_numpy())}
    wait[[row_of[int(i)] for i in spans.ids]] = waits
    ins = ins.set_column(ins.schema.get_field_index("wait_ns"), "wait_ns", pa.array(wait, pa.int64()))
    cc = profile.collectives
    if track == GLOO_TRACK and cc.num_rows:
        mine = np.flatnonzero(np.asarray(pc.equal(cc["algorithm"], GLOO_ALGORITHM).fill_null(False)))
        order = mine[np.argsort(cc["id"].to_numpy()[mine], kind="stable")]
        cw = cc["wait_ns"].to_numpy().astype(np.int64).copy()
        n = min(order.size, waits.size)
        cw[order[:n]] = waits[:n]
        cc = cc.set_column(cc.schema.get_field_index("wait_ns"), "wait_ns", pa.array(cw, pa.int64()))
    return replace(profile, instructions=ins, collectives=cc)


def match_waits(profiles: Mapping[int, Profile]) -> dict[int, Profile]:
    """Every rank's rendezvous waits recomputed across all ranks on their common clock (see module doc)."""
    out = dict(profiles)
    for track in TRACKS:
        spans = {r: rank_spans(p, track) for r, p in out.items()}
        waits = host_waits(list(spans.values()))
        for (r, s), w in zip(spans.items(), waits, strict=True):
            out[r] = _set_waits(out[r], track, s, w)
    return out


def _host_ops(spans: list[Spans], origins: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(enter, exit) ranks x ops matrices in local Unix ns of the blocking rendezvous all `spans` share."""
    k = min((s.start.size for s in spans), default=0)
    keep = np.ones(k, bool)
    for s in spans:
        keep &= s.blocking[:k]
    enter = np.array([s.start[:k][keep] + o for s, o in zip(spans, origins, strict=True)], dtype=np.float64)
    leave = np.array([s.end[:k][keep] + o for s, o in zip(spans, origins, strict=True)], dtype=np.float64)
    return enter.reshape(len(spans), -1), leave.reshape(len(spans), -1)


def pair_offset(enter: np.ndarray, leave: np.ndarray, on_b: np.ndarray) -> Offset:
    """Δ = (clock of the ranks `on_b`) - (clock of the others) from blocking operations (module doc);
    `enter`/`leave` are ranks x ops local Unix ns."""
    a, b = ~on_b, on_b
    if enter.shape[1] == 0 or not a.any() or not b.any():
        return Offset(None, None)
    lower = float(np.max(enter[b].max(axis=0) - leave[a].min(axis=0)))
    upper = float(np.min(leave[b].min(axis=0) - enter[a].max(axis=0)))
    guess = float(np.median(np.median(leave[b], axis=0) - np.median(leave[a], axis=0)))
    if lower <= upper:
        guess = min(max(guess, lower), upper)
    error = max(guess - lower, upper - guess, 0.0)
    return Offset(round(guess), int(np.ceil(error)))


def estimate_offsets(spans: Mapping[int, list[Spans]], origins: Mapping[int, int],
                     hosts: Mapping[int, str]) -> dict[str, Offset]:  # fmt: skip
    """Each host's Offset against the host of the lowest rank (module doc); `spans[r]` are rank r's
    rendezvous Spans per track (TRACKS order), `origins[r]` the local Unix ns of its ts = 0."""
    ranks = sorted(spans)
    ref = hosts[ranks[0]]
    out = {ref: Offset(0, 0)}
    per_track = [_host_ops([spans[r][t] for r in ranks], [origins[r] for r in ranks]) for t in range(len(TRACKS))]
    enter = np.concatenate([e for e, _ in per_track], axis=1)
    leave = np.concatenate([x for _, x in per_track], axis=1)
    for host in sorted(set(hosts.values()) - {ref}):
        mask = np.array([hosts[r] in (ref, host) for r in ranks])
        on_b = np.array([hosts[r] == host for r in ranks])[mask]
        out[host] = pair_offset(enter[mask], leave[mask], on_b)
    return out


def host_of(info: ProfileInfo) -> str:
    """The host a rank ran on (the trace's host name), "" when unknown."""
    return str(info.meta.get("host") or info.meta.get("trace.host_name") or "")


def needs_alignment(infos: Mapping[int, ProfileInfo]) -> bool:
    """True when the ranks do not share one recorded job clock (see module doc)."""
    origins = {i.meta.get("system.job_origin_unix_ns") for i in infos.values()}
    aligned = len(origins) == 1 and None not in origins
    several = len({host_of(i) for i in infos.values()}) > 1
    return any(i.meta.get("system") == "1" for i in infos.values()) and (
        not aligned or (several and any("system.clock_offset_ns" not in i.meta for i in infos.values()))
    )


def _known(value: int | None) -> str:
    return "unknown" if value is None else str(value)


def align_ranks(profiles: Mapping[int, Profile]) -> dict[int, Profile]:
    """Every rank on one clock, waits matched across ranks, the alignment in the manifests (module doc)."""
    origins = {r: origin_unix_ns(p) for r, p in profiles.items()}
    hosts = {r: host_of(p.info) for r, p in profiles.items()}
    offsets: dict[str, Offset] = {hosts[min(hosts)]: Offset(0, 0)}
    if len(set(hosts.values())) > 1:
        spans = {r: [rank_spans(p, t) for t in TRACKS] for r, p in profiles.items()}
        offsets = estimate_offsets(spans, origins, hosts)
    true0 = {r: origins[r] - (offsets[hosts[r]].ns or 0) for r in profiles}
    job = min(true0.values())
    out = {}
    for r, p in profiles.items():
        shifted = shift_profile(p, true0[r] - job)
        extra = {"system.job_origin_unix_ns": str(job), "system.ranks": str(len(profiles))}
        if len(offsets) > 1:
            off = offsets[hosts[r]]
            extra |= {
                "system.clock_host": hosts[r],
                "system.clock_reference_host": hosts[min(hosts)],
                "system.clock_offset_ns": _known(off.ns),
                "system.clock_offset_error_ns": _known(off.error_ns),
            }
        info = shifted.info
        out[r] = replace(shifted, info=replace(info, meta={**info.meta, **extra}))
    return match_waits(out)


def aligned_files(files: list[tuple[int, Path]], work_dir: Path) -> list[tuple[int, Path]]:
    """`files` ((rank, profile path)) as they are when they share one job clock, else aligned copies
    (`align_ranks`) written into `work_dir` — the caller's files are never changed."""
    infos = {r: Profile.read_info(p) for r, p in files}
    if not needs_alignment(infos):
        return files
    aligned = align_ranks({r: Profile.load(p) for r, p in files})
    out = []
    for r, p in files:
        dest = work_dir / p.name
        aligned[r].save(dest)
        out.append((r, dest))
    return out
