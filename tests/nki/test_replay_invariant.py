"""Loop-invariant operations in replayed loop bodies (nprof.nki.replay_invariant): `//`, `%`, `min`, comparisons,
`and`/`or`, `x if c else y` and `if` on values that do not change between iterations (parameters, shapes,
constants, names bound in the body to such values) are accepted, and the loop replays to the Program the plain
trace makes (every instruction, dependency, queue, allocation); the same operations on anything the loop variable
reaches (directly, through a name, a helper's parameter, a closure, an attribute stored in the body) must fall
back to the plain trace. Random kernels (generated source) mix both kinds.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import nprof.nki.language as nl
from nprof.nki import replay
from tests.nki.helpers import replayed_as_plain

T = 128
N = 10  # iterations of the loops below


def _both(kernel: Callable[..., Any], shapes: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch,
          **kw: Any) -> int:  # fmt: skip
    """Assert the replayed and the plain Programs are equal; return the iterations replayed."""
    return replayed_as_plain(kernel, shapes, monkeypatch, **kw)


# -- accepted: operations on invariant values -----------------------------------------------------------------
def invariant_kernel(x, use_exp=True, sinks=None, scale=None):
    """`//`, `%`, `min`, comparisons, `and`, `not`, `is`, `x if c else y`, `if`/`elif`/`else` on parameters,
    shapes, constants and names the body binds to them."""
    rows, cols = x.shape
    out = nl.ndarray((T, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // T):
        w = min(cols, 64) // 2 + cols % 3
        factor = 2.0 if scale is None else scale
        t = nl.load(x[r * T : (r + 1) * T, 0:w])
        if use_exp and not sinks:
            t = nl.exp(t)
        elif sinks is not None:
            t = nl.add(t, 1.0)
        else:
            t = nl.copy(t)
        if w >= 32 and cols // T < 1:
            t = nl.multiply(t, factor)
        nl.store(out[0:T, 0:w], value=t)
    return out


def load_kv(src, dst, i, size, sub):
    """A kernel helper using `//` and `if` on its parameters (nki-samples' load_kv style)."""
    parts = size // sub
    for j in nl.affine_range(parts):
        dst[j] = nl.load(src[i * T : (i + 1) * T, j * sub : (j + 1) * sub])
    if parts > 1:
        dst[0] = nl.add(dst[0], dst[parts - 1])


def helper_kernel(x, size=64):
    rows = x.shape[0]
    out = nl.ndarray((T, size // 2), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // T):
        buf = nl.ndarray((size // (size // 2), nl.par_dim(T), size // 2), dtype=x.dtype, buffer=nl.sbuf)
        load_kv(x, buf, r, size, sub=size // 2)
        nl.store(out[0:T, 0 : size // 2], value=buf[0])
    return out


def test_invariant_operations_are_replayed_identically(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(invariant_kernel, [(T * N, 64)], monkeypatch) == N - 1 - replay.RECORDED_AFFINE  # (affine: 2 logged)
    assert _both(invariant_kernel, [(T * N, 64)], monkeypatch, use_exp=False, sinks=True) > 0
    assert _both(invariant_kernel, [(T * N, 32)], monkeypatch, use_exp=False, scale=3.0) > 0
    assert _both(helper_kernel, [(T * N, 64)], monkeypatch) == N - 1 - replay.RECORDED_AFFINE
    assert _both(helper_kernel, [(T * N, 64)], monkeypatch, size=32) > 0


# -- rejected: the loop variable reaches the operation --------------------------------------------------------
def direct_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        q = r // 4  # piecewise constant: on a line over the four logged iterations
        nl.store(out[0:T, 0:8], value=nl.load(x[q * T : q * T + T, 0:8]))
    return out


def through_name_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        s = r * 2
        u = s + 1
        start = T if u > 8 else 0  # (a name derived from the index through two others)
        nl.store(out[0:T, 0:8], value=nl.load(x[start : start + T, 0:8]))
    return out


def if_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        t = nl.load(x[r * T : (r + 1) * T, 0:8])
        if r >= 6:
            t = nl.exp(t)
        nl.store(out[0:T, 0:8], value=t)
    return out


def quarter(src, k):
    """`//` on a parameter: invariant or not depending on the argument."""
    return nl.load(src[(k // 4) * T : (k // 4) * T + T, 0:8])


def helper_tainted_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:T, 0:8], value=quarter(x, r))
    return out


def helper_invariant_kernel(x):
    n = 7
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:T, 0:8], value=nl.add(quarter(x, n), nl.load(x[r * T : (r + 1) * T, 0:8])))
    return out


def closure_kernel(x):
    k = 0

    def fetch(src):
        return nl.load(src[(k // 4) * T : (k // 4) * T + T, 0:8])  # `k`: the kernel's, rebound by the loop

    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        k = r
        nl.store(out[0:T, 0:8], value=fetch(x))
    return out


def attribute_kernel(x):
    cfg = types.SimpleNamespace(k=0)
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        cfg.k = r  # (an attribute store: not undone between iterations, nor seen as the index by the checks)
        nl.store(out[0:T, 0:8], value=nl.load(x[cfg.k * cfg.k * 8 : cfg.k * cfg.k * 8 + T, 0:8]))
    return out


@pytest.mark.parametrize("kernel", [direct_kernel, through_name_kernel, if_kernel, helper_tainted_kernel,
                                    closure_kernel, attribute_kernel])  # fmt: skip
def test_index_dependent_values_fall_back(kernel: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(kernel, [(T * N * 8, 8)], monkeypatch) == 0


def test_a_helper_is_checked_per_argument_taint(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same helper accepted with an invariant argument is rejected with the loop variable, in either order."""
    assert _both(helper_invariant_kernel, [(T * N, 8)], monkeypatch) > 0
    assert _both(helper_tainted_kernel, [(T * N, 8)], monkeypatch) == 0
    assert _both(helper_invariant_kernel, [(T * N, 8)], monkeypatch) > 0


# -- random kernels ---------------------------------------------------------------------------------------------
_INVARIANT = ["cols", "w", "3", "flag", "len(x.shape)"]
_TAINTED = ["r", "s", "r * 2"]
_OPS = ["//", "%", ">", "<=", "==", "and", "or", "min"]


def _expr(rng: random.Random, tainted: bool) -> str:
    pool = _TAINTED if tainted else _INVARIANT
    a, b, op = rng.choice(pool), rng.choice(_INVARIANT + (_TAINTED if tainted else [])), rng.choice(_OPS)
    if op == "min":
        return f"min({a}, {b})"
    if op in ("//", "%"):
        return f"({a}) {op} ({b} + 1)" if b not in ("flag",) else f"({a}) {op} 2"
    return f"({a}) {op} ({b})"


def _source(rng: random.Random, name: str) -> tuple[str, bool]:
    """A kernel whose loop body uses random operations, some on the loop variable; whether it must replay."""
    lines, tainted_any = [], False
    for k in range(rng.randint(1, 3)):
        tainted = rng.random() < 0.35
        tainted_any |= tainted
        e = _expr(rng, tainted)
        kind = rng.choice(["if", "ifexp", "offset"])
        if kind == "if":
            lines += [f"        if {e}:", f"            t = nl.add(t, {k + 1}.0)"]
        elif kind == "ifexp":
            lines += [f"        c{k} = 1 if {e} else 0", f"        t = nl.multiply(t, c{k} + 1.0)"]
        else:
            load = f"nl.load(x[o{k} * T : o{k} * T + T, 0:8])"
            lines += [f"        o{k} = int({e}) % 4", f"        t = nl.add(t, {load})"]
    body = "\n".join(lines)
    src = f"""
import nprof.nki.language as nl
T = {T}
def {name}(x, flag=True):
    rows, cols = x.shape
    w = cols // 4
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range({N}):
        s = r + w
        t = nl.load(x[r * T : (r + 1) * T, 0:8])
{body}
        nl.store(out[0:T, 0:8], value=t)
    return out
"""
    return src, not tainted_any


def test_random_kernels_with_invariant_and_index_operations(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:  # fmt: skip
    rng = random.Random(14)
    for i in range(16):
        src, replays = _source(rng, f"random_{i}")
        path = tmp_path / f"random_invariant_{i}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        replayed = _both(getattr(module, f"random_{i}"), [(T * N, 8)], monkeypatch)
        assert (replayed > 0) == replays, src


# -- a builtin shadowed later ------------------------------------------------------------------------------------
COUNT = [0]


def counting_min(a, b):
    """Shadows `min` in this module: a Python side effect, and a result that changes from call to call (0 for the
    first four of every N calls, then 1: on a line over the four logged iterations; each trace makes N calls)."""
    COUNT[0] = COUNT[0] + 1
    return (COUNT[0] % N) // 5


def min_kernel(x):
    cols = x.shape[1]
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = min(cols, 2) * 8  # (the builtin: invariant)
        nl.store(out[0:T, 0:8], value=nl.add(nl.load(x[o : o + T, 0:8]), nl.load(x[r * T : (r + 1) * T, 0:8])))
    return out


def test_a_builtin_shadowed_later_is_checked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop is checked once per code position; `min` bound later (in the kernel's module) to a Python function
    is seen when the loop starts again, and the loop falls back."""
    assert _both(min_kernel, [(T * N + T, 8)], monkeypatch) > 0
    monkeypatch.setitem(globals(), "min", counting_min)
    COUNT[0] = 0
    assert _both(min_kernel, [(T * N + T, 8)], monkeypatch) == 0
    assert COUNT[0] == 2 * N  # every call made, in both traces


# -- offsets of degree 4 or more in the loop variable (bounded by nprof.nki.replay_affine.degree) -------------
def quartic_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = r * (r - 1) * (r - 2) * (r - 3)  # 0 at r = 0..3: on a line over the four logged iterations
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


def test_a_quartic_offset_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both(quartic_kernel, [(T * 40 * 8, 8)], monkeypatch) == 0


def quartic(r):
    """A pure helper of degree 4 in its argument."""
    return r * (r - 1) * (r - 2) * (r - 3)


def quartic_pure_helper_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = quartic(r)
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


def cube_offset(r):
    """A pure helper of degree 3: exact over four logged iterations."""
    return r * r * r - 6 * r * r + 11 * r


def load_at(src, r):
    """A kernel helper (it loads) whose offset has degree 4 in its parameter, through a name and `+=`."""
    o = r * r
    o *= r * r
    o -= 6 * r * r * r - 11 * r * r + 6 * r
    return nl.load(src[o : o + T, 0:8])


def quartic_kernel_helper_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        nl.store(out[0:T, 0:8], value=load_at(x, r))
    return out


def load_keyword(src, r=0, k=1):
    """A kernel helper given the loop variable by keyword."""
    return nl.load(src[k * r : k * r + T, 0:8])


def quartic_keyword_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        q = r * (r - 1) * (r - 2)
        nl.store(out[0:T, 0:8], value=load_keyword(x, k=q, r=r - 3))
    return out


def quartic_nested_kernel(x):
    """The outer loop's offset has degree 4 in its variable, in the inner loop's body."""
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        for j in nl.affine_range(2):
            o = r * (r - 1) * (r - 2) * (r - 3) + j
            nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


def moving_range_kernel(x):
    """An inner loop whose range starts at the outer variable: its variable (here r itself) has degree 1 in the
    outer one, so `k * (r - 1) * (r - 2) * (r - 3)` has degree 4 (0 over the four logged iterations)."""
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        for k in nl.affine_range(r, r + 1):
            o = k * (r - 1) * (r - 2) * (r - 3)
            nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


@pytest.mark.parametrize("kernel", [quartic_kernel, quartic_pure_helper_kernel, quartic_kernel_helper_kernel,
                                    quartic_keyword_kernel, quartic_nested_kernel, moving_range_kernel])  # fmt: skip
def test_offsets_of_degree_four_fall_back(kernel: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each looks linear over the logged iterations (0 at r = 0..3) and differs after: the plain trace is kept."""
    assert _both(kernel, [(T * 40 * 8, 8)], monkeypatch) == 0


def cubic_kernel(x):
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(N):
        o = cube_offset(r)
        nl.store(out[0:T, 0:8], value=nl.load(x[o : o + T, 0:8]))
    return out


def test_a_cubic_offset_is_checked_by_the_logged_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Degree 3 is accepted: its offsets (0, 6, 12, 18, 36, ...) leave the line the logged iterations draw, so the
    template refuses it at run time and the Program is the plain trace's all the same."""
    assert _both(cubic_kernel, [(T * 40 * 8, 8)], monkeypatch) == 0
