"""Host rendezvous of multi-process captures: measured waits across ranks and the clock offsets of hosts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nprof.capture.rendezvous import (
    Spans,
    align_ranks,
    aligned_files,
    host_waits,
    needs_alignment,
    pair_offset,
    rank_spans,
)
from nprof.capture.system import EXCHANGE_TRACK, origin_unix_ns
from nprof.profile import Profile, ProfileInfo

BASE = 1_790_000_000_000_000_000  # a Unix time in ns


def _reference_waits(starts: list[list[int]], ends: list[list[int]]) -> list[list[int]]:
    """Plain loops: the k-th row's wait = last start among the ranks having it - own start, capped at duration."""
    out = []
    for r, row in enumerate(starts):
        waits = []
        for k, s in enumerate(row):
            last = max(other[k] for other in starts if k < len(other))
            waits.append(max(0, min(last - s, ends[r][k] - s)))
        out.append(waits)
    return out


def test_host_waits_match_the_plain_reference_on_random_rows() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        ranks = int(rng.integers(1, 6))
        starts = [np.sort(rng.integers(0, 10_000, int(rng.integers(0, 8)))) for _ in range(ranks)]
        ends = [s + rng.integers(0, 3_000, s.size) for s in starts]
        spans = [Spans(np.arange(s.size), s, e, np.ones(s.size, bool)) for s, e in zip(starts, ends, strict=True)]
        got = [w.tolist() for w in host_waits(spans)]
        assert got == _reference_waits([s.tolist() for s in starts], [e.tolist() for e in ends])


