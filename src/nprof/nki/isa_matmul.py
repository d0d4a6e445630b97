"""`nisa.nc_matmul`: the TensorE matrix multiply, in both call styles (re-exported by `nprof.nki.isa`).

`nc_matmul(stationary, moving)` returns a new fp32 PSUM tile (Neuron 2.26); `nc_matmul(dst, stationary, moving)`
(beta 2) writes `dst`, and with `accumulate=None` overwrites on the first matmul into that region since it was
allocated or last read by another instruction, accumulating after that (the compiler's inference, docs/nki.md).
Masked operands (`lhsT[mask]`), the FP8 double-row layout and tiling mode (`nprof.nki.pe_tiling`) are handled
here; the instruction pair emitted is LDWEIGHTS (when the stationary changed) then MATMUL (`nprof.nki.pending`).
"""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Space
from nprof.device.mx import moving_fmax
from nprof.nki import compute as _c
from nprof.nki import trace as _trace
from nprof.nki.calls import beta2
from nprof.nki.calls import unmodelled as _unmodelled
from nprof.nki.calls import unmodelled_if as _unmodelled_if
from nprof.nki.isa_enums import matmul_perf_mode
from nprof.nki.masks import note_mask, operand_box, skipped_by
from nprof.nki.pe_tiling import check_tiling, tile_tag
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor, OnChip


def _commit_into(dst: NkiTensor, accumulate: Any) -> None:
    """Commit the pending MATMUL into `dst`, inferring `accumulate=None` (see module doc)."""
    if not isinstance(dst, NkiTensor) or dst.space is not Space.PSUM:
        raise kernel_error("nc_matmul dst must be a PSUM tile (nl.ndarray(..., buffer=nl.psum))")
    written = _c.MM_WRITTEN.setdefault(dst.base, set()) if isinstance(dst.base, OnChip) else set()
    key = dst.access_key()
    acc = key in written if accumulate is None else bool(accumulate)
    written.add(key)
    _trace.current().commit_matmul(dst, accumulate=acc)


@beta2(("dst", "stationary", "moving", "is_stationary_onezero", "is_moving_onezero", "is_transpose", "accumulate",
        "tile_position", "tile_size", "perf_mode", "name"), at=2)  # fmt: skip
