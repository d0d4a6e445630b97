"""Display names of timeline rows (engine tracks and DMA queues), shared by exporters and terminology.

Contract: `track_label(track)` and `queue_label(queue)` return the row name a
user sees (perfetto track names, json `label`); `TRACK_TERMS` explains them.
"""

from __future__ import annotations

_TRACKS = {
    "tensor.stationary": "Tensor (LoadStationary)",
    "tensor.moving": "TensorMatrix (MultiplyMoving)",
    "tensor": "Tensor",
    "vector": "Vector",
    "scalar": "Scalar",
    "gpsimd": "GpSimd",
    "sync": "Sync",
}

TRACK_TERMS: dict[str, str] = {
    "tensor.stationary": "loads stationary operands (weights) into the systolic array (LDWEIGHTS)",
    "tensor.moving": "matmuls streaming the moving operand through the array (MATMUL)",
    "vector": "Vector engine: element-wise, reduction and normalisation instructions",
    "scalar": "Scalar engine: activation functions with scale and bias (ACTIVATE)",
    "gpsimd": "GpSimd engine: general-purpose SIMD cores (iota, affine select, custom ops)",
    "sync": "Sync engine: semaphores and events that order the other engines",
    "cc.<k>": "CC-core k: collective-communication core synchronising collective operations",
    "q<k>": "DMA queue k: transfers between HBM, SBUF and PSUM",
    "cpu:<thread>": "real hardware: operators run by one CPU thread",
    "cuda:<device>:<stream>": "real hardware: kernels of one CUDA stream",
    "mtia:<device>:<stream>": "real hardware: device work of one MTIA stream",
}

ENGINE_TERMS: dict[str, str] = {
    "tensor": "Tensor engine (TensorE): 128x128 systolic array for matmuls and transposes",
    "vector": "Vector engine (VectorE): 128-lane element-wise and reduction unit",
    "scalar": "Scalar engine (ScalarE): 128-lane activation-function unit",
    "gpsimd": "GpSimd engine: programmable SIMD cores",
    "sync": "Sync engine: semaphores and events",
    "cc": "Collective cores: collective communication between workers",
    "other": "real hardware: operators that map to no NeuronCore engine",
    "host": "real hardware: host (CPU) work of a trace that also has device (GPU/MTIA) work",
}


def track_label(track: str) -> str:
    """Row name of an instruction track."""
    if track in _TRACKS:
        return _TRACKS[track]
    if track.startswith("cc."):
        return f"CC-core {track[3:]}"
    return track


def queue_label(queue: str) -> str:
    """Row name of a DMA queue."""
    return f"DMA {queue}"
