"""Iterations stamped out in bulk (nprof.nki.stamp) give exactly the Program of the plain trace.

Each kernel is traced three ways: plainly (replay off), replayed iteration by iteration (`replay.replay`, stamping
off) and stamped; the Programs must be equal instruction by instruction (operands, attrs, deps, queues, sources),
with the same allocation records, SBUF/PSUM high-water marks and tensors, and the test says whether stamping ran.
The kernels (in nprof's own words) are matmul tilings in the shapes of the NKI matmul tutorial at small sizes, loops
whose body transposes through the array (displacing the loaded weights), activations with per-partition operands,
accumulators from before the loop, sequential ranges and randomly drawn tilings.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof.nki import replay
from nprof.nki.kernel import Kernel
from nprof.nki.typing import tensor
from nprof.program.model import Program

T = 128
A = replay.RECORDED_AFFINE + 1  # iterations of an affine loop not replayed: those logged, and the last


def _trace(kernel: Callable[..., Any], shapes: list[tuple[int, ...]]) -> Program:
    return Kernel(kernel).trace(*(tensor[list(s), nl.bfloat16] for s in shapes)).program


def _same(a: Program, b: Program, what: str) -> None:
    assert len(a.instructions) == len(b.instructions), what
    for i, (x, y) in enumerate(zip(a.instructions, b.instructions, strict=True)):
        assert x == y, f"{what}: instruction {i}\n{x}\n{y}"
    assert dict(a.meta) == dict(b.meta), what
    assert (a.sbuf_bytes, a.psum_bytes, a.tensors) == (b.sbuf_bytes, b.psum_bytes, b.tensors), what


def _three(kernel: Callable[..., Any], shapes: list[tuple[int, ...]], monkeypatch: pytest.MonkeyPatch) -> int:
    """Assert plain == replayed == stamped; return the iterations stamped."""
    monkeypatch.setattr(replay, "ENABLED", False)
    plain = _trace(kernel, shapes)
    monkeypatch.setattr(replay, "ENABLED", True)
    monkeypatch.setattr(replay, "STAMP", False)
    each = _trace(kernel, shapes)
    monkeypatch.setattr(replay, "STAMP", True)
    monkeypatch.setattr(replay, "STAMP_MIN_EVENTS", 0)  # (small test loops stamp too)
    before = replay.STATS["stamped"]
    stamped = _trace(kernel, shapes)
    _same(plain, each, "replayed")
    _same(plain, stamped, "stamped")
    return replay.STATS["stamped"] - before


def tiled(lhsT, rhs):
    """Both operands loaded for every matmul; one PSUM accumulation per result tile."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // T):
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((T, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // T):
                acc += nisa.nc_matmul(nl.load(lhsT[k * T : (k + 1) * T, m * T : (m + 1) * T]),
                                      nl.load(rhs[k * T : (k + 1) * T, n * 512 : (n + 1) * 512]))  # fmt: skip
            nl.store(out[m * T : (m + 1) * T, n * 512 : (n + 1) * 512], value=nl.copy(acc, dtype=out.dtype))
    return out


def hoisted(lhsT, rhs):
    """A column of stationary tiles per m in a block tile (par_dim second), reused for every n."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    kt = K // T
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // T):
        a = nl.ndarray((kt, nl.par_dim(T), T), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(kt):
            a[k] = nl.load(lhsT[k * T : (k + 1) * T, m * T : (m + 1) * T])
        for n in nl.affine_range(N // 512):
            acc = nl.zeros((T, 512), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(kt):
                acc += nisa.nc_matmul(a[k], nl.load(rhs[k * T : (k + 1) * T, n * 512 : (n + 1) * 512]))
            nl.store(out[m * T : (m + 1) * T, n * 512 : (n + 1) * 512], value=nl.copy(acc, dtype=out.dtype))
    return out


def same_weights(lhsT, rhs):
    """One stationary tile loaded before the loop and used by every iteration (LDWEIGHTS once, then reused)."""
    M = lhsT.shape[1]
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    w = nl.copy(nl.load(lhsT[0:T, 0:T]))  # (committed before the loop: a pending load stops replay)
    for n in nl.affine_range(N // 512):
        r = nl.load(rhs[0:T, n * 512 : (n + 1) * 512])
        nl.store(out[0:T, n * 512 : (n + 1) * 512], value=nl.copy(nisa.nc_matmul(w, r), dtype=out.dtype))
    return out


def transposing(x, y):
    """Each iteration transposes a tile through the array (displacing the weights) and then multiplies."""
    R = x.shape[0]
    out = nl.ndarray((R, T), dtype=x.dtype, buffer=nl.shared_hbm)
    w = nl.copy(nl.load(y[0:T, 0:T]))
    for r in nl.affine_range(R // T):
        t = nl.load(x[r * T : (r + 1) * T, 0:T])
        tt = nl.copy(nisa.nc_transpose(t), dtype=x.dtype)
        p = nisa.nc_matmul(w, tt)
        nl.store(out[r * T : (r + 1) * T, 0:T], value=nl.copy(p, dtype=out.dtype))
    return out


def activations(x, y):
    """Activations with a per-partition bias tile from before the loop, a reduction and an SBUF accumulator."""
    R, C = x.shape
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    bias = nl.copy(nl.load(y[0:T, 0:1]))
    total = nl.zeros((T, C), nl.float32, buffer=nl.sbuf)
    for r in nl.sequential_range(R // T):
        t = nl.load(x[r * T : (r + 1) * T, 0:C])
        e = nisa.activation(nl.exp, t, bias=bias, scale=2.0)
        s = nl.sum(e, axis=1)
        total[...] = nl.add(total, e)
        nl.store(out[r * T : (r + 1) * T, 0:C], value=nl.multiply(e, s))
    nl.store(out[0:T, 0:C], value=total)
    return out


def rewritten_weights(x, y):
    """Each inner iteration multiplies by the weights tile, rewrites it, multiplies again: its first matmul reuses
    the weights the previous iteration loaded after its write, so whether it needs an LDWEIGHTS depends on the
    weights loaded last (an outer loop replaying the inner loops' logged LDWEIGHTS must keep track of them)."""
    M = x.shape[0]
    out = nl.ndarray((T, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    u = nl.ndarray((T, T), dtype=x.dtype, buffer=nl.sbuf)
    u[...] = nl.load(x[0:T, 0:T])
    r = nl.load(y[0:T, 0:512])
    nl.store(out[0:T, 0:512], value=nl.copy(nisa.nc_matmul(u, r), dtype=out.dtype))
    for m in nl.affine_range(M // T):
        for k in nl.affine_range(9):
            p = nisa.nc_matmul(u, r)
            u[...] = nl.load(x[m * T : (m + 1) * T, k * T : (k + 1) * T])
            q = nisa.nc_matmul(u, r)
            nl.store(out[0:T, 0:512], value=nl.add(p, q))
    return out


def test_matmul_tutorial_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _three(tiled, [(4 * T, 10 * T), (4 * T, 2 * 512)], monkeypatch) == 10 - A
    assert _three(hoisted, [(3 * T, 9 * T), (3 * T, 9 * 512)], monkeypatch) > 0


def test_weights_kept_and_displaced(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _three(same_weights, [(T, T), (T, 12 * 512)], monkeypatch) == 12 - A
    assert _three(transposing, [(11 * T, T), (T, T)], monkeypatch) == 11 - A
    assert _three(rewritten_weights, [(9 * T, 9 * T), (T, 512)], monkeypatch) == (9 - A) + A * (9 - A)


def test_activations_and_accumulators(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _three(activations, [(10 * T, 256), (T, 1)], monkeypatch) == 10 - A


def test_random_tilings(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    for _ in range(3):
        k, m, n = rng.choice([1, 2, 5]), rng.choice([8, 9, 12]), rng.choice([1, 2, 3])
        assert _three(tiled, [(k * T, m * T), (k * T, n * 512)], monkeypatch) == m - A


def test_stamped_programs_stay_columnar_through_simulation() -> None:
    """Timing-only simulation reads the stamped chunks as columns (no Instruction made) and gives the same
    profile as the same Program with its instructions made into objects."""
    import dataclasses

    from nprof.device import simulate
    from nprof.program.lazy import Instructions

    for kernel, shapes in ((tiled, [(4 * T, 10 * T), (4 * T, 2 * 512)]), (transposing, [(11 * T, T), (T, T)]),
                           (activations, [(10 * T, 256), (T, 1)])):  # fmt: skip
        lazy = _trace(kernel, shapes)
        assert isinstance(lazy.instructions, Instructions) and not lazy.instructions.materialized
        fast = simulate(lazy, numerics=False).profile
        assert not lazy.instructions.materialized
        plain = simulate(dataclasses.replace(lazy, instructions=tuple(lazy.instructions)), numerics=False).profile
        for field in ("instructions", "dma", "counters"):
            assert getattr(fast, field).equals(getattr(plain, field)), (kernel.__name__, field)


def test_validate_checks_stamped_operands() -> None:
    """An HBM operand of a stamped iteration out of its tensor is refused with the message the plain check
    gives (the first offending instruction)."""
    import dataclasses

    from nprof.errors import NprofError
    from nprof.program.model import TensorDecl

    lazy = _trace(tiled, [(4 * T, 10 * T), (4 * T, 2 * 512)])
    small = tuple(TensorDecl(t.name, (4 * T, 7 * T), t.dtype, t.kind) if t.name == "lhsT" else t for t in lazy.tensors)
    messages = []
    for instrs in (lazy.instructions, tuple(lazy.instructions)):
        with pytest.raises(NprofError) as err:
            dataclasses.replace(lazy, tensors=small, instructions=instrs).validate()
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "out of bounds" in messages[0]


def blocked(lhsT, rhs):
    """K blocks accumulated in one SBUF result row through an index helper, blocks freed with `del`."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    kb, mt, nt = 2, M // T, N // 512
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // 512):

        def cols(i, j):
            """The [T, 512] result slot (i, j) of the accumulator row (no `//`: a helper must be affine)."""
            first = (i * nt + j) * 512
            return slice(first, first + 512)

        res = nl.zeros((nl.par_dim(T), mt * nt * 512), dtype=nl.float32, buffer=nl.sbuf)
        for b in nl.sequential_range(K // (kb * T)):
            w = nl.ndarray((kb, nl.par_dim(T), 512), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(kb):
                w[k] = nl.load(rhs[(b * kb + k) * T : (b * kb + k + 1) * T, n * 512 : (n + 1) * 512])
            for i in nl.affine_range(mt):
                acc = nl.zeros((T, 512), nl.float32, buffer=nl.psum)
                for k in nl.affine_range(kb):
                    a = nl.load(lhsT[(b * kb + k) * T : (b * kb + k + 1) * T, i * T : (i + 1) * T])
                    acc += nisa.nc_matmul(a, w[k])
                res[:, cols(i, n)] += acc
            del w
        for i in nl.affine_range(mt):
            row = nl.copy(res[:, cols(i, n)], dtype=out.dtype)
            nl.store(out[i * T : (i + 1) * T, n * 512 : (n + 1) * 512], value=row)
        del res
    return out


def _block_free(bm: int, bn: int) -> Callable[..., Any]:
    """Blocks of bm stationary and bn moving tiles loaded once per block and reused across it (deep nesting)."""

    def block_free(lhsT, rhs):
        K, M = lhsT.shape
        N = rhs.shape[1]
        kt = K // T
        out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
        for m in nl.affine_range(M // (T * bm)):
            a = nl.ndarray((bm, kt, nl.par_dim(T), T), dtype=lhsT.dtype, buffer=nl.sbuf)
            for i in nl.affine_range(bm):
                for k in nl.affine_range(kt):
                    a[i, k] = nl.load(lhsT[k * T : (k + 1) * T, (m * bm + i) * T : (m * bm + i + 1) * T])
            for n in nl.affine_range(N // (512 * bn)):
                b = nl.ndarray((bn, kt, nl.par_dim(T), 512), dtype=rhs.dtype, buffer=nl.sbuf)
                for j in nl.affine_range(bn):
                    for k in nl.affine_range(kt):
                        b[j, k] = nl.load(rhs[k * T : (k + 1) * T, (n * bn + j) * 512 : (n * bn + j + 1) * 512])
                for i in nl.affine_range(bm):
                    for j in nl.affine_range(bn):
                        acc = nl.zeros((T, 512), nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(kt):
                            acc += nisa.nc_matmul(a[i, k], b[j, k])
                        r0, c0 = (m * bm + i) * T, (n * bn + j) * 512
                        nl.store(out[r0 : r0 + T, c0 : c0 + 512], value=nl.copy(acc, dtype=out.dtype))
                del b
            del a
        return out

    return block_free


def test_deep_nesting_random_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Block sizes and loop lengths drawn at random: every level of the nest stamps or replays (outer levels
    replaying whole stamped inner loops), and the Program is the plain trace's."""
    rng = random.Random(5)
    for _ in range(3):
        bm, bn = rng.choice([1, 2]), rng.choice([1, 2])
        kt, mb, nb = rng.choice([1, 8, 9]), rng.choice([8, 9]), rng.choice([1, 8])
        kernel = _block_free(bm, bn)
        shapes = [(kt * T, mb * bm * T), (kt * T, nb * bn * 512)]
        assert _three(kernel, shapes, monkeypatch) > 0, (bm, bn, kt, mb, nb)


ROWS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def _row_of(r):
    return ROWS[r]  # (a subscript: not a pure helper)


def listed_helper(x):
    """A helper reading a global list by the loop index: must not replay."""
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(len(ROWS)):
        nl.store(out[0:T, 0:8], value=nl.load(x[_row_of(r) * T : _row_of(r) * T + T, 0:8]))
    return out


def floor_helper(x):
    """A helper with `//`: piecewise constant in the loop index (affine over the four logged iterations)."""
    out = nl.ndarray((T, 8), dtype=x.dtype, buffer=nl.shared_hbm)

    def quad(r):
        return r // 4

    for r in nl.affine_range(10):
        nl.store(out[0:T, 0:8], value=nl.load(x[quad(r) * T : quad(r) * T + T, 0:8]))
    return out


def _rows(r, width):
    """Rows r*T .. r*T + T of a [*, width] input (a pure helper of the module)."""
    return slice(r * T, r * T + T), slice(0, width)


def helper_rows(x):
    """A module-level pure helper picks each iteration's rows."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(x.shape[0] // T):
        nl.store(out[_rows(r, 8)], value=nl.exp(nl.load(x[_rows(r, 8)])))
    return out


def test_helpers_and_del(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _three(helper_rows, [(10 * T, 8)], monkeypatch) == 10 - A
    assert _three(blocked, [(4 * T, 9 * T), (4 * T, 9 * 512)], monkeypatch) > 0
    assert _three(floor_helper, [(3 * T, 8)], monkeypatch) == 0
    loops = replay.STATS["loops"]
    assert _three(listed_helper, [(10 * T, 8)], monkeypatch) == 0
    assert replay.STATS["loops"] == loops


def test_inner_loops_stamped_while_the_outer_loop_is_logged(monkeypatch: pytest.MonkeyPatch) -> None:
    """The n loop stamps inside the m loop's logged iterations (its recorder told in bulk); the m loop then
    replays whole n loops: 9 - A + A * (9 - A) iterations stamped, the Program as the plain trace's."""
    assert _three(tiled, [(2 * T, 9 * T), (2 * T, 9 * 512)], monkeypatch) == (9 - A) + A * (9 - A)
    assert _three(hoisted, [(2 * T, 8 * T), (2 * T, 9 * 512)], monkeypatch) == (8 - A) + A * (9 - A)


def test_loop_sources_read_as_inspect_reads_them() -> None:
    """replay_pure.source_lines gives inspect.getsourcelines' answer (without its pass over every module)."""
    import inspect
    import sys

    from nprof.nki.replay_pure import source_lines

    def decorated(f: Any) -> Any:
        return f

    @decorated
    def inner(x: int) -> int:
        return x + 1

    functions = [f for f in vars(sys.modules[__name__]).values() if inspect.isfunction(f)] + [inner, decorated]
    for f in functions:
        assert source_lines(f.__code__) == inspect.getsourcelines(f.__code__), f.__name__


def halves(x):
    """Each iteration stores the lower half of a tile's partitions (operands starting at partition 64)."""
    R = x.shape[0]
    out = nl.ndarray((R // 2, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(R // T):
        t = nl.exp(nl.load(x[r * T : (r + 1) * T, 0:64]))
        nl.store(out[r * 64 : (r + 1) * 64, 0:64], value=t[64:T, 0:64])
    return out


def test_program_files_written_from_the_stamped_columns(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """save_program writes a traced Program whose stamped iterations are still columns without making an
    `Instruction` (`program.table.columns_table`), and the file holds exactly what the object path writes."""
    import dataclasses
    import zipfile

    from nprof.program.file import load_program, save_program

    def members(path: Any) -> dict[str, bytes]:
        with zipfile.ZipFile(path) as zf:
            return {name: zf.read(name) for name in zf.namelist()}

    monkeypatch.setattr(replay, "STAMP_MIN_EVENTS", 0)  # (small test loops stamp too)
    rng = random.Random(11)
    cases = [(tiled, [(4 * T, 10 * T), (4 * T, 2 * 512)]), (transposing, [(11 * T, T), (T, T)]),
             (activations, [(10 * T, 256), (T, 1)]), (blocked, [(4 * T, 9 * T), (4 * T, 9 * 512)]),
             (halves, [(12 * T, 64)])]  # fmt: skip
    k_ = rng.choice([1, 3]) * T
    cases += [(tiled, [(k_, rng.choice([8, 11]) * T), (k_, rng.choice([1, 2]) * 512)])]
    for k, (kernel, shapes) in enumerate(cases):
        lazy = _trace(kernel, shapes)
        save_program(lazy, tmp_path / f"lazy{k}.ntff")
        assert not lazy.instructions.materialized, kernel.__name__
        assert any(not isinstance(seg, list) for _, seg in lazy.instructions.segments()), kernel.__name__
        objects = dataclasses.replace(lazy, instructions=tuple(lazy.instructions))
        save_program(objects, tmp_path / f"objects{k}.ntff")
        assert members(tmp_path / f"lazy{k}.ntff") == members(tmp_path / f"objects{k}.ntff"), kernel.__name__
        assert tuple(load_program(tmp_path / f"lazy{k}.ntff").instructions) == objects.instructions
