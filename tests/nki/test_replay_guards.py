"""Branches the nl layer takes on the kernel's integers, held fixed over replayed iterations (nprof.nki.replay_guard).

A pure body's integers are polynomials in the loop index (nprof.nki.replay_affine), but the nl layer maps some of
them piecewise: a negative index or slice bound counts from the end, a stepped slice or `nl.arange` has
ceil((stop - start) / step) elements, a slice past the end is kept for a mask and checked at use. Each kernel
below stays in one branch over the logged iterations and changes branch in an iteration that would be replayed:
the replayed trace must equal the plain one (here: by falling back), or raise where the plain one raises. Other
ways a body could differ between iterations (`%`, `//`, `min`/`max`, conditions on the index, Python state a
helper changes) must fall back too.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import nprof.nki.language as nl
from nprof.errors import KernelError
from nprof.nki.kernel import Kernel
from nprof.nki.typing import tensor
from tests.nki.helpers import replayed_as_plain

T = 128
N = 10


def wrapped_index_kernel(x):
    """`r - 5`: columns 11..14 (counted from the end) over the logged iterations, column 0 at r = 5 (not 16)."""
    out = nl.ndarray((8, N), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:8, r], value=nl.load(x[1:9, r - 5]))
    return out


def wrapped_slice_kernel(x):
    """Slice bounds negative (from the end) for r <= 4, not from r = 5: 4:12, not 132:140."""
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:8, 0:8], value=nl.load(x[1:9, r * 16 - 76 : r * 16 - 68]))
    return out


def stepped_slice_kernel(x):
    """ceil((121 + r) / 8) partitions: 16 for r <= 7, 17 at r = 8."""
    out = nl.ndarray((T + 8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0 : 121 + r : 8, 0:8], value=nl.load(x[0 : 121 + r : 8, 0:8]))
    return out


def arange_kernel(x):
    """`nl.arange(0, 57 + r, 8)`: 8 elements for r <= 7, 9 at r = 8."""
    out = nl.ndarray((T, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(T)[:, None]
    for r in nl.affine_range(N):
        a = nl.arange(0, 57 + r, 8)
        i_f = a[None, :]
        nl.store(out[i_p, i_f], value=nl.load(x[i_p, i_f]))
    return out


def mgrid_kernel(x):
    """`nl.mgrid` with a stepped range that grows with r, as `arange_kernel`."""
    out = nl.ndarray((T, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        g = nl.mgrid[0:T, 0 : 57 + r : 8]
        nl.store(out[g.p, g.x], value=nl.load(x[g.p, g.x]))
    return out


def corner_kernel(x):
    """Columns from the end while r + j <= 12 (every logged iteration of either loop: r <= 3 or j <= 3), not at
    r = j = 8, an iteration replayed by both loops (the outer loop sees it at j = 9, the inner loop's last)."""
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        for j in nl.affine_range(N):
            o = 16 * (r + j) - 208
            nl.store(out[0:8, 0:8], value=nl.load(x[1:9, o : o + 8]))
    return out


@pytest.mark.parametrize("kernel, shape", [
    (wrapped_index_kernel, (T, 16)),
    (wrapped_slice_kernel, (T, 128)),
    (stepped_slice_kernel, (T + 8, 8)),
    (arange_kernel, (T, 128)),
    (mgrid_kernel, (T, 128)),
])  # fmt: skip
def test_a_branch_of_the_nl_layer_changing_after_the_logged_iterations(
    kernel: Callable[..., Any], shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert replayed_as_plain(kernel, [shape], monkeypatch) == 0


def test_an_inner_loop_tells_its_guards_to_the_outer_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner loops replay (at r <= 3, and at r = 9: affine, two logged iterations), the outer loop must not."""
    from nprof.nki import replay

    assert replayed_as_plain(corner_kernel, [(T, 256)], monkeypatch) == 5 * (N - 1 - replay.RECORDED_AFFINE)


def raising_kernel(x):
    """The slice 52:0 at r = 6 (start from the end, stop 0) is an error; r = 0..5 and 7..9 are valid."""
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:8, 0:8], value=nl.load(x[1:9, 40 - r * 8 : 48 - r * 8]))
    return out


def past_the_end_kernel(x):
    """Columns 40 + 4r .. 48 + 4r: past the end of 60 columns from r = 4 (an error without mask=), yet in the
    tensor (rows 1..8 of 128)."""
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:8, 0:8], value=nl.load(x[1:9, 40 + 4 * r : 48 + 4 * r]))
    return out


@pytest.mark.parametrize("kernel, shape", [(raising_kernel, (T, 60)), (past_the_end_kernel, (T, 60))])
def test_an_iteration_the_plain_trace_refuses_is_refused_with_replay(
    kernel: Callable[..., Any], shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    from nprof.nki import replay

    for enabled in (False, True):
        monkeypatch.setattr(replay, "ENABLED", enabled)
        with pytest.raises(KernelError) as err:
            Kernel(kernel).trace(tensor[list(shape), nl.float32])
        assert "out of bounds" in str(err.value) or "out-of-bounds" in str(err.value)


def test_a_trace_left_by_an_error_leaves_nothing_logging() -> None:
    """No recorder is left logging after a trace that raised inside a logged loop (CPython closes the loop's
    generator as the error unwinds; the trace's end forgets the builder's recorders in any case), so later plain
    traces pay nothing for guards."""
    from nprof.nki import replay_guard

    with pytest.raises(KernelError) as err:
        Kernel(raising_kernel).trace(tensor[[T, 60], nl.float32])
    assert err.value is not None and replay_guard.LOGGING == []


# -- other ways an iteration could differ: each falls back ------------------------------------------------------
SEEN: list[int] = []
COUNTER = 0


def counted(src):
    """A helper changing a global: not a kernel helper (`global`), so the loop is traced plainly."""
    global COUNTER
    COUNTER += 1
    return nl.load(src[(COUNTER % 2) * T : (COUNTER % 2) * T + T, 0:8])


def global_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:T, 0:8], value=nl.add(counted(x), nl.load(x[r * T : r * T + T, 0:8])))
    return out


def appended_kernel(x):
    SEEN.clear()
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        SEEN.append(r)
        o = len(SEEN) % 3
        nl.store(out[0:T, 0:8], value=nl.load(x[o * T : o * T + T, 0:8]))
    return out


def mod_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = (r % 5) * T  # 0, T, 2T, 3T over the logged iterations: a line, then 4T, 0, ...
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


def min_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = min(r, 5) * T + max(r - 7, 0)
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


def condition_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = r * T
        if o > 5 * T:
            o = 0
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


@pytest.mark.parametrize("kernel", [global_kernel, appended_kernel, mod_kernel, min_kernel, condition_kernel])
def test_python_that_differs_between_iterations_falls_back(kernel: Callable[..., Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    global COUNTER
    COUNTER = 0
    SEEN.clear()
    assert replayed_as_plain(kernel, [(T * N, 8)], monkeypatch) == 0


# -- random kernels: offsets of random degree, signs and steps, held to the plain trace ------------------------
ROWS = 16384 + 64  # (degree-5 terms reach 15120 at r = 9)


def _poly(rng: random.Random) -> str:
    """A polynomial in r: a line, plus terms of degree 2..5 that mostly vanish at r = 0..3 (so they look linear,
    or 0, over the logged iterations)."""
    terms = [str(rng.randint(-64, 64)), f"{rng.randint(-6, 6)} * r"]
    for _ in range(rng.randint(0, 2)):
        degree = rng.randint(2, 5)
        roots = [0, 1, 2, 3, 4][:degree] if rng.random() < 0.7 else rng.sample(range(-3, 9), degree)
        terms.append(f"{rng.choice([-1, 1])} * " + " * ".join(f"(r - {a})" for a in roots))
    return " + ".join(terms)


def _random_source(rng: random.Random, name: str) -> str:
    """A kernel loading, in each iteration, rows from `o` (a random polynomial in r: negative counts from the end)
    by a slice (stepped or not), an int index or an `nl.arange`."""
    step, width, kind = rng.choice([1, 1, 2, 3]), rng.randint(1, 6), rng.choice(["slice", "index", "arange"])
    body = [f"        o = {_poly(rng)}"]
    if kind == "slice":
        load, store = f"x[o : o + {width * step} : {step}, 0:8]", f"out[0:{width}, 0:8]"
    elif kind == "index":
        load, store = "x[o, 0:8]", "out[0, 0:8]"
    else:
        body += [f"        a = nl.arange(o, o + {width * step}, {step})", "        i_p = a[:, None]"]
        load, store = "x[i_p, i_f]", f"out[0:{width}, 0:8]"
    lines = "\n".join(body)
    return f"""
import nprof.nki.language as nl
def {name}(x):
    out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(8)[None, :]
    for r in nl.affine_range({N}):
{lines}
        nl.store({store}, value=nl.load({load}))
    return out
"""


def test_random_offsets_replay_as_the_plain_trace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Random offsets (lines, plus terms of degree 2..5 that may vanish over the logged iterations), negative or
    past the end, stepped: the replayed trace equals the plain one, or raises the same error."""
    from nprof.nki import replay

    rng = random.Random(28)
    outcomes = {"replayed": 0, "plain": 0, "error": 0}
    for i in range(60):
        src = _random_source(rng, f"random_{i}")
        path = tmp_path / f"random_guard_{i}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        kernel = getattr(module, f"random_{i}")
        monkeypatch.setattr(replay, "ENABLED", False)
        try:
            Kernel(kernel).trace(tensor[[ROWS, 8], nl.float32])
        except KernelError as plain_error:
            monkeypatch.setattr(replay, "ENABLED", True)
            with pytest.raises(KernelError) as err:
                Kernel(kernel).trace(tensor[[ROWS, 8], nl.float32])
            assert str(err.value) == str(plain_error), src
            outcomes["error"] += 1
            continue
        replayed = replayed_as_plain(kernel, [(ROWS, 8)], monkeypatch)
        outcomes["replayed" if replayed else "plain"] += 1
    assert min(outcomes.values()) >= 5, outcomes  # (each kind of case occurs)
