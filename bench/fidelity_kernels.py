"""Kernels for bench/fidelity.py, written by nprof in its own words in the shape of public NKI tutorials.

The four matmul variants follow the structure of the NKI matrix multiplication tutorial (aws-neuron-sdk,
general/nki/tutorials/matrix_multiplication.rst, Neuron SDK 2.20): C = lhsT.T @ rhs with lhsT [K, M],
rhs [K, N], bf16, tiles of 128 (K), 128 (M), 512 (N).
"""

import nprof.nki.isa as nisa
import nprof.nki.language as nl

TM, TK, TN = 128, 128, 512


def mm_tiled(lhsT, rhs):
    """One PSUM accumulation per [128, 512] result tile; both operands loaded for every matmul."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.load(lhsT[k * TK : (k + 1) * TK, m * TM : (m + 1) * TM])
                b = nl.load(rhs[k * TK : (k + 1) * TK, n * TN : (n + 1) * TN])
                acc += nisa.nc_matmul(a, b)
            nl.store(out[m * TM : (m + 1) * TM, n * TN : (n + 1) * TN], value=nl.copy(acc, dtype=out.dtype))
    return out


def mm_hoisted(lhsT, rhs):
    """The lhsT column of tiles loaded once per m; the rhs column once per (m, n)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a = nl.ndarray((KT, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            a[k] = nl.load(lhsT[k * TK : (k + 1) * TK, m * TM : (m + 1) * TM])
        for n in nl.affine_range(N // TN):
            b = nl.ndarray((KT, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(KT):
                b[k] = nl.load(rhs[k * TK : (k + 1) * TK, n * TN : (n + 1) * TN])
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                acc += nisa.nc_matmul(a[k], b[k])
            nl.store(out[m * TM : (m + 1) * TM, n * TN : (n + 1) * TN], value=nl.copy(acc, dtype=out.dtype))
            del b, acc
        del a
    return out


def mm_block_free(lhsT, rhs, bm_tiles=2, bn_tiles=2):
    """Blocks of bm_tiles x 128 columns of lhsT and bn_tiles x 512 columns of rhs, reused across the block."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // (TM * bm_tiles)):
        a = nl.ndarray((bm_tiles, KT, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for i in nl.affine_range(bm_tiles):
            col = (m * bm_tiles + i) * TM
            for k in nl.affine_range(KT):
                a[i, k] = nl.load(lhsT[k * TK : (k + 1) * TK, col : col + TM])
        for n in nl.affine_range(N // (TN * bn_tiles)):
            b = nl.ndarray((bn_tiles, KT, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(bn_tiles):
                col = (n * bn_tiles + j) * TN
                for k in nl.affine_range(KT):
                    b[j, k] = nl.load(rhs[k * TK : (k + 1) * TK, col : col + TN])
            for i in nl.affine_range(bm_tiles):
                for j in nl.affine_range(bn_tiles):
                    acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(KT):
                        acc += nisa.nc_matmul(a[i, k], b[j, k])
                    r0, c0 = (m * bm_tiles + i) * TM, (n * bn_tiles + j) * TN
                    nl.store(out[r0 : r0 + TM, c0 : c0 + TN], value=nl.copy(acc, dtype=out.dtype))
            del b  # free the rhs block before the next one is allocated (SBUF holds one at a time)
        del a
    return out


def mm_blocked(lhsT, rhs, bm_tiles=16, bn_tiles=2, bk_tiles=8):
    """All three dimensions blocked: K blocks accumulate in SBUF result tiles, big contiguous loads/stores."""
    K, M = lhsT.shape
    _, N = rhs.shape
    BM, BN, BK = TM * bm_tiles, TN * bn_tiles, TK * bk_tiles
    nbm = M // BM
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // BN):
        res = nl.zeros((nl.par_dim(TM), nbm * bm_tiles * bn_tiles * TN), dtype=lhsT.dtype, buffer=nl.sbuf)

        def slot(mb: int, i: int, j: int) -> slice:
            """The [128, 512] result tile (mb, i, j) within the SBUF accumulator."""
            first = ((mb * bm_tiles + i) * bn_tiles + j) * TN
            return slice(first, first + TN)

        for kb in nl.sequential_range(K // BK):
            b = nl.ndarray((bk_tiles, nl.par_dim(TK), BN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(bk_tiles):
                row = (kb * bk_tiles + k) * TK
                b[k] = nl.load(rhs[row : row + TK, n * BN : (n + 1) * BN])
            for mb in nl.affine_range(nbm):
                a = nl.ndarray((bk_tiles, nl.par_dim(TK), BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                for k in nl.affine_range(bk_tiles):
                    row = (kb * bk_tiles + k) * TK
                    a[k] = nl.load(lhsT[row : row + TK, mb * BM : (mb + 1) * BM])
                for j in nl.affine_range(bn_tiles):
                    for i in nl.affine_range(bm_tiles):
                        acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(bk_tiles):
                            acc += nisa.nc_matmul(a[k, :, i * TM : (i + 1) * TM], b[k, :, j * TN : (j + 1) * TN])
                        res[:, slot(mb, i, j)] += acc
        for mb in nl.affine_range(nbm):
            for i in nl.affine_range(bm_tiles):
                packed = nl.ndarray((nl.par_dim(TM), BN), dtype=res.dtype, buffer=nl.sbuf)
                for j in nl.affine_range(bn_tiles):
                    packed[:, j * TN : (j + 1) * TN] = nl.copy(res[:, slot(mb, i, j)])
                r0 = (mb * bm_tiles + i) * TM
                nl.store(out[r0 : r0 + TM, n * BN : (n + 1) * BN], value=packed)
        del res, a, b  # free this column's accumulator and blocks before the next column allocates its own
    return out


def exp_tiles(x):
    """exp of a 2-D tensor, 128 rows at a time (the last tile partial): the seed's exp kernel shape."""
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range((rows + 127) // 128):
        r0, r1 = t * 128, min(rows, (t + 1) * 128)
        tile = nl.load(x[r0:r1, 0:cols])
        nl.store(out[r0:r1, 0:cols], value=nl.exp(tile))
    return out


def load_exp_store(x):
    """One load of the whole (small) tensor, exp, one store: the NKI DMA overview's Example 1 shape."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.load(x)
    nl.store(out, value=nl.exp(tile))
    return out


def tensor_add(a, b):
    """c = a + b for one small tile: two loads, one VectorE add, one store (the NKI getting-started shape)."""
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(c, value=nl.add(x, y))
    return c
