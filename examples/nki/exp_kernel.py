"""Tiled elementwise exp of a [250, 512] fp32 tensor, benchmarked on the virtual NeuronCore.

The kernel is written exactly as for AWS NKI; only the imports differ. Run:
    python examples/nki/exp_kernel.py
It prints the latency table and writes file.neff / profile.ntff (view them with
`nprof view -n file.neff -s profile.ntff`).
"""

import math

import nprof.nki.language as nl
from nprof import nki
from nprof.nki.typing import tensor


@nki.benchmark(save_neff_name="file.neff", save_trace_name="profile.ntff")
def tensor_exp_kernel_(in_tensor):
    """exp of every element of a 2-D HBM tensor, 128 rows at a time (the last tile is partial)."""
    out_tensor = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)

    sz_p, sz_f = in_tensor.shape
    i_f = nl.arange(sz_f)[None, :]
    for p in nl.affine_range(math.ceil(sz_p / nl.tile_size.pmax)):
        # rows of this tile; the mask keeps the last tile inside the tensor
        i_p = p * nl.tile_size.pmax + nl.arange(nl.tile_size.pmax)[:, None]
        in_tile = nl.load(in_tensor[i_p, i_f], mask=(i_p < sz_p))
        out_tile = nl.exp(in_tile)
        nl.store(out_tensor[i_p, i_f], value=out_tile, mask=(i_p < sz_p))

    return out_tensor


if __name__ == "__main__":
    tensor_exp_kernel_(tensor[[250, 512], nl.float32])
