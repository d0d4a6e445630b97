"""What keeps the first compiled step cheap: a finished lowering leaves no cyclic garbage behind (the cyclic GC
would rescan it with full passes), the GC is on again after a compile, and a warm cache compiles nothing."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from nprof.compiler import STATS, backend, lower  # noqa: E402


def _train_step(cache: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 5))  # fmt: skip
    torch._dynamo.reset()
    out = torch.compile(model, backend="nprof", options={"cache_dir": str(cache)})(torch.randn(2, 3, 6, 6))
    out.sum().backward()


def test_a_lowering_leaves_no_cyclic_garbage_and_the_gc_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builders: list[weakref.ref[Any]] = []
    freed: list[bool] = []
    run, lower_graph = lower.Lowerer.run, lower.lower_graph

    def watched_run(self: lower.Lowerer) -> Any:
        builders.append(weakref.ref(self.em.builder))
        return run(self)

    def watched_lower_graph(gm: Any, plan: Any) -> Any:
        result = lower_graph(gm, plan)
        freed.append(not gc.isenabled() and builders[-1]() is None)  # freed by reference counting alone
        return result

    monkeypatch.setattr(lower.Lowerer, "run", watched_run)
    monkeypatch.setattr(backend, "lower_graph", watched_lower_graph)
    STATS.reset()
    _train_step(tmp_path)
    assert STATS.compiled == 2 and freed == [True, True]
    assert gc.isenabled()  # paused only while compiling


def test_a_warm_cache_compiles_and_simulates_nothing(tmp_path: Path) -> None:
    _train_step(tmp_path)
    STATS.reset()
    _train_step(tmp_path)
    assert (STATS.compiled, STATS.cache_hits, STATS.timing_hits) == (0, 2, 2)
    assert not STATS.compile_cpu_seconds and len(STATS.load_cpu_seconds) == 2


def test_device_outputs_become_tensors_that_own_their_memory_with_the_traced_strides() -> None:
    import numpy as np

    from nprof.compiler.lower import OutputSlot
    from nprof.compiler.runtime import _to_torch

    rng = np.random.default_rng(0)
    buffer = rng.standard_normal(24).astype(np.float32)  # a device buffer the next execution overwrites
    expected = buffer[:12].reshape(3, 4).copy()
    got = _to_torch(buffer[:12], OutputSlot("tensor", "y", (3, 4), "float32", (4, 1)))
    buffer[:] = 0.0
    assert got.shape == (3, 4) and got.stride() == (4, 1)
    np.testing.assert_array_equal(got.numpy(), expected)
    owned = rng.standard_normal(12).astype(np.float32)
    wrapped = _to_torch(owned, OutputSlot("tensor", "y", (3, 4), "float32", (4, 1)))
    assert wrapped.data_ptr() == owned.ctypes.data  # an owned contiguous output: no copy
    transposed = _to_torch(owned.copy(), OutputSlot("tensor", "y", (3, 4), "float32", (1, 3)))
    assert transposed.stride() == (1, 3)
    np.testing.assert_array_equal(transposed.numpy(), owned.reshape(3, 4))
    ints = np.arange(6, dtype=np.int32)
    as_long = _to_torch(ints[:6], OutputSlot("tensor", "i", (2, 3), "int64", (3, 1)))
    ints[:] = -1
    assert as_long.dtype == torch.int64 and as_long.tolist() == [[0, 1, 2], [3, 4, 5]]
    same = np.arange(6, dtype=np.int32)
    as_int = _to_torch(same[:6], OutputSlot("tensor", "i", (6,), "int32", (1,)))
    same[:] = -1
    assert as_int.tolist() == [0, 1, 2, 3, 4, 5]  # an int32 view is copied too
