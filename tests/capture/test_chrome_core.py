"""The compiled nesting passes (`chrome_core`) against the plain Python loops of `chrome_tree`."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nprof.capture import chrome_tree, open_profile

core = pytest.importorskip("nprof.capture.chrome_core")
FIXTURES = Path(__file__).parents[1] / "fixtures"


def _random_slices(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slices on a few tracks with many nestings, ties, zero durations and overruns."""
    track = rng.integers(0, 4, n).astype(np.int64)
    start = rng.integers(0, 3 * n + 1, n).astype(np.int64)
    end = start + rng.choice([0, 1, 2, 5, 40, 300], n)
    return track, start, end


@pytest.mark.parametrize("seed", range(40))
def test_compiled_nesting_matches_the_python_loops(seed: int) -> None:
    rng = np.random.default_rng(seed)
    track, start, end = _random_slices(rng, int(rng.integers(0, 400)))
    for clamp in (True, False):
        order, parent, end_c = chrome_tree.nest(track, start, end, core=core, clamp=clamp)
        ref_parent, ref_end = chrome_tree.python_nest(order, track, start, end, clamp)
        np.testing.assert_array_equal(parent, ref_parent)
        np.testing.assert_array_equal(end_c, ref_end)
    order, parent, end_c = chrome_tree.nest(track, start, end, core=core)
    candidate = rng.random(len(start)) < 0.5
    emitted, owner = core.work_pass(order, parent, candidate)
    ref_emitted, ref_owner = chrome_tree.python_work(order, parent, candidate)
    np.testing.assert_array_equal(emitted, ref_emitted)
    np.testing.assert_array_equal(owner, ref_owner)


@pytest.mark.parametrize("name", ["kineto_sync_mtia.json", "kineto_cuda_small.json"])
def test_import_is_the_same_with_the_compiled_passes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = open_profile(FIXTURES / name)
    monkeypatch.setattr(chrome_tree, "COMPILED_FROM", 0)
    fast = open_profile(FIXTURES / name)
    for table in ("instructions", "dma", "counters"):
        assert getattr(fast, table).equals(getattr(plain, table)), table


@pytest.mark.parametrize("seed", range(10))
def test_operands_all_matches_the_plain_per_slice_formatter(seed: int) -> None:
    from nprof.capture.chrome_events import ArgColumns
    from nprof.capture.chrome_rows import HOST_KEYS, KERNEL_KEYS, operands, operands_all

    rng = np.random.default_rng(seed)
    pools = {
        "Input Dims": [[[2, 3], []], [[4]], [[]]],
        "Input type": [["float", "Scalar"], ["c10::Half"], []],
        "Concrete Inputs": [["", "1"], ["7"]],
        "grid": [[1, 2, 1], [64, 1, 1]],
        "block": [[128, 1, 1]],
        "registers per thread": [32, 64, None],
        "shared memory": [0, 4096],
        "bytes": [16, 1 << 20, None],  # null, which is not the same as absent
    }
    for keys in (HOST_KEYS, KERNEL_KEYS):
        names = sorted({*keys, "bytes"})
        args = []
        for _ in range(200):
            a = {k: pools[k][int(rng.integers(len(pools[k])))] for k in names if rng.random() < 0.6}
            args.append(a)
        assert operands_all(ArgColumns.from_dicts(args), keys) == [operands(a) for a in args]


def _chain_reference(keys: list[Any], times: list[int], rows: list[int], n: int) -> list[list[int]]:
    """The plain loop `chrome_tree.chain_flows` vectorises: per (cat, id), sort (time, row), link pairs."""
    chains: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    for key, t, r in zip(keys, times, rows, strict=True):
        chains[key].append((t, r))
    deps: list[list[int]] = [[] for _ in range(n)]
    for points in chains.values():
        points.sort()
        for (_, a), (_, b) in itertools.pairwise(points):
            if a != b:
                deps[b].append(a)
    return deps


@pytest.mark.parametrize("seed", range(20))
def test_flow_chains_match_the_plain_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(0, 300)), 50
    pool = [("ac2g", 1), ("ac2g", 2), ("ac2g", 2.0), ("fwdbwd", 1), ("fwdbwd", "x"), (None, 3)]
    keys = [pool[int(i)] for i in rng.integers(0, len(pool), m)]
    times = rng.integers(0, 40, m)
    rows = rng.integers(0, n, m)
    chain = chrome_tree.pair_codes([k[0] for k in keys], [k[1] for k in keys])[0]
    dst, src = chrome_tree.chain_flows(chain, times.astype(np.int64), rows.astype(np.int64))
    ref = _chain_reference(keys, times.tolist(), rows.tolist(), n)
    assert sorted(zip(dst.tolist(), src.tolist(), strict=True)) == sorted((b, a) for b in range(n) for a in ref[b])
    offsets, values = chrome_tree.dep_lists(n, dst, src)
    assert [values[offsets[r] : offsets[r + 1]].tolist() for r in range(n)] == [sorted(set(d)) for d in ref]


