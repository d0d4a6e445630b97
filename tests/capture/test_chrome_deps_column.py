"""`chrome_rows.deps_column` (offsets narrowed to int32 by numpy, the numpy buffers wrapped) held to Arrow's own
int32 cast on random dependency lists, and refusing offsets past int32 as Arrow's cast does."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from nprof.capture.chrome_rows import deps_column


def _reference(deps: tuple[np.ndarray, np.ndarray], lo: int, hi: int) -> pa.Array:
    offsets, values = deps
    off = offsets[lo : hi + 1]
    return pa.ListArray.from_arrays(pa.array(off - off[0], pa.int32()), pa.array(values[off[0] : off[-1]], pa.int64()))


@pytest.mark.parametrize("seed", range(30))
def test_deps_column_matches_arrows_cast(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 40))
    offsets = np.concatenate([[0], np.cumsum(rng.integers(0, 4, n))]).astype(np.int64)
    values = rng.integers(0, 10**12, int(offsets[-1]))
    lo, hi = sorted(int(x) for x in rng.integers(0, n + 1, 2))
    got = deps_column((offsets, values), lo, hi)
    got.validate(full=True)
    assert got.equals(_reference((offsets, values), lo, hi))
    assert got.type == pa.list_(pa.int64()) and got.offsets.type == pa.int32()


def test_offsets_past_int32_are_refused_like_arrow() -> None:
    deps = (np.array([0, 2**31], np.int64), np.zeros(4, np.int64))
    with pytest.raises(pa.ArrowInvalid):
        _reference(deps, 0, 1)
    with pytest.raises(pa.ArrowInvalid):
        deps_column(deps, 0, 1)