def _blocking_ops(rng: np.random.Generator, n_ops: int, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """True (enter, exit) ranks x ops of blocking collectives: every rank leaves after the last one entered."""
    t = np.cumsum(rng.integers(1_000_000, 5_000_000, n_ops)).astype(np.float64)
    enter = t[None, :] + rng.integers(0, 2_000_000, (ranks, n_ops))
    leave = enter.max(axis=0)[None, :] + rng.integers(5_000, 60_000, (ranks, n_ops))
    return enter, leave


def test_pair_offset_bound_holds_and_contains_the_true_offset() -> None:
    rng = np.random.default_rng(3)
    for trial in range(40):
        ranks = 4
        on_b = np.array([False, False, True, True])
        delta = int(rng.integers(-50_000_000, 50_000_000))
        enter, leave = _blocking_ops(rng, int(rng.integers(1, 12)), ranks)
        enter[on_b] += delta  # host B's clock runs `delta` ahead
        leave[on_b] += delta
        off = pair_offset(enter, leave, on_b)
        assert off.ns is not None and off.error_ns is not None
        assert abs(off.ns - delta) <= off.error_ns, trial
        assert off.error_ns < 2_100_000  # at most about the spread of the arrivals


def test_pair_offset_unknown_without_operations() -> None:
    off = pair_offset(np.zeros((2, 0)), np.zeros((2, 0)), np.array([False, True]))
    assert off.ns is None and off.error_ns is None


def _rank(rank: int, host: str, local_origin: int, spans: list[tuple[int, int]], world: int) -> Profile:
    """A system profile of `rank` whose ts = 0 is `local_origin` on its host's clock, with exchange rows at
    the given local Unix (enter, exit) spans."""
    n = len(spans)
    ins = {
        "id": list(range(n)),
        "ts": [a - local_origin for a, _ in spans],
        "duration": [b - a for a, b in spans],
        "engine": ["other"] * n,
        "track": [EXCHANGE_TRACK] * n,
        "opcode": ["nprof::exchange"] * n,
        "hlo_name": [f"all-reduce#{k}" for k in range(n)],
    }
    meta = {
        "system": "1",
        "host": host,
        "trace.baseTimeNanoseconds": str(BASE),
        "trace.origin_ns": str(local_origin - BASE),
    }
    info = ProfileInfo(device="cpu", rank=rank, world_size=world, meta=meta)
    return Profile.build(info, instructions=ins)


def _two_node_job(delta: int) -> tuple[dict[int, Profile], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    enter, leave = _blocking_ops(rng, 6, 4)
    hosts = ["node-a", "node-a", "node-b", "node-b"]
    profiles = {}
    for r in range(4):
        shift = delta if hosts[r] == "node-b" else 0
        spans = [(int(a) + BASE + shift, int(b) + BASE + shift) for a, b in zip(enter[r], leave[r], strict=True)]
        profiles[r] = _rank(r, hosts[r], spans[0][0] - 1000, spans, 4)  # each capture's own origin
    return profiles, enter, leave


def test_align_ranks_removes_the_offset_of_another_node() -> None:
    delta = 37_000_000
    profiles, enter, _ = _two_node_job(delta)
    assert needs_alignment({r: p.info for r, p in profiles.items()})
    out = align_ranks(profiles)
    metas = [out[r].info.meta for r in range(4)]
    assert {m["system.job_origin_unix_ns"] for m in metas} == {metas[0]["system.job_origin_unix_ns"]}
    assert metas[0]["system.clock_offset_ns"] == "0" and metas[0]["system.clock_reference_host"] == "node-a"
    off, err = int(metas[2]["system.clock_offset_ns"]), int(metas[2]["system.clock_offset_error_ns"])
    assert abs(off - delta) <= err and metas[2]["system.clock_host"] == "node-b"
    assert not needs_alignment({r: p.info for r, p in out.items()})
    # on the aligned clock each rank's rows sit at their true time, within the error bound
    job = int(metas[0]["system.job_origin_unix_ns"])
    for r in range(4):
        starts = rank_spans(out[r], EXCHANGE_TRACK).start + job
        assert np.all(np.abs(starts - (enter[r] + BASE)) <= err)
    # the measured waits are matched across both nodes: the last to enter waited 0
    waits = np.array([out[r].instructions["wait_ns"].to_numpy() for r in range(4)])
    assert np.all(waits.min(axis=0) == 0) and waits.max() > 0


def test_one_host_is_one_clock_and_no_offset_is_recorded() -> None:
    profiles, _, _ = _two_node_job(0)
    same = {r: _rank(r, "node-a", origin_unix_ns(p) + 500 * r, [], 4) for r, p in profiles.items()}
    out = align_ranks(same)
    assert all("system.clock_offset_ns" not in p.info.meta for p in out.values())
    job = min(origin_unix_ns(p) for p in same.values())  # the earliest trace start
    assert {p.info.meta["system.job_origin_unix_ns"] for p in out.values()} == {str(job)}
    assert {origin_unix_ns(p) for p in out.values()} == {job}  # every rank's ts = 0 is that instant


def test_aligned_files_leaves_aligned_groups_and_the_users_files_alone(tmp_path: Path) -> None:
    profiles, _, _ = _two_node_job(5_000_000)
    files = []
    for r, p in profiles.items():
        files.append((r, p.save(tmp_path / f"profile_rank_{r}.ntff")))
    before = [f.read_bytes() for _, f in files]
    work = tmp_path / "work"
    work.mkdir()
    got = aligned_files(files, work)
    assert [p.parent for _, p in got] == [work] * 4 and [f.read_bytes() for _, f in files] == before
    again = aligned_files(got, tmp_path)
    assert again == got  # already on one clock: used as they are


@pytest.mark.parametrize(
    ("metas", "expected"),
    [
        ([{"system": "1", "system.job_origin_unix_ns": "5", "host": "a"}] * 2, False),
        (
            [
                {"system": "1", "system.job_origin_unix_ns": "5", "host": "a"},
                {"system": "1", "system.job_origin_unix_ns": "6", "host": "a"},
            ],
            True,
        ),
        (
            [
                {"system": "1", "system.job_origin_unix_ns": "5", "host": "a"},
                {"system": "1", "system.job_origin_unix_ns": "5", "host": "b"},
            ],
            True,
        ),
        ([{"host": "a"}, {"host": "b"}], False),  # not system profiles: simulated jobs share the model's clock
    ],
)
def test_needs_alignment(metas: list[dict[str, str]], expected: bool) -> None:
    infos = {r: ProfileInfo(device="cpu", rank=r, world_size=2, meta=m) for r, m in enumerate(metas)}
    assert needs_alignment(infos) is expected
