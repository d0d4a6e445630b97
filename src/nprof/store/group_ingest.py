"""Parallel ingest of the ranks of a multi-worker capture (`nprof view -d DIR`).

Contract: `ingest_ranks(store, files, group_id, display_name, workers=None) -> list[(rank, profile id)]`
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
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import TYPE_CHECKING

from nprof.progress import progress
from nprof.store.store import Store

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


def ingest_ranks(
    store: Store,
    files: Sequence[tuple[int, Path]],
    group_id: str,
    display_name: str,
    workers: int | None = None,
    thresholds: Thresholds | None = None,
) -> list[tuple[int, str]]:
    """Ingest every rank file as a profile of group `group_id` (see module doc), findings by `thresholds`."""
    jobs = [(rank, str(path), f"{group_id}.rank{rank}", f"{display_name} rank {rank}") for rank, path in files]
    n = workers if workers is not None else min(4, os.cpu_count() or 1)
    done: list[tuple[int, str]] = []
    with progress(len(jobs), f"Ingesting {len(jobs)} workers") as bar:
        if n <= 1 or len(jobs) <= 2:
            for rank, path, pid, name in jobs:
                done.append((rank, _ingest_one(str(store.dir), path, pid, name, group_id, thresholds)))
                bar.advance(1)
        else:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(n, len(jobs)), mp_context=ctx) as pool:
                futures = {
                    pool.submit(_ingest_one, str(store.dir), path, pid, name, group_id, thresholds): rank
                    for rank, path, pid, name in jobs
                }
                for fut in as_completed(futures):
                    done.append((futures[fut], fut.result()))
                    bar.advance(1)
    return sorted(done)