def nc_matmul(stationary: Any, moving: Any, *, is_stationary_onezero: bool = False, is_moving_onezero: bool = False,
              is_transpose: bool = False, tile_position: Any = (), tile_size: Any = (), mask: Any = None,
              dst: Any = None, accumulate: Any = None, perf_mode: Any = None, name: Any = None) -> Any:  # fmt: skip
    """stationary.T @ moving on TensorE: into a new fp32 PSUM tile [M, N] (accumulate with `psum += ...`), or
    into `dst` (beta 2; `accumulate` True/False, or None to infer); PSUM operands are copied to SBUF first.
    `is_transpose` runs as a plain matmul (equal to the transpose when `moving` is an identity); tiling mode is
    checked (`nprof.nki.pe_tiling`); one-zero hints and perf modes warn (not modelled)."""
    skip = skipped_by(mask, "nc_matmul")
    _unmodelled_if("nisa.nc_matmul", is_stationary_onezero=(is_stationary_onezero, False),
                  is_moving_onezero=(is_moving_onezero, False))  # fmt: skip
    builder = _trace.current()
    p = builder.preset
    st, mv = _c.tile(stationary, "stationary", masked_ok=True), _c.tile(moving, "moving", masked_ok=True)
    out_box = _operand_out_box(st, mv)
    # TensorE reads SBUF only: a PSUM operand is first copied to SBUF (one VectorE copy, as the compiler inserts)
    st, mv = (_c.copy(t) if t.space is Space.PSUM else t for t in (st, mv))
    more: tuple[tuple[NkiTensor, NkiTensor], ...] = ()
    if perf_mode not in (None, matmul_perf_mode.none, "none"):
        _unmodelled("nisa.nc_matmul", "perf_mode", "the double-row speed-up is not modelled")
        if "double_row" in str(getattr(perf_mode, "value", perf_mode)):
            st, mv, more = _double_row(st, mv)
    if st.ndim != 2:
        raise kernel_error(f"nc_matmul stationary must be a 2-D tile [K, M], got shape {st.shape}")
    k, m = st.shape
    double = "double_row" in str(getattr(perf_mode, "value", perf_mode))
    tile = tile_tag(check_tiling("nisa.nc_matmul", tile_position, tile_size, k, m, p.core, double_row=double))
    if mv.shape[0] != k:
        raise kernel_error(
            f"nc_matmul contraction mismatch: stationary {st.shape} and moving {mv.shape} must share the "
            "partition (K) axis"
        )
    n = _c._numel_free(mv)
    if k > p.pmax:
        raise kernel_error(f"nc_matmul contraction size {k} exceeds {p.pmax} partitions; tile K and accumulate")
    if m > p.gemm_stationary_fmax:
        raise kernel_error(
            f"nc_matmul stationary free size {m} exceeds {p.gemm_stationary_fmax} (nl.tile_size.gemm_stationary_fmax)"
        )
    nmax = moving_fmax(p, dst.dtype_name if isinstance(dst, NkiTensor) else "float32")  # v4: the whole PSUM
    if n > nmax:
        raise kernel_error(f"nc_matmul moving free size {n} exceeds {nmax} (nl.tile_size.gemm_moving_fmax"
                           f"{'; NeuronCore-v4: the whole PSUM' if nmax > p.gemm_moving_fmax else ''})")  # fmt: skip
    flat = mv.flatten_free()
    if flat is None:
        flat = _c.copy(mv).flatten_free()
    assert flat is not None
    if out_box is not None:  # operand masking: the full-shape result, computed in the operands' box only
        full = (out_box[0][1], out_box[1][1])
        box = [out_box[0][0], out_box[1][0]]
        res = builder.alloc(full, "float32", Space.PSUM, lazy=True)
        builder.set_pending(st, flat, res.restrict(box), skip=skip, more=more, tile=tile)
        note_mask(res, box)
        if dst is None:
            return res
        _commit_into(dst.restrict(box) if tuple(dst.shape) == full else dst, accumulate)
        return dst
    res = builder.alloc((m, *mv.shape[1:]) if mv.ndim > 2 else (m, n), "float32", Space.PSUM, lazy=True)
    builder.set_pending(st, flat, res, skip=skip, more=more, tile=tile)
    if dst is None:
        return res
    _commit_into(dst, accumulate)
    return dst


def _operand_out_box(st: NkiTensor, mv: NkiTensor) -> tuple[tuple[tuple[int, int], int], ...] | None:
    """For masked matmul operands (`lhsT[mask]`, NKI API Masking): per output axis, ((lo, hi), full size) —
    rows from the stationary's free axis, columns from the moving's — or None when neither is masked. A mask
    on the partition (contraction) axis narrows K only; both operands must then agree on K."""
    st_m, mv_m = operand_box(st), operand_box(mv)
    if st_m is None and mv_m is None:
        return None
    if st.ndim != 2 or mv.ndim != 2:
        raise kernel_error("operand masking of nc_matmul takes 2-D operands [K, M] and [K, N]")
    rows = (st_m[1][1], st_m[0][1]) if st_m else ((0, st.shape[1]), st.shape[1])
    cols = (mv_m[1][1], mv_m[0][1]) if mv_m else ((0, mv.shape[1]), mv.shape[1])
    return rows, cols


def _double_row(st: NkiTensor, mv: NkiTensor) -> tuple[NkiTensor, NkiTensor, tuple[tuple[NkiTensor, NkiTensor], ...]]:
    """A double-row matmul's operands: stationary [K, 2, M] and moving [K, 2, N] contract over K and the row pair
    (result [M, N] = sum over k, r of st[k, r, :] x mv[k, r, :], AWS's nc_matmul double_row_gen3 example);
    run as two accumulating matmuls, one per row of the pair."""
    if st.ndim != 3 or mv.ndim != 3 or st.shape[1] != 2 or mv.shape[1] != 2:
        raise kernel_error(
            f"a double-row nc_matmul takes stationary [K, 2, M] and moving [K, 2, N], got {st.shape} and {mv.shape}"
        )
    return st[:, 0, :], mv[:, 0, :], ((st[:, 1, :], _flat(mv[:, 1, :])),)


def _flat(t: NkiTensor) -> NkiTensor:
    flat = t.flatten_free()
    return flat if flat is not None else _c.copy(t)
