"""Golden timeline of a small mixed program on both presets: any change to the timing model shows up here.

Regenerate on purpose only: NPROF_REGEN_GOLDEN=1 .venv/bin/python -m pytest tests/device/test_golden_timing.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from nprof.arch.isa import Engine, Opcode
from tests.device.kit import Kit

GOLDEN = Path(__file__).parent / "golden"


def mixed_program(preset: str) -> Kit:
    """Two tiles: load x and w on two queues, matmul into PSUM, exp with a row-sum, scale, store."""
    k = Kit("golden", preset)
    rng = np.random.default_rng(7)
    w = k.load("w", rng.standard_normal((128, 128)).astype(np.float32), "bfloat16")
    for t in range(2):
        x = k.input(f"x{t}", rng.standard_normal((128, 512)).astype(np.float32), "bfloat16")
        xs = k.sbuf(f"xs{t}", 128, 512, "bfloat16")
        load = k.dma(xs, x, queue=1 + t, deps=())
        ld = k.emit(Engine.TENSOR, Opcode.LDWEIGHTS, ins=(w,), deps=(0,))
        acc = k.psum(f"acc{t}", 128, 512)
        mm = k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (w, xs), deps=(ld, load), accumulate=False)
        e, s = k.sbuf(f"e{t}", 128, 512), k.sbuf(f"s{t}", 128, 1)
        act = k.emit(Engine.SCALAR, Opcode.ACTIVATE, (e, s), (acc,), deps=(mm,), func="exp", scale=0.01,
                     reduce_op="add")  # fmt: skip
        o = k.sbuf(f"o{t}", 128, 512, "bfloat16")
        k.emit(Engine.VECTOR, Opcode.TENSOR_SCALAR, (o,), (e, s), deps=(act,), op0="divide")
        k.store(f"out{t}", o)
    return k


@pytest.mark.parametrize("preset", ["trn1", "trn2"])
def test_golden_timeline(preset: str) -> None:
    res = mixed_program(preset).run()
    timeline = sorted(
        [(r["id"], r["track"], r["opcode"], r["ts"], r["duration"], r["wait_ns"])
         for r in res.profile.instructions.to_pylist()]
        + [(r["id"], r["queue"], "DMA", r["ts"], r["duration"], 0) for r in res.profile.dma.to_pylist()]
    )  # fmt: skip
    data = {"latency_ns": res.latencies_ns[0], "events": [list(e) for e in timeline]}
    path = GOLDEN / f"sim_timing_{preset}.json"
    if os.environ.get("NPROF_REGEN_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        rows = ",\n".join(f"  {json.dumps(e)}" for e in data["events"])
        path.write_text(f'{{"latency_ns": {data["latency_ns"]}, "events": [\n{rows}\n]}}\n')
    assert json.loads(path.read_text()) == data
    np.testing.assert_allclose(res.outputs["out0"].astype(np.float32).sum(axis=1), 1.0, rtol=2e-2)
