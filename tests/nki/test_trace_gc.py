"""While a kernel is traced the GC's full collections are deferred; the thresholds are restored afterwards."""

import gc

import pytest

import nprof.nki.language as nl
from nprof.errors import KernelError
from nprof.nki import Kernel
from nprof.nki.typing import tensor

SEEN: list[tuple[int, int, int]] = []


def _copy(a):
    SEEN.append(gc.get_threshold())
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a))
    return out


def _bad(a):
    SEEN.append(gc.get_threshold())
    return nl.load(a[0:256, :])  # out of bounds: the trace raises


def test_full_collections_deferred_during_the_trace_only():
    before = gc.get_threshold()
    SEEN.clear()
    Kernel(_copy).trace(tensor[[128, 64], nl.float32])
    assert SEEN[0][:2] == before[:2] and SEEN[0][2] > 1_000_000
    assert gc.get_threshold() == before
    with pytest.raises(KernelError):
        Kernel(_bad).trace(tensor[[128, 64], nl.float32])
    assert gc.get_threshold() == before