def _nested(rng: np.random.Generator, lo: int, hi: int, depth: int, track: int, out: list[tuple[int, ...]]) -> None:
    """Properly nested slices inside [lo, hi]: siblings may touch, some are empty, some repeat their parent."""
    cuts = np.sort(rng.integers(lo, hi + 1, 2 * int(rng.integers(0, 4))))
    for a, b in zip(cuts[::2].tolist(), cuts[1::2].tolist(), strict=True):
        out.append((track, a, b))
        if rng.random() < 0.1:
            out.append((track, a, b))  # the same span twice: the second nests in the first
        if depth < 5 and b > a:
            _nested(rng, a, b, depth + 1, track, out)


@pytest.mark.parametrize("seed", range(40))
def test_vectorised_nesting_matches_the_python_loops(seed: int) -> None:
    from nprof.capture import chrome_nest

    rng = np.random.default_rng(seed)
    spans: list[tuple[int, ...]] = []
    for track in range(int(rng.integers(1, 4))):
        _nested(rng, 0, int(rng.integers(0, 2000)), 0, track, spans)
    perm = rng.permutation(len(spans))
    track, start, end = (np.asarray([spans[k][c] for k in perm], dtype=np.int64).reshape(-1) for c in range(3))
    order = np.lexsort((start - end, start, track)) if len(spans) else np.zeros(0, np.int64)
    got = chrome_nest.vector_nest(order, track, start, end)
    assert got is not None  # no overruns: the vectorised pass answers
    ref_parent, ref_end = chrome_tree.python_nest(order, track, start, end)
    np.testing.assert_array_equal(got[0], ref_parent)
    np.testing.assert_array_equal(got[1], ref_end)
    marked = rng.random(len(spans)) < 0.3
    nearest = [-1] * len(spans)
    for i in order.tolist():  # the plain loop `nearest_marked` replaces
        p = int(ref_parent[i])
        nearest[i] = i if marked[i] else (nearest[p] if p >= 0 else -1)
    np.testing.assert_array_equal(chrome_nest.nearest_marked(ref_parent, marked), nearest)
    ref_emitted, ref_owner = chrome_tree.python_work(order, ref_parent, marked)  # what select_work vectorises
    first = chrome_nest.first_marked(ref_parent, marked)
    np.testing.assert_array_equal(first, ref_owner)
    np.testing.assert_array_equal(first == np.arange(len(spans)), ref_emitted)


@pytest.mark.parametrize("seed", range(10))
def test_nest_with_overruns_falls_back_to_the_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    track, start, end = _random_slices(rng, 300)
    order, parent, end_c = chrome_tree.nest(track, start, end)  # overruns: the loop answers
    ref_parent, ref_end = chrome_tree.python_nest(order, track, start, end)
    np.testing.assert_array_equal(parent, ref_parent)
    np.testing.assert_array_equal(end_c, ref_end)


def _carriers_reference(par: list[int], start: list[int], own: list[int], emitted: list[int], own_l: list[int]) -> dict:
    """The plain loop `chrome_host.flop_carriers` vectorises."""
    carrier: dict[int, int] = {}
    for e in emitted:
        a = par[e]
        while a >= 0 and own[a] == 0:
            a = par[a]
        if a >= 0 and own_l[a] < 0 and (a not in carrier or start[e] < start[carrier[a]]):
            carrier[a] = e
    return carrier


@pytest.mark.parametrize("seed", range(20))
def test_flop_carriers_match_the_plain_loop(seed: int) -> None:
    from types import SimpleNamespace

    from nprof.capture.chrome_host import flop_carriers

    rng = np.random.default_rng(seed)
    spans: list[tuple[int, ...]] = []
    _nested(rng, 0, int(rng.integers(0, 3000 if seed % 2 else 12)), 0, 0, spans)  # short spans: many ties
    track, start, end = (np.asarray([sp[c] for sp in spans], dtype=np.int64).reshape(-1) for c in range(3))
    order, parent, _ = chrome_tree.nest(track, start, end)
    own = [int(f) for f in rng.choice([0, 0, 0, 5, 9], len(spans))]
    emitted_mask, owner = chrome_tree.python_work(order, parent, rng.random(len(spans)) < 0.4)
    emitted, own_l = np.flatnonzero(emitted_mask).tolist(), owner.tolist()
    h = SimpleNamespace(parent=parent, start=start)
    got = flop_carriers(h, own, emitted, own_l)  # type: ignore[arg-type]
    assert got == _carriers_reference(parent.tolist(), start.tolist(), own, emitted, own_l)


