"""Matrix multiply on TensorE: tiled, with PSUM accumulation over the contraction dim.

Contract: `matmul_kernel(em, out, a, b, bias=None, alpha=1, beta=1)` writes ``out[M, N] = beta * bias +
alpha * (a[M, K] @ b[K, N])`` where `bias` is a View broadcast to [M, N] (addmm) or None. Tiles: M by 128
(the stationary free size), K by 128 (partitions), N by 512 (the moving free size / one PSUM bank). The
stationary operand ``a.T`` is DMA'd straight from HBM with a transposing access pattern (K on partitions),
loaded once per (M, K) tile and kept pinned while the N tiles stream through. PSUM is evacuated to SBUF by
VectorE (fused with the bias add) and stored. `bmm_kernel` loops over the batch dim.
"""

from __future__ import annotations

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
            tile = em.sbuf(kt, mt, pin=True)
            em.load(view_access(a_t, 0, (k0, m0), (kt, mt), (1,)), tile)
            stationary.append(tile)
        for n0 in range(0, n, N_TILE):
            nt = min(N_TILE, n - n0)
            acc = em.psum(mt, nt)
            for i, k0 in enumerate(range(0, k, K_TILE)):
                kt = min(K_TILE, k - k0)
                moving = em.load(view_access(b, 0, (k0, n0), (kt, nt), (1,)))
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
            em.store(view_access(out, 0, (m0, n0), (mt, nt), (1,)), res)
        em.release_pins()


def bmm_kernel(em: Emitter, out: View, a: View, b: View) -> None:
    for i in range(a.shape[0]):
        matmul_kernel(em, out.select(0, i), a.select(0, i), b.select(0, i))
