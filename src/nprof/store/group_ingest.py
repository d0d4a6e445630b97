"""Parallel ingest of the ranks of a multi-worker capture (`nprof view -d DIR`).

Contract:
* `ingest_group(store, files, group_id, display_name, thresholds=None, eager=None) -> list[(rank, profile id)]`
  writes the group index (`nprof.store.group_index`: every rank's collectives, totals and compute activity,
  read by `workers` processes, one rank each at a time, under one progress bar "Indexing N workers"), then
  fully ingests every rank when there are at most EAGER_RANKS of them (or `eager` says so); larger groups
  ingest a rank when it is first opened (`ensure_rank`). Returns every rank's (future) profile id.
* `ensure_rank(store, group, rank, thresholds=None) -> catalog entry`: the rank's profile, ingested from the
  source file the group recorded when it is not stored yet (with the device profiles of a system profile).
* `index_dir(store, group_id)`: where the group's index lives (`<store>/groups/<id>`).

`ingest_ranks(store, files, group_id, display_name, workers=None) -> list[(rank, profile id)]`
ingests every `(rank, path)` of `files` as profile `<group_id>.rank<r>` (display name `<name> rank <r>`,
replacing any old one, tagged with the group) and returns them in rank order. With more than two files and
more than one CPU, `workers` processes (default: min(4, CPUs)) ingest in parallel — each opens the same
store directory; the catalog's file lock serialises their registrations — under one progress bar ("Ingesting
N workers"); otherwise it runs in this process. A failing rank raises its NprofError (other ranks already
ingested stay stored, as with serial ingest). Worker processes are started with "spawn" (no fork of a
process holding DuckDB connections).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nprof.errors import NprofError
from nprof.profile import Profile
from nprof.progress import progress
from nprof.store.group_index import RankDigest, rank_digest, write_index
from nprof.store.store import Store

EAGER_RANKS = 32  # groups up to this size are ingested whole at once (each rank ~1 s of CPU)

if TYPE_CHECKING:
    from nprof.analysis.thresholds import Thresholds


def _ingest_one(
    store_dir: str, path: str, profile_id: str, display_name: str, group: str, thresholds: Thresholds | None
) -> str:
    """Ingest one rank file into the store at `store_dir` (in a worker process or this one); its id."""
    os.environ["NPROF_NO_PROGRESS"] = "1"  # one bar, in the parent
    store = Store(store_dir)
    try:
        entry, _ = store.ingest_file(
            path, profile_id=profile_id, display_name=display_name, force=True, group=group, thresholds=thresholds
        )
        return str(entry["id"])
    finally:
        store.close()


def _workers(n_jobs: int, workers: int | None) -> int:
    return min(workers if workers is not None else min(4, os.cpu_count() or 1), n_jobs)


def rank_id(group_id: str, rank: int) -> str:
    return f"{group_id}.rank{rank}"


def index_dir(store: Store, group_id: str) -> Path:
    return store.dir / "groups" / group_id


def build_index(store: Store, files: Sequence[tuple[int, Path]], group_id: str, workers: int | None = None) -> None:
    """Write the group index of `files` (rank order) in parallel worker processes (see module doc)."""
    files = sorted(files)
    span = max([int(Profile.read_info(path).total_time_ns or 0) for _, path in files] + [1])
    jobs = [(str(path), rank, rank_id(group_id, rank), span) for rank, path in files]
    n = _workers(len(jobs), workers)
    with progress(len(jobs), f"Indexing {len(jobs)} workers") as bar:

        def digests() -> Iterator[RankDigest]:
            if n <= 1 or len(jobs) <= 2:
                for job in jobs:
                    yield rank_digest(*job)
                    bar.advance(1)
                return
            with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as pool:
                for d in pool.map(_digest, jobs, chunksize=8):
                    yield d
                    bar.advance(1)

        write_index(index_dir(store, group_id), digests(), len(jobs), span)


def _digest(job: tuple[str, int, str, int]) -> RankDigest:
    return rank_digest(*job)


def ingest_group(
    store: Store,
    files: Sequence[tuple[int, Path]],
    group_id: str,
    display_name: str,
    thresholds: Thresholds | None = None,
    eager: bool | None = None,
) -> list[tuple[int, str]]:
    """Index the group, then ingest its ranks now or on first open (see module doc)."""
    build_index(store, files, group_id)
    if eager if eager is not None else len(files) <= EAGER_RANKS:
        return ingest_ranks(store, files, group_id, display_name, thresholds=thresholds)
    for rank, _ in files:  # a re-ingested group: its ranks' old profiles must not stand in for the new files
        if store.catalog.get(rank_id(group_id, rank)) is not None:
            store.delete(rank_id(group_id, rank))
    return sorted((rank, rank_id(group_id, rank)) for rank, _ in files)


def ensure_rank(store: Store, group: dict[str, Any], rank: int, thresholds: Thresholds | None = None) -> dict:
    """The stored profile of `rank` of `group`, ingested now from its recorded source when missing."""
    from nprof.store.system_links import ingest_device_profiles

    pid = next((r["profile_id"] for r in group["ranks"] if r["rank"] == rank), None)
    if pid is None:
        raise NprofError(f"group {group['id']} has no rank {rank}")
    entry = store.catalog.get(pid)
    if entry is not None:
        return entry
    source = (group.get("sources") or {}).get(str(rank))
    if not source or not Path(source).is_file():
        raise NprofError(f"rank {rank} of group {group['id']} is not ingested and its file {source} is gone; "
                         "run nprof view -d DIR --force again")  # fmt: skip
    name = f"{group.get('display_name') or group['id']} rank {rank}"
    entry, _ = store.ingest_file(source, profile_id=pid, display_name=name, group=group["id"], thresholds=thresholds)
    ingest_device_profiles(store, pid, source, thresholds=thresholds)
    return entry


def ingest_ranks(
    store: Store,
    files: Sequence[tuple[int, Path]],
    group_id: str,
    display_name: str,
    workers: int | None = None,
    thresholds: Thresholds | None = None,
) -> list[tuple[int, str]]:
    """Ingest every rank file as a profile of group `group_id` (see module doc), findings by `thresholds`."""
    jobs = [(rank, str(path), rank_id(group_id, rank), f"{display_name} rank {rank}") for rank, path in files]
    n = _workers(len(jobs), workers)
    done: list[tuple[int, str]] = []
    with progress(len(jobs), f"Ingesting {len(jobs)} workers") as bar:
        if n <= 1 or len(jobs) <= 2:
            for rank, path, pid, name in jobs:
                done.append((rank, _ingest_one(str(store.dir), path, pid, name, group_id, thresholds)))
                bar.advance(1)
        else:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
                futures = {
                    pool.submit(_ingest_one, str(store.dir), path, pid, name, group_id, thresholds): rank
                    for rank, path, pid, name in jobs
                }
                for fut in as_completed(futures):
                    done.append((futures[fut], fut.result()))
                    bar.advance(1)
    return sorted(done)
