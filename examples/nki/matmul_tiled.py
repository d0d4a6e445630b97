"""Tiled matrix multiplication C = A @ B with PSUM accumulation over K, on the virtual NeuronCore.

A is passed transposed (lhsT = A.T, [K, M]) so its K axis lies on the
partitions, as TensorE wants: each [128 x 128] block of lhsT is loaded into the
array once (LoadStationary / LDWEIGHTS) and multiplies a [128 x 512] block of B
streaming through it (MultiplyMoving / MATMUL), accumulating the K blocks in
one PSUM bank. Run:
    python examples/nki/matmul_tiled.py
It checks the result against numpy, prints the latency table and writes
matmul.neff / matmul.ntff for `nprof view`.
"""

import numpy as np

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki


def matmul_tiled(lhsT, rhs):
    """C[M, N] = lhsT.T @ rhs for lhsT [K, M], rhs [K, N]; M, K multiples of 128 and N of 512."""
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, "contraction dimensions differ"
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)

    TILE_M = nl.tile_size.gemm_stationary_fmax  # 128
    TILE_K = nl.tile_size.pmax  # 128
    TILE_N = nl.tile_size.gemm_moving_fmax  # 512

    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.zeros((TILE_M, TILE_N), nl.float32, buffer=nl.psum)
            for k in nl.sequential_range(K // TILE_K):
                stationary = nl.load(lhsT[k * TILE_K : (k + 1) * TILE_K, m * TILE_M : (m + 1) * TILE_M])
                moving = nl.load(rhs[k * TILE_K : (k + 1) * TILE_K, n * TILE_N : (n + 1) * TILE_N])
                acc += nisa.nc_matmul(stationary, moving)
            out_tile = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * TILE_M : (m + 1) * TILE_M, n * TILE_N : (n + 1) * TILE_N], value=out_tile)
    return result


def main(save: bool = True) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 512)).astype(np.float32)  # [M, K]
    b = rng.standard_normal((512, 1024)).astype(np.float32)  # [K, N]
    c = nki.simulate_kernel(matmul_tiled, np.ascontiguousarray(a.T), b)
    err = float(np.abs(c - a @ b).max())
    print(f"max |C - A@B| = {err:.3g}")
    bench = nki.benchmark(
        warmup=1,
        iters=5,
        save_neff_name="matmul.neff" if save else None,
        save_trace_name="matmul.ntff" if save else None,
    )(matmul_tiled)
    bench(np.ascontiguousarray(a.T), b)
    return err


if __name__ == "__main__":
    main()
