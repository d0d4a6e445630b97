"""Small kernels with one collective each, traced into Programs for the multi-worker tests."""

from __future__ import annotations

from collections.abc import Sequence

import nprof.nki.language as nl
from nprof.nki import collectives as cc
from nprof.nki.trace import ProgramBuilder
from nprof.program.model import Program


def collective_program(
    kind: str,
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    *,
    extra: int = 0,
    op: str = "add",
    group: Sequence[int] | None = None,
    name: str = "cc",
) -> Program:
    """x (input) -> SBUF -> `extra` dependent adds of 0.0 (delay) -> HBM scratch -> `kind` collective -> out."""

    def kernel(x, out):
        t = nl.load(x)
        for _ in range(extra):
            t = nl.add(t, 0.0)
        tmp = nl.ndarray(x.shape, nl.float32, buffer=nl.shared_hbm)
        nl.store(tmp, t)
        fn = getattr(cc, kind)
        if kind in ("all_reduce", "reduce_scatter"):
            fn(out, tmp, op=op, replica_group=group)
        else:
            fn(out, tmp, replica_group=group)

    b = ProgramBuilder(name)
    x = b.hbm_tensor("x", tuple(in_shape), "float32", kind="input")
    out = b.hbm_tensor("out", tuple(out_shape), "float32", kind="output")
    b.call(kernel, x, out)
    return b.build()


def straggler_run(directory, n: int = 4, late: int = 2, extra: int = 40):
    """Write profile_rank_<i>.ntff of an n-rank all-reduce job where rank `late` does extra work first."""
    from pathlib import Path

    import numpy as np

    from nprof.device.workers import simulate_workers

    shape = (64, 128)
    progs = [collective_program("all_reduce", shape, shape, extra=extra if r == late else 0) for r in range(n)]
    inputs = {r: {"x": np.full(shape, r, np.float32)} for r in range(n)}
    job = simulate_workers(progs, inputs, world_size=n)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for r, res in job.results.items():
        res.profile.save(d / f"profile_rank_{r}.ntff")
    return job


def delayed_run(directory, n: int, late: int, delay_ns: float, per_node: int = 16):
    """Write profile_rank_<i>.ntff of an n-rank timing-only all-reduce job (nodes of `per_node`) where rank
    `late` starts `delay_ns` late."""
    from pathlib import Path

    from nprof.device.workers import simulate_workers

    prog = collective_program("all_reduce", (32, 64), (32, 64), extra=3)
    job = simulate_workers(prog, world_size=n, workers_per_node=per_node, numerics=False,
                           start_delay_ns={late: delay_ns})  # fmt: skip
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for r, res in job.results.items():
        res.profile.save(d / f"profile_rank_{r}.ntff")
    return job
