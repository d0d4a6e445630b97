"""Row softmax and LayerNorm kernels on the virtual NeuronCore, checked against numpy.

* `softmax_kernel`: 128 rows per tile, `nl.softmax` over the free axis (a max
  reduction, exp with the row sum fused on ScalarE, a reciprocal and a scale),
  with a mask for the partial last tile.
* `layernorm_kernel`: per-row mean/variance with `nisa.bn_stats` /
  `nisa.bn_aggr`, normalisation with per-partition operands
  (`nisa.tensor_scalar`), and gamma/beta rows broadcast to all 128 partitions
  by the DMA (a zero partition stride) once, outside the loop.
Run:
    python examples/nki/softmax_layernorm.py
"""

import numpy as np

import nprof.nki.isa as nisa
import nprof.nki.language as nl
from nprof import nki


@nki.jit
def softmax_kernel(x):
    """softmax(x, axis=1) for x [N, D], D <= 512."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, d = x.shape
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range((n + nl.tile_size.pmax - 1) // nl.tile_size.pmax):
        i_p = t * nl.tile_size.pmax + nl.arange(nl.tile_size.pmax)[:, None]
        rows = nl.load(x[i_p, i_f], mask=(i_p < n))
        probs = nl.softmax(rows, axis=1, mask=(i_p < n))
        nl.store(out[i_p, i_f], value=probs, mask=(i_p < n))
    return out


@nki.jit
def layernorm_kernel(x, gamma, beta, eps=1e-5):
    """LayerNorm over the last axis of x [N, D] with gamma/beta of shape [1, D]."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    n, d = x.shape
    pmax = nl.tile_size.pmax
    g = nl.load(gamma.broadcast_to((pmax, d)))
    b = nl.load(beta.broadcast_to((pmax, d)))
    i_f = nl.arange(d)[None, :]
    for t in nl.affine_range((n + pmax - 1) // pmax):
        i_p = t * pmax + nl.arange(pmax)[:, None]
        rows = nl.load(x[i_p, i_f], mask=(i_p < n))
        stats = nisa.bn_stats(rows, mask=(i_p < n))
        mean_var = nisa.bn_aggr(stats)
        mean = mean_var[:, 0:1]
        rstd = nisa.tensor_scalar(mean_var[:, 1:2], nl.add, eps, op1=nl.power, operand1=-0.5)
        normed = nisa.tensor_scalar(rows, nl.subtract, mean, op1=nl.multiply, operand1=rstd)
        scaled = nl.multiply(normed, g)
        y = nl.add(scaled, b, dtype=x.dtype)
        nl.store(out[i_p, i_f], value=y, mask=(i_p < n))
    return out


def reference_layernorm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def main() -> tuple[float, float]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 256)).astype(np.float32)
    sm = softmax_kernel(x)
    ref = np.exp(x - x.max(axis=1, keepdims=True))
    ref /= ref.sum(axis=1, keepdims=True)
    err_sm = float(np.abs(sm - ref).max())
    gamma = rng.standard_normal((1, 256)).astype(np.float32)
    beta = rng.standard_normal((1, 256)).astype(np.float32)
    ln = layernorm_kernel(x, gamma, beta)
    err_ln = float(np.abs(ln - reference_layernorm(x, gamma, beta)).max())
    print(f"softmax   max abs error vs numpy: {err_sm:.3g}")
    print(f"layernorm max abs error vs numpy: {err_ln:.3g}")
    return err_sm, err_ln


if __name__ == "__main__":
    main()