def test_flop_carrier_ties_go_to_the_first_emitted_row() -> None:
    from types import SimpleNamespace

    from nprof.capture.chrome_host import flop_carriers

    parent, start = np.asarray([-1, 0, 0]), np.asarray([0, 2, 2])  # an op and two rows starting together
    h = SimpleNamespace(parent=parent, start=start)
    args = ([7, 0, 0], [1, 2], [-1, 1, 2])
    assert flop_carriers(h, *args) == _carriers_reference(parent.tolist(), start.tolist(), *args) == {0: 1}  # type: ignore[arg-type]


def python_read_bytes(args: Any, par_l: list[int], emitted: list[int], own_l: list[int]) -> np.ndarray:
    """The plain loop `chrome_host.host_read_bytes` vectorises."""
    from nprof.capture.chrome_events import ABSENT
    from nprof.capture.opclass import input_bytes

    out = np.zeros(len(args), dtype=np.int64)
    taken: set[int] = set()
    dims = args.raw("Input Dims")
    for e in emitted:
        src = e
        while src >= 0 and dims[src] is ABSENT:
            src = par_l[src]
        if src < 0 or (src != e and (own_l[src] >= 0 or src in taken)):
            continue
        taken.add(src)
        out[e] = input_bytes(args.row(src))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_read_bytes_match_the_plain_loop(seed: int) -> None:
    from nprof.capture.chrome_events import ArgColumns
    from nprof.capture.chrome_host import host_read_bytes

    rng = np.random.default_rng(seed)
    spans: list[tuple[int, ...]] = []
    _nested(rng, 0, int(rng.integers(0, 3000)), 0, 0, spans)
    track, start, end = (np.asarray([sp[c] for sp in spans], dtype=np.int64).reshape(-1) for c in range(3))
    order, parent, _ = chrome_tree.nest(track, start, end)
    shapes = [[[2, 3]], [[4, 4], [4]], [[8]]]
    args = [{"Input Dims": shapes[int(rng.integers(3))], "Input type": ["float"] * 2} if rng.random() < 0.4 else {}
            for _ in spans]  # fmt: skip
    emitted_mask, owner = chrome_tree.python_work(order, parent, rng.random(len(spans)) < 0.4)
    emitted, own_l = np.flatnonzero(emitted_mask).tolist(), owner.tolist()
    cols = ArgColumns.from_dicts(args)
    got = host_read_bytes(cols, parent, emitted, own_l)
    np.testing.assert_array_equal(got, python_read_bytes(cols, parent.tolist(), emitted, own_l))


def _kernel_moves_reference(is_tensor: list[bool], start: list[int], owner: list[int], flops: list[int],
                            read_bytes: list[int]) -> tuple[list[int], list[int], list[int], list[int]]:  # fmt: skip
    """The plain loops `chrome_rows.kernel_moves` vectorises."""
    n = len(owner)
    k_flops, k_bytes, flops, read_bytes = [0] * n, [0] * n, list(flops), list(read_bytes)
    first: dict[int, int] = {}
    for j in sorted(range(n), key=lambda j: (not is_tensor[j], start[j])):
        o = owner[j]
        if o >= 0 and flops[o] > 0 and o not in first:
            first[o] = j
    for o, j in first.items():
        k_flops[j] = flops[o]
        flops[o] = 0
    if n:
        earliest: dict[int, int] = {}
        for j in sorted(range(n), key=lambda j: start[j]):
            earliest.setdefault(owner[j], j)
        for o, j in earliest.items():
            if o >= 0:
                k_bytes[j] = read_bytes[o]
        read_bytes = [0] * len(read_bytes)
    return k_flops, k_bytes, flops, read_bytes


@pytest.mark.parametrize("seed", range(20))
def test_kernel_moves_match_the_plain_loops(seed: int) -> None:
    from nprof.capture.chrome_rows import kernel_moves

    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 60)), 10
    is_tensor, start = rng.random(n) < 0.5, rng.integers(0, 8, n)  # many ties
    owner, flops, nbytes = rng.integers(-1, m, n), rng.choice([0, 0, 5, 7], m), rng.integers(0, 100, m)
    f, b = flops.astype(np.int64), nbytes.astype(np.int64)
    got = kernel_moves(is_tensor, start, owner.astype(np.int64), f, b)
    ref = _kernel_moves_reference(is_tensor.tolist(), start.tolist(), owner.tolist(), flops.tolist(), nbytes.tolist())
    assert (got[0].tolist(), got[1].tolist(), f.tolist(), b.tolist()) == ref


def test_reading_an_args_column_after_keep_only_dropped_it_raises() -> None:
    """A dropped key must not read as absent on every slice (a silent wrong result); kept keys still read."""
    from nprof.capture.chrome_events import ArgColumns

    cols = ArgColumns.from_dicts([{"device": 0, "stream": 7}, {"device": 1}])
    view = cols.take([1, 0])
    cols.keep_only({"device"})
    assert cols.raw("device") == [0, 1] and view.raw("device") == [1, 0]
    for reader in (cols, view):
        with pytest.raises(RuntimeError, match="'stream' was released"):
            reader.raw("stream")
