"""Shared fixtures: a tiny hand-built profile whose numbers are easy to check by hand."""

from __future__ import annotations

import os

import pytest

from nprof.profile import Profile, ProfileInfo

os.environ.setdefault("NPROF_NO_PROGRESS", "1")


def tiny_profile() -> Profile:
    """Two engines and two DMAs on a trn1-like device; every number chosen for hand checks.

    timeline (ns):  dma q0 [0,100) 4096 B hbm->sbuf; tensor MATMUL [100,300) 2*128*128*512 flops;
    vector TENSOR_TENSOR [300,400) waits on the matmul; dma q1 [400,450) 1024 B sbuf->hbm.
    """
    info = ProfileInfo(
        device="virtual-neuroncore",
        name="tiny",
        preset="trn1",
        peak_flops=1.0e12,
        hbm_bandwidth=1.0e11,
        peaks_source="test",
    )
    mm_flops = 2 * 128 * 128 * 512
    return Profile.build(
        info,
        instructions={
            "id": [2, 3],
            "ts": [100, 300],
            "duration": [200, 100],
            "engine": ["tensor", "vector"],
            "track": ["tensor.moving", "vector"],
            "opcode": ["MATMUL", "TENSOR_TENSOR"],
            "operands": ["psum[0:128, 0:512] <- sbuf a, sbuf b", "sbuf c <- psum, sbuf"],
            "nki_source_location": ["kernel.py:10", "kernel.py:12"],
            "flops": [mm_flops, 0],
            "hw_flops": [mm_flops, 0],
            "sbuf_read_bytes": [131072, 65536],
            "psum_write_bytes": [262144, 0],
            "deps": [[1], [2]],
            "pc": [1, 2],
        },
        dma={
            "id": [1, 4],
            "ts": [0, 400],
            "duration": [100, 50],
            "queue": ["q0", "q1"],
            "direction": ["hbm->sbuf", "sbuf->hbm"],
            "bytes": [4096, 1024],
            "partitions": [2, 1],
            "tensor": ["a", "out"],
            "deps": [[], [3]],
            "pc": [0, 3],
        },
    )


@pytest.fixture
def tiny() -> Profile:
    return tiny_profile()
