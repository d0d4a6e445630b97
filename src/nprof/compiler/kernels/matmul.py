"""Matrix multiply on TensorE: tiled, with PSUM accumulation over the contraction dim.

Contract: `matmul_kernel(em, out, a, b, bias=None, alpha=1, beta=1)` writes ``out[M, N] = beta * bias +
alpha * (a[M, K] @ b[K, N])`` where `bias` is a View broadcast to [M, N] (addmm) or None. Tiles: M by 128
(the stationary free size), K by 128 (partitions), N by 512 (the moving free size / one PSUM bank). The
stationary operand ``a.T`` is DMA'd straight from HBM with a transposing access pattern (K on partitions),
loaded once per (M, K) tile and kept pinned while the N tiles stream through. PSUM is evacuated to SBUF by
VectorE (fused with the bias add) and stored. `bmm_kernel` loops over the batch dim.

Operand layout: a tile whose rows are contiguous in HBM is DMA'd directly; a tile of a transposed view
(stride 1 along the partition dim) is DMA'd in its natural row-contiguous layout and transposed on TensorE
(`load_tile`), as an NKI kernel would, instead of an element-by-element DMA.
`sum_rows_kernel` sums the leading rows of a [R, N] view with a ones-vector matmul (bias gradients).
"""

from __future__ import annotations

import itertools

from nprof.compiler.emit import Emitter, Tile
from nprof.compiler.views import View, view_access

M_TILE = 128
K_TILE = 128
N_TILE = 512


def matmul_kernel(
    em: Emitter, out: View, a: View, b: View, bias: View | None = None, alpha: float = 1.0, beta: float = 1.0
) -> None:
    m, k = a.shape
    n = b.shape[1]
    a_t = a.permute((1, 0))  # [K, M]
    for m0 in range(0, m, M_TILE):
        mt = min(M_TILE, m - m0)
        stationary: list[Tile] = []
        for k0 in range(0, k, K_TILE):
            kt = min(K_TILE, k - k0)
            stationary.append(load_tile(em, a_t, k0, kt, m0, mt, pin=True))
        for n0 in range(0, n, N_TILE):
            nt = min(N_TILE, n - n0)
            acc = em.psum(mt, nt, pin=True)
            for i, k0 in enumerate(range(0, k, K_TILE)):
                kt = min(K_TILE, k - k0)
                moving = load_tile(em, b, k0, kt, n0, nt)
                em.nc_matmul(acc, stationary[i], moving, accumulate=i > 0)
            res = em.sbuf(mt, nt)
            if bias is None:
                if alpha == 1.0:
                    em.tensor_copy(res, acc)
                else:
                    em.tensor_scalar(res, acc, "multiply", alpha)
            else:
                bt = em.load(view_access(bias, 0, (m0, n0), (mt, nt), (1,)))
                if beta != 1.0:
                    em.tensor_scalar(bt, bt, "multiply", beta)
                if alpha != 1.0:
                    em.tensor_scalar(res, acc, "multiply", alpha)
                    em.tensor_tensor(res, res, bt, "add")
                else:
                    em.tensor_tensor(res, acc, bt, "add")
            em.unpin(acc)
            em.store(view_access(out, 0, (m0, n0), (mt, nt), (1,)), res)
        em.release_pins()


def bmm_kernel(em: Emitter, out: View, a: View, b: View) -> None:
    for i in range(a.shape[0]):
        matmul_kernel(em, out.select(0, i), a.select(0, i), b.select(0, i))


def load_tile(em: Emitter, v: View, r0: int, rt: int, c0: int, ct: int, pin: bool = False) -> Tile:
    """SBUF tile [rt, ct] = v[r0:r0+rt, c0:c0+ct] of a 2-D view (rt <= 128), transposing on TensorE if needed."""
    if v.strides[1] == 1 or v.strides[0] != 1 or ct == 1:
        tile = em.sbuf(rt, ct, pin=pin)
        return em.load(view_access(v, 0, (r0, c0), (rt, ct), (1,)), tile)
    tile = em.sbuf(rt, ct, pin=pin)
    v_t = v.permute((1, 0))
    for j in range(0, ct, 128):
        cc = min(128, ct - j)
        natural = em.load(view_access(v_t, 0, (c0 + j, r0), (cc, rt), (1,)))
        flipped = em.psum(rt, cc)
        em.nc_transpose(flipped, natural)
        em.tensor_copy(tile.cols(j, cc) if ct != cc else tile, flipped)
    return tile


def sum_rows_kernel(em: Emitter, out: View, src: View, scale: float = 1.0) -> None:
    """out[1, N] = scale * sum over rows of src[R, N] (N contiguous), as ones[R, 1].T @ src on TensorE."""
    r, n = src.shape
    ones: list[Tile] = []
    for k0 in range(0, r, K_TILE):
        t = em.sbuf(min(K_TILE, r - k0), 1, pin=True)
        em.memset(t, 1.0)
        ones.append(t)
    for n0 in range(0, n, N_TILE):
        nt = min(N_TILE, n - n0)
        acc = em.psum(1, nt, pin=True)
        for i, k0 in enumerate(range(0, r, K_TILE)):
            kt = min(K_TILE, r - k0)
            em.nc_matmul(acc, ones[i], load_tile(em, src, k0, kt, n0, nt), accumulate=i > 0)
        res = em.sbuf(1, nt)
        if scale == 1.0:
            em.tensor_copy(res, acc)
        else:
            em.tensor_scalar(res, acc, "multiply", scale)
        em.unpin(acc)
        em.store(view_access(out, 0, (0, n0), (1, nt), (1,)), res)
    em.release_pins()


def copy_kernel(em: Emitter, dst: View, src: View | float) -> None:
    """dst = src (src broadcast to dst.shape). A permuting copy (the source's stride-1 dim is not the
    destination's) moves contiguous rows by DMA and transposes them on TensorE instead of element-wise DMA."""
    from nprof.compiler.kernels.elementwise import copy_body, map_kernel

    nd = len(dst.shape)
    if isinstance(src, View):
        c = next((d for d in reversed(range(nd)) if dst.shape[d] > 1 and dst.strides[d] == 1), None)
        r = next((d for d in range(nd) if src.shape[d] > 1 and src.strides[d] == 1), None)
        if c is not None and r is not None and r != c and src.strides[c] != 1:
            _transposing_copy(em, dst, src, r, c)
            return
    map_kernel(em, dst, [src], copy_body)


def _transposing_copy(em: Emitter, dst: View, src: View, r: int, c: int) -> None:
    others = [d for d in range(len(dst.shape)) if d not in (r, c)]
    rows, cols = dst.shape[r], dst.shape[c]
    for idx in itertools.product(*(range(dst.shape[d]) for d in others)):
        d_off = dst.offset + sum(i * dst.strides[d] for i, d in zip(idx, others, strict=True))
        s_off = src.offset + sum(i * src.strides[d] for i, d in zip(idx, others, strict=True))
        d2 = View(dst.tensor, dst.dtype, (rows, cols), (dst.strides[r], dst.strides[c]), d_off)
        s2 = View(src.tensor, src.dtype, (rows, cols), (src.strides[r], src.strides[c]), s_off)
        for r0 in range(0, rows, M_TILE):
            rt = min(M_TILE, rows - r0)
            for c0 in range(0, cols, N_TILE):
                ct = min(N_TILE, cols - c0)
                em.store(view_access(d2, 0, (r0, c0), (rt, ct), (1,)), load_tile(em, s2, r0, rt, c0, ct))
