"""`nprof.compiler.deadstores`: the renumbering of dependencies held to a plain loop."""

from __future__ import annotations

import random

import pytest

from nprof.compiler.deadstores import remap_deps


@pytest.mark.parametrize("seed", range(4))
def test_remap_deps_matches_a_plain_renumbering(seed: int) -> None:
    """dead_stores' vectorised renumbering against the obvious loop, on random programs' deps."""
    rng = random.Random(seed)
    n = rng.choice([0, 1, 7, 300])
    deps = [tuple(sorted(rng.sample(range(i), min(i, rng.randrange(6))))) for i in range(n)]
    keep = [rng.random() < 0.7 for _ in range(n)]
    new_index = {}
    for i, k in enumerate(keep):
        if k:
            new_index[i] = len(new_index)
    want = [tuple(new_index[x] for x in d if x in new_index) for d in deps]
    got = remap_deps(deps, keep)
    assert got == want
    for old, new, w in zip(deps, got, want, strict=True):
        assert (new is old) == (w == old)  # unchanged deps keep their tuple
