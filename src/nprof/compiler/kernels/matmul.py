"""Matrix multiply on TensorE (NKI): tiled, with PSUM accumulation over the contraction dim.

Contract: `matmul_kernel(out, a, b, bias=None, alpha=1, beta=1)` writes ``out[M, N] = beta * bias +
alpha * (a[M, K] @ b[K, N])`` where `bias` is a View broadcast to [M, N] (addmm) or None. Tiles: M by 128
(the stationary free size), K by 128 (partitions), N by 512 (the moving free size / one PSUM bank). The
stationary operand ``a.T`` is loaded once per (M, K) tile and kept while the N tiles stream through; the
first matmul of a PSUM tile overwrites it (``acc[...] = nisa.nc_matmul``), the next ones accumulate
(``acc += ...``). PSUM is evacuated to SBUF by VectorE (fused with the bias add) and stored.
`bmm_kernel` loops over the batch dim. Operands stored in bf16 (fp16) are multiplied in bf16 (fp16), with
fp32 accumulation in PSUM, as TensorE does (`operand_dtype`); anything else in fp32.

Operand layout: `load_tile` DMAs a tile whose rows are contiguous in HBM directly; a tile of a transposed
view (stride 1 along the partition dim) is DMA'd in its natural row-contiguous layout and transposed on
TensorE (`nisa.nc_transpose`), as an NKI kernel would, instead of an element-by-element DMA.
`sum_rows_kernel` sums the leading rows of a [R, N] view with a ones-vector matmul (bias gradients);
`copy_kernel` copies views, transposing on TensorE when the copy permutes the contiguous dim.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from nprof.arch.isa import Access, Space
from nprof.compiler.kernels import engines
from nprof.compiler.kernels.hbm import load, store
from nprof.compiler.views import View, view_access
from nprof.nki import isa as nisa
from nprof.nki import language as nl
from nprof.nki import trace
from nprof.nki.tensor import NkiTensor

M_TILE = 128
K_TILE = 128
N_TILE = 512


def load_tile(v: View, r0: int, rt: int, c0: int, ct: int, dtype: Any = nl.float32) -> NkiTensor:
    """SBUF tile [rt, ct] = v[r0:r0+rt, c0:c0+ct] of a 2-D view (rt <= 128) in `dtype`, transposing on
    TensorE if needed."""
    if v.strides[1] == 1 or v.strides[0] != 1 or ct == 1:
        return load(view_access(v, 0, (r0, c0), (rt, ct), (1,)), dtype)
    v_t = v.permute((1, 0))
    if ct <= 128:
        return engines.copy(nisa.nc_transpose(load(view_access(v_t, 0, (c0, r0), (ct, rt), (1,)), dtype)),
                                dtype=dtype)  # fmt: skip
    tile = nl.ndarray((rt, ct), dtype=dtype, buffer=nl.sbuf)
    chunk = max(d for d in range(1, 129) if ct % d == 0)
    if chunk >= 32:  # every chunk of natural rows in one DMA [chunk, ct / chunk, rt] (one trigger slot, not several)
        a = view_access(v_t, 0, (c0, r0), (chunk, rt), (1,))
        a = Access(a.space, a.tensor, a.dtype, a.offset, chunk, ((chunk * v_t.strides[0], ct // chunk), *a.free), 0,
                   a.partition_stride)  # fmt: skip
        natural = load(a, dtype)
        for i in range(ct // chunk):
            engines.copy(nisa.nc_transpose(natural[:, i, :]), dtype=dtype, dst=tile[:, i * chunk : (i + 1) * chunk])
        return tile
    for j in range(0, ct, 128):
        cc = min(128, ct - j)
        natural = load(view_access(v_t, 0, (c0 + j, r0), (cc, rt), (1,)), dtype)
        tile[:, j : j + cc] = nisa.nc_transpose(natural)
    return tile


ROW_MAX = 8192  # elements per partition of one natural-row load (32 KiB fp32): the transfer size NKI recommends


def _cached(a: Any) -> bool:
    """Is the HBM pattern `a` held in SBUF by an earlier kernel (`nprof.compiler.fusion`)?"""
    cache = getattr(trace.current(), "_cache", None)
    return cache is not None and getattr(trace.current(), "fusing", False) and a in cache


def k_tiles(v: View, c0: int, ct: int, dtype: Any = nl.float32) -> list[NkiTensor]:
    """The SBUF tiles [kt, ct] of v[k0:k0+kt, c0:c0+ct] for every K tile (128 rows) of the 2-D view `v`
    [K, C], each equal to `load_tile(v, k0, kt, c0, ct)`, moved with as few DMAs as the layout allows: rows
    contiguous in HBM come in one DMA of [128, K/128, ct] for all full K tiles (plus one for the rest); a
    transposed view's natural rows (v.T[c, :], up to `ROW_MAX` of them per partition) in one DMA per 128
    columns, transposed per K tile on TensorE. Tiles an earlier kernel left in SBUF are used as they are."""
    k = v.shape[0]
    starts = list(range(0, k, K_TILE))
    if len(starts) == 1:
        return [load_tile(v, 0, k, c0, ct, dtype)]
    if v.strides[1] == 1 or v.strides[0] != 1 or ct == 1:
        singles = [view_access(v, 0, (k0, c0), (min(K_TILE, k - k0), ct), (1,)) for k0 in starts]
        if dtype != nl.float32 or sum(not _cached(a) for a in singles) <= 1:
            return [load(a, dtype) for a in singles]
        full = k // K_TILE
        s0, s1 = v.strides
        a = Access(Space.HBM, v.tensor, v.dtype, v.offset + c0 * s1, K_TILE, ((K_TILE * s0, full), (s1, ct)), 0, s0)
        block = load(a, dtype)
        tiles = [block[:, j, :] for j in range(full)]
        if k > full * K_TILE:
            tiles.append(load(singles[-1], dtype))
        return tiles
    return _transposed_k_tiles(v, c0, ct, dtype)


def _transposed_k_tiles(v: View, c0: int, ct: int, dtype: Any) -> list[NkiTensor]:
    """`k_tiles` of a view whose columns are contiguous in HBM (v.T row-major): natural rows, then TensorE."""
    k = v.shape[0]
    v_t = v.permute((1, 0))  # [C, K], rows contiguous
    tiles = [nl.ndarray((min(K_TILE, k - k0), ct), dtype=dtype, buffer=nl.sbuf) for k0 in range(0, k, K_TILE)]
    for j in range(0, ct, 128):
        cc = min(128, ct - j)
        for r0 in range(0, k, ROW_MAX):
            rows = load(view_access(v_t, 0, (c0 + j, r0), (cc, min(ROW_MAX, k - r0)), (1,)), dtype)
            for k0 in range(r0, min(k, r0 + ROW_MAX), K_TILE):
                kt = min(K_TILE, k - k0)
                tiles[k0 // K_TILE][:, j : j + cc] = nisa.nc_transpose(rows[:, k0 - r0 : k0 - r0 + kt])
    return tiles


def operand_dtype(*views: View) -> Any:
    """The dtype matmul operands are loaded in: bf16/fp16 when every operand is stored so (autocast and
    half-precision models: TensorE multiplies them at full rate, accumulating in fp32 PSUM), else fp32."""
    kinds = {v.dtype for v in views}
    if kinds == {"bfloat16"}:
        return nl.bfloat16
    if kinds == {"float16"}:
        return nl.float16
    return nl.float32


def _accumulate(acc: NkiTensor, i: int, stationary: NkiTensor, moving: NkiTensor) -> None:
    if i == 0:
        acc[...] = nisa.nc_matmul(stationary, moving)
    else:
        acc += nisa.nc_matmul(stationary, moving)


RESIDENT_BYTES = 64 * 1024  # bytes per partition of a moving operand loaded once for all output tiles


def matmul_kernel(out: View, a: View, b: View, bias: View | None = None, alpha: float = 1.0, beta: float = 1.0) -> None:
    m, k = a.shape
    n = b.shape[1]
    a_t = a.permute((1, 0))  # [K, M]: the stationary operand
    dt = operand_dtype(a, b)
    resident = -(-k // K_TILE) * n * 4 <= RESIDENT_BYTES  # the moving operand fits: load it once
    m_tile = _m_tile(m)
    chunks = _k_chunks(k, min(m_tile, m), n if resident else min(N_TILE, n))
    if len(chunks) > 1:
        _chunked_matmul(out, a_t, b, bias, alpha, beta, m_tile, chunks)
        return
    moving = k_tiles(b, 0, n, dt) if resident else []
    whole = _one_store(out, m_tile)
    for m0 in range(0, m, m_tile):
        mt = min(m_tile, m - m0)
        stationary = k_tiles(a_t, m0, mt, dt)
        for n0 in range(0, n, N_TILE):
            nt = min(N_TILE, n - n0)
            acc = nl.ndarray((mt, nt), dtype=nl.float32, buffer=nl.psum)
            tiles = [t[:, n0 : n0 + nt] for t in moving] if resident else k_tiles(b, n0, nt, dt)
            for i, mv in enumerate(tiles):
                _accumulate(acc, i, stationary[i], mv)
            bt = None if bias is None else load(view_access(bias, 0, (m0, n0), (mt, nt), (1,)))
            if whole is not None:  # gathered in SBUF, one store at the end
                _epilogue(acc, bt, alpha, beta, dst=whole[1][:, m0 // m_tile, n0 : n0 + nt])
                continue
            # one store per PSUM tile: the first tiles' transfers overlap the next tiles' matmuls
            store(view_access(out, 0, (m0, n0), (mt, nt), (1,)), _epilogue(acc, bt, alpha, beta))
    if whole is not None:
        store(*whole)


K_CHUNK_BYTES = 96 * 1024  # bytes per partition beyond which the K tiles of both operands are loaded in chunks
K_CHUNK_STEP = 32 * 1024  # bytes per partition of one chunk's K tiles (two chunks may be live at once)


def _k_chunks(k: int, mt: int, nt: int) -> list[tuple[int, int]]:
    """The contraction in one chunk when all its stationary [kt, mt] and moving [kt, nt] K tiles (fp32) take at
    most `K_CHUNK_BYTES` per partition, else cut into chunks of whole K tiles taking at most `K_CHUNK_STEP`."""
    per_tile = (mt + nt) * 4
    if -(-k // K_TILE) * per_tile <= K_CHUNK_BYTES:
        return [(0, k)]
    step = max(1, K_CHUNK_STEP // per_tile) * K_TILE
    return [(k0, min(k, k0 + step)) for k0 in range(0, k, step)]


def _chunked_matmul(out: View, a_t: View, b: View, bias: View | None, alpha: float, beta: float, m_tile: int,
                    chunks: list[tuple[int, int]]) -> None:  # fmt: skip
    """`matmul_kernel` for a contraction too long for its K tiles to stay in SBUF at once (e.g. a weight
    gradient over a 224x224 batch of 2: K = 25088): per output tile, the K chunks' stationary and moving
    tiles are loaded in turn and accumulate in one PSUM tile, in the same K-tile order as the unchunked
    kernel (the same fp32 sums)."""
    (m, n), dt = out.shape, operand_dtype(a_t, b)
    for m0 in range(0, m, m_tile):
        mt = min(m_tile, m - m0)
        for n0 in range(0, n, N_TILE):
            nt = min(N_TILE, n - n0)
            acc = nl.ndarray((mt, nt), dtype=nl.float32, buffer=nl.psum)
            i = 0
            for k0, k1 in chunks:
                stationary = k_tiles(a_t.slice(0, k0, k1), m0, mt, dt)
                for s_tile, moving in zip(stationary, k_tiles(b.slice(0, k0, k1), n0, nt, dt), strict=True):
                    _accumulate(acc, i, s_tile, moving)
                    i += 1
            bt = None if bias is None else load(view_access(bias, 0, (m0, n0), (mt, nt), (1,)))
            store(view_access(out, 0, (m0, n0), (mt, nt), (1,)), _epilogue(acc, bt, alpha, beta))


ONE_STORE_BYTES = 16 * 1024  # bytes per partition of a result gathered in SBUF for one store


def _m_tile(m: int) -> int:
    """Rows of the output tiles: 128, or for M > 128 not a multiple of 128 the largest divisor of M up to 128
    when it is at least 32 (M = 192 as two tiles of 96: whole tiles, so one DMA can store them all)."""
    if m <= M_TILE or m % M_TILE == 0:
        return M_TILE
    best = max(d for d in range(1, M_TILE + 1) if m % d == 0)
    return best if best >= 32 else M_TILE


def _one_store(out: View, m_tile: int = M_TILE) -> tuple[Access, NkiTensor] | None:
    """(the store pattern, an SBUF tile [rows, M tiles, N]) gathering a [M, N] result of several PSUM tiles
    for one store (every DMA takes a trigger slot): rows contiguous, M <= `m_tile` or whole M tiles, at most
    `ONE_STORE_BYTES` per partition; None: one store per PSUM tile."""
    m, n = out.shape
    tiles = -(-m // m_tile)
    if out.strides[1] != 1 or (m > m_tile and m % m_tile) or tiles * n * 4 > ONE_STORE_BYTES:
        return None
    if tiles * -(-n // N_TILE) < 2:
        return None
    rows = min(m, m_tile)
    a = Access(Space.HBM, out.tensor, out.dtype, out.offset, rows, ((m_tile * out.strides[0], tiles), (1, n)), 0,
               out.strides[0])  # fmt: skip
    return a, nl.ndarray((rows, tiles, n), dtype=nl.float32, buffer=nl.sbuf)


def _epilogue(acc: NkiTensor, bias: NkiTensor | None, alpha: float, beta: float, dst: NkiTensor | None = None
              ) -> NkiTensor:  # fmt: skip
    """PSUM eviction: alpha * acc (+ beta * bias), into SBUF (into `dst` when given)."""
    if bias is None:
        if alpha == 1.0:
            return engines.copy(acc, dst=dst) if dst is not None else engines.copy(acc)
        return nisa.tensor_scalar(acc, "multiply", alpha, dst=dst)
    if beta != 1.0:
        bias = nisa.tensor_scalar(bias, "multiply", beta)
    prod = acc if alpha == 1.0 else nisa.tensor_scalar(acc, "multiply", alpha)
    return nisa.tensor_tensor(prod, bias, "add", dst=dst)


# batches of a batched matmul whose results share one PSUM bank and one copy to SBUF. Measured on bench/compile.py's
# nanoGPT block (forward / backward us): 1 (a copy per batch) 26.0 / 38.0; 2: 26.0 / 37.5; 4: 26.2 / 37.6; 8:
# 26.5 / 37.9; a whole bank: 27.3 / 38.6 (the copy waits for all its matmuls instead of overlapping the next ones)
BANK_GROUP = 2
BATCH_BYTES = 32 * 1024  # bytes per partition of one batched operand tile (`bmm_kernel`)


def bmm_kernel(out: View, a: View, b: View) -> None:
    """out[i] = a[i] @ b[i]. Small matrices (M, K <= 128, N <= 512: attention heads) move in one DMA per
    operand for the whole batch (`_batched`): each operand's [rows, B, cols] tile, the batch as a free dim;
    the results gather in one SBUF tile stored by one DMA. Larger ones run `matmul_kernel` per batch."""
    bsz, m, k = a.shape
    n = b.shape[2]
    small = m <= M_TILE and k <= K_TILE and n <= N_TILE and bsz * max(m, k, n) * 4 <= BATCH_BYTES
    if small and operand_dtype(a, b) == nl.float32:
        if not _packed_bmm(out, a, b):
            _batched_bmm(out, a, b)
        return
    for i in range(bsz):
        matmul_kernel(out.select(0, i), a.select(0, i), b.select(0, i))


def _batched(v: View, dtype: Any = nl.float32) -> list[NkiTensor]:
    """The per-batch SBUF tiles [R, C] of a [B, R, C] view (R <= 128), windows of `_batched_tile`."""
    tile = _batched_tile(v, dtype)
    return [tile[:, i, :] for i in range(v.shape[0])]


def _batched_tile(v: View, dtype: Any = nl.float32) -> NkiTensor:
    """The SBUF tile [R, B, C] of a [B, R, C] view (R <= 128) from one DMA; a view whose columns are contiguous
    in HBM comes as its natural [C, B, R] rows, transposed per batch."""
    bsz, r, c = v.shape
    sb, sr, sc = v.strides
    if sc == 1 or sr != 1 or c == 1:
        return load(Access(Space.HBM, v.tensor, v.dtype, v.offset, r, ((sb, bsz), (sc, c)), 0, sr), dtype)
    a = Access(Space.HBM, v.tensor, v.dtype, v.offset, c, ((sb, bsz), (sr, r)), 0, sc)
    natural = load(a, dtype)
    tiles = nl.ndarray((r, bsz, c), dtype=natural.dtype, buffer=nl.sbuf)
    for i0, g in _bank_groups(bsz, c):  # the transposes of a group into one PSUM bank, evacuated by one copy
        bank = nl.ndarray((r, g, c), dtype=natural.dtype, buffer=nl.psum)
        for j in range(g):
            nisa.nc_transpose(natural[:, i0 + j, :], dst=bank[:, j, :])
        engines.copy(bank, dst=tiles[:, i0 : i0 + g, :])
    return tiles


def _bank_groups(bsz: int, n: int) -> list[tuple[int, int]]:
    """(first, count) of consecutive batches, at most `BANK_GROUP`, whose [.., n] fp32 results share one PSUM
    bank (N_TILE elements per partition): one PSUM-to-SBUF copy per group instead of one per batch (each copy
    pays the engine's minimum and its access overhead)."""
    g = max(1, min(BANK_GROUP, N_TILE // max(n, 1)))
    return [(i0, min(g, bsz - i0)) for i0 in range(0, bsz, g)]


def _batched_bmm(out: View, a: View, b: View) -> None:
    bsz, m, _ = a.shape
    n = b.shape[2]
    stationary = _batched(a.permute((0, 2, 1)))  # a[i].T: [K, M]
    moving = _batched(b)
    res = nl.ndarray((m, bsz, n), dtype=nl.float32, buffer=nl.sbuf)
    for i0, g in _bank_groups(bsz, n):
        bank = nl.ndarray((m, g, n), dtype=nl.float32, buffer=nl.psum)
        for j in range(g):
            nisa.nc_matmul(stationary[i0 + j], moving[i0 + j], dst=bank[:, j, :], accumulate=False)
        engines.copy(bank, dst=res[:, i0 : i0 + g, :])
    so, ro, co = out.strides
    store(Access(Space.HBM, out.tensor, out.dtype, out.offset, m, ((so, bsz), (co, n)), 0, ro), res)


PACK_HEADS = True  # module switch for tests comparing head-packed with per-head batched matmuls
PMAX_PACK = 128  # output partitions a group of packed batches fills (both presets)


def _packed_bmm(out: View, a: View, b: View) -> bool:
    """out[i] = a[i] @ b[i] for groups of G = 128 // M >= 2 consecutive batches (attention heads) per matmul, so
    that the result and its consumers (the scale, the mask add, the softmax) use G * M partitions instead of M
    (attention: 4 heads of 32 rows on all 128). Per group, the stationary [K, G * M] holds the G matrices a[h].T
    side by side and the moving [K, G * N] the G matrices b[h]: the product [G * M, G * N] holds every a[h'] @
    b[h''] and its diagonal blocks (h' = h'') are the results, each the very sum over K of its own batch,
    copied out of PSUM block by block (each block on its own partitions: no data crosses partitions). The
    stationary comes from a's rows of the group on G * M partitions (one TensorE transpose per group) when an
    earlier kernel left them so in SBUF (the softmax of packed scores), else from per-batch transposes
    (`_batched_tile`). Results [G * M, groups, N] are stored by one DMA. False (nothing emitted) when the
    batches are not consecutive row blocks of out (batch stride = rows x row stride, rows contiguous), when
    fewer than 2 fit, or for a result narrower than its rows (N < M) whose stationary needs the per-batch
    transposes."""
    bsz, m, _ = a.shape
    n = b.shape[2]
    g = PMAX_PACK // m
    if not PACK_HEADS or g < 2 or bsz % g or g * n > N_TILE or out.strides[0] != m * out.strides[1]:
        return False
    if out.strides[2] != 1 and n > 1:
        return False
    groups = bsz // g
    stationary = _group_rows_transposed(a, g)
    if stationary is None:
        if n < m:  # a narrow result (an attention backward's dV) goes on to layout changes, not row-wise ops:
            return False  # measured on the nanoGPT block's backward: 25.2 us packed, 24.8 us not
        stationary = _batched_tile(a.permute((0, 2, 1)))  # [K, B, M]
    moving = _batched_tile(b)  # [K, B, N]
    bank = nl.ndarray((g * m, groups, g, n), dtype=nl.float32, buffer=nl.psum)
    res = nl.ndarray((g * m, groups, n), dtype=nl.float32, buffer=nl.sbuf)
    for j in range(groups):
        st = stationary[:, j * g : (j + 1) * g, :].flatten_free()
        mv = moving[:, j * g : (j + 1) * g, :].flatten_free()
        assert st is not None and mv is not None  # whole batches of contiguous tiles
        nisa.nc_matmul(st, mv, dst=bank[:, j, :, :].flatten_free(), accumulate=False)
        for h in range(g):  # the diagonal block of batch h: its own partitions, read from PSUM
            engines.copy(bank[h * m : (h + 1) * m, j, h, :], dst=res[h * m : (h + 1) * m, j, :])
    so, som = out.strides[0], out.strides[1]
    store(Access(Space.HBM, out.tensor, out.dtype, out.offset, g * m, ((g * so, groups), (1, n)), 0, som), res)
    return True


def _group_rows_transposed(a: View, g: int) -> NkiTensor | None:
    """[K, B, M]: the a[i].T of a [B, M, K] view from the rows of each group of g batches on g * M partitions
    (one TensorE transpose of [g * M, K] per group), when an earlier kernel left those rows in SBUF
    (`nprof.compiler.fusion`); else None."""
    bsz, m, k = a.shape
    sa, sm, sk = a.strides
    if sa != m * sm or (sk != 1 and k > 1) or k > PMAX_PACK:
        return None
    rows = Access(Space.HBM, a.tensor, a.dtype, a.offset, g * m, ((g * sa, bsz // g), (1, k)), 0, sm)
    builder = trace.current()
    if not getattr(builder, "fusing", False) or not builder.holds(rows):  # type: ignore[attr-defined]
        return None
    tile = load(rows)
    res = nl.ndarray((k, bsz, m), dtype=nl.float32, buffer=nl.sbuf)
    for j in range(bsz // g):
        engines.copy(nisa.nc_transpose(tile[:, j, :]), dst=res[:, j * g : (j + 1) * g, :].flatten_free())
    return res


def sum_rows_kernel(out: View, src: View, scale: float = 1.0) -> None:
    """out[1, N] = scale * sum over rows of src[R, N] (N contiguous), as ones[R, 1].T @ src on TensorE."""
    r, n = src.shape
    ones = [nisa.memset((min(K_TILE, r - k0), 1), 1.0, nl.float32) for k0 in range(0, r, K_TILE)]
    for n0 in range(0, n, N_TILE):
        nt = min(N_TILE, n - n0)
        acc = nl.ndarray((1, nt), dtype=nl.float32, buffer=nl.psum)
        for i, k0 in enumerate(range(0, r, K_TILE)):
            _accumulate(acc, i, ones[i], load_tile(src, k0, min(K_TILE, r - k0), n0, nt))
        res = engines.copy(acc) if scale == 1.0 else nisa.tensor_scalar(acc, "multiply", scale)
        store(view_access(out, 0, (0, n0), (1, nt), (1,)), res)


def copy_kernel(dst: View, src: View | float) -> None:
    """dst = src (src broadcast to dst.shape). A permuting copy (the source's stride-1 dim is not the
    destination's) moves contiguous rows by DMA and transposes them on TensorE instead of element-wise DMA."""
    from nprof.compiler.kernels.elementwise import copy_body, map_kernel

    nd = len(dst.shape)
    if isinstance(src, View):
        c = next((d for d in reversed(range(nd)) if dst.shape[d] > 1 and dst.strides[d] == 1), None)
        r = next((d for d in range(nd) if src.shape[d] > 1 and src.strides[d] == 1), None)
        if c is not None and r is not None and r != c and src.strides[c] != 1:
            if _batched_transpose(dst, src, r, c):
                return
            if min(src.shape[r], dst.shape[c]) >= 32:
                _transposing_copy(dst, src, r, c)  # worth TensorE transposes only for tiles of >= 32 rows, columns
                return
    map_kernel(dst, [src], copy_body)


TRANSPOSES_MAX = 64  # TensorE transposes one batched transposing copy may take (each ~0.1 us)


def _batched_transpose(dst: View, src: View, r: int, c: int) -> bool:
    """A permuting copy of [R, C] matrices (R, C <= 128; the other dims a batch of at most `TRANSPOSES_MAX`,
    each matrix's columns contiguous in `src` and rows in `dst`): one DMA loads every matrix's natural rows
    [C, batch..., R], TensorE transposes each into one [R, batch..., C] tile, one DMA stores it. False
    (nothing emitted) when the shapes do not fit."""
    others = [d for d in range(len(dst.shape)) if d not in (r, c) and dst.shape[d] > 1]
    rows, cols = dst.shape[r], dst.shape[c]
    batch = [dst.shape[d] for d in others]
    count = int(np.prod(batch)) if batch else 1
    if rows > 128 or cols > 128 or count > TRANSPOSES_MAX or count * max(rows, cols) * 4 > BATCH_BYTES:
        return False
    free_src = (*((src.strides[d], dst.shape[d]) for d in others), (1, rows))
    natural = load(Access(Space.HBM, src.tensor, src.dtype, src.offset, cols, free_src, 0, src.strides[c]))
    res = nl.ndarray((rows, *batch, cols), dtype=nl.float32, buffer=nl.sbuf)
    for idx in itertools.product(*(range(b) for b in batch)):
        res[(slice(None), *idx, slice(None))] = nisa.nc_transpose(natural[(slice(None), *idx, slice(None))])
    free_dst = (*((dst.strides[d], dst.shape[d]) for d in others), (1, cols))
    store(Access(Space.HBM, dst.tensor, dst.dtype, dst.offset, rows, free_dst, 0, dst.strides[r]), res)
    return True


def _transposing_copy(dst: View, src: View, r: int, c: int) -> None:
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
                store(view_access(d2, 0, (r0, c0), (rt, ct), (1,)), load_tile(s2, r0, rt, c0, ct))
