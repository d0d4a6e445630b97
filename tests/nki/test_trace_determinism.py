"""A trace is a pure function of the kernel: what else the process does meanwhile never changes the Program.

Tiles are freed when the kernel drops them (reference counting), so anything outside the kernel that keeps a
frame of the tracing stack alive would keep that frame's tiles, and the allocator would place later tiles
elsewhere. numba does this on a function's first call (its typing context caches typing failures with their
tracebacks), which is why the dependency tracker compiles its core on a thread of its own.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

import nprof.nki.language as nl
from nprof.compiled import run_detached
from nprof.nki import Kernel, deps
from nprof.nki.typing import tensor

CHURN: list[bool] = [False]


def _churn() -> None:
    """Garbage, cycles and collections between kernel statements (when switched on)."""
    if not CHURN[0]:
        return
    for _ in range(50):
        a: list[Any] = []
        a.append(a)  # a reference cycle
        _ = [object() for _ in range(20)]
    gc.collect()


def _banks(a):
    """Ten PSUM tiles of a full bank, one after another: the ninth reuses the memory of the first."""
    out = nl.ndarray((10, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in range(10):
        _churn()
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        acc[...] = nl.add(acc, float(i))
        nl.store(out[i], value=acc)
    for i in nl.affine_range(10):
        _churn()
        t = nl.load(a[i])
        nl.store(out[i], value=nl.exp(t))
    return out


def _psum_offsets(program) -> list[int]:
    return [acc.offset for ins in program.instructions for acc in ins.outs if acc.space.value == "psum"]


def _trace():
    return Kernel(_banks).trace(tensor[[10, 128, 512], nl.float32]).program


def test_garbage_and_collections_during_the_trace_change_nothing():
    plain = _trace()
    CHURN[0] = True
    try:
        churned = _trace()
    finally:
        CHURN[0] = False
    assert churned.instructions == plain.instructions
    assert _psum_offsets(plain)[:10:2] == [0, 2048, 4096, 6144, 8192]  # (the kernel does reuse memory)


def test_a_core_compiled_while_tracing_does_not_pin_the_kernels_tiles(monkeypatch):
    """The dependency core's first call keeps its calling stack alive (as numba's typing cache does): the first
    call happens off the tracing stack, so the Program is the one traced with the core already loaded."""
    plain = _trace()
    kept: list[BaseException] = []
    real = deps.core.record

    def first_call_keeps_stack(*args):
        if not kept:
            try:
                raise TypeError("a typing failure the compiler caches")
            except TypeError as err:
                kept.append(err)  # its traceback reaches every frame of the calling stack
        return real(*args)

    monkeypatch.setattr(deps, "_LOADED", [])
    monkeypatch.setattr(deps.core, "record", first_call_keeps_stack)
    again = _trace()
    assert kept, "the core's first call did not happen"
    assert again.instructions == plain.instructions


def test_run_detached_keeps_no_caller_frame_alive():
    kept: list[BaseException] = []

    def keeps_stack() -> None:
        try:
            raise TypeError("cached")
        except TypeError as err:
            kept.append(err)

    def caller() -> weakref.ref:
        tile = type("Tile", (), {})()  # what a frame of the tracing stack holds
        run_detached(keeps_stack)
        return weakref.ref(tile)

    assert caller()() is None and kept


def test_run_detached_raises_the_callees_error():
    def fails() -> None:
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        run_detached(fails)
