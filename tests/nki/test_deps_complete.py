"""Every pair of conflicting instructions is ordered by `deps` (checked by brute force on exact addresses)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import nprof.nki.language as nl
from nprof.arch.isa import ITEMSIZE, Access, Opcode, Space
from nprof.nki import Kernel
from tests.nki.test_nki_tutorial_styles import causal_attention_scores, rmsnorm_kernel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nki"


def _runs(acc: Access) -> tuple[tuple, np.ndarray]:
    """Exact footprint: a key (memory, partitions) and the [start, end) element/byte runs it covers."""
    *outer, (inner_stride, inner_size) = acc.free
    starts = np.zeros((1,), np.int64)
    for stride, size in outer:
        starts = (starts[:, None] + stride * np.arange(size)[None, :]).ravel()
    if inner_stride != 1:  # strided innermost axis: one run per element
        starts = (starts[:, None] + inner_stride * np.arange(inner_size)[None, :]).ravel()
        inner_size = 1
    if acc.space is Space.HBM:
        rows = acc.offset + acc.partition_stride * np.arange(acc.partitions)
        starts = (rows[:, None] + starts[None, :]).ravel()
        return ("hbm", acc.tensor, 0, 1), np.stack([starts, starts + inner_size], axis=1)
    item = ITEMSIZE[acc.dtype]
    lo = acc.offset + item * starts
    key = (acc.space.value, "", acc.partition_start, acc.partition_start + acc.partitions)
    return key, np.stack([lo, lo + item * inner_size], axis=1)


def _overlap(a: tuple[tuple, np.ndarray], b: tuple[tuple, np.ndarray]) -> bool:
    (ka, ra), (kb, rb) = a, b
    if ka[:2] != kb[:2] or ka[3] <= kb[2] or kb[3] <= ka[2]:
        return False
    return bool(np.any((ra[:, None, 0] < rb[None, :, 1]) & (rb[None, :, 0] < ra[:, None, 1])))


def _check(program) -> int:
    reads = [[_runs(a) for a in ins.ins] for ins in program.instructions]
    writes = [[_runs(a) for a in ins.outs] for ins in program.instructions]
    closure: list[set[int]] = []
    for ins in program.instructions:
        c = set(ins.deps)
        for d in ins.deps:
            c |= closure[d]
        closure.append(c)
    checked = 0
    for j in range(len(program.instructions)):
        for i in range(j):
            pairs = [(w, x) for w in writes[i] for x in reads[j] + writes[j]] + [
                (r, w) for r in reads[i] for w in writes[j]
            ]
            if any(_overlap(a, b) for a, b in pairs):
                checked += 1
                assert i in closure[j], f"instruction {j} must wait for {i}"
    return checked


def _module(name):
    spec = importlib.util.spec_from_file_location(f"deps_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _reuse_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(20):  # 20 x 2 tiles of 8 KiB wrap around SBUF: regions are reused
        t = nl.load(x[0:2, :])
        nl.store(out[0:2, :], value=nl.exp(t) + float(i))
    return out


CASES = {
    "exp": lambda: Kernel(_module("exp_kernel").tensor_exp_kernel_.func).trace(np.zeros((300, 64), np.float32)),
    "matmul": lambda: Kernel(_module("matmul_tiled").matmul_tiled).trace(
        np.zeros((256, 256), np.float32), np.zeros((256, 512), np.float32)
    ),
    "layernorm": lambda: _module("softmax_layernorm").layernorm_kernel.trace(
        np.zeros((200, 64), np.float32), np.zeros((1, 64), np.float32), np.zeros((1, 64), np.float32)
    ),
    "rmsnorm": lambda: rmsnorm_kernel.trace(np.zeros((200, 32), np.float32), np.zeros((32,), np.float32)),
    "attention": lambda: causal_attention_scores.trace(
        np.zeros((128, 32), np.float32), np.zeros((128, 32), np.float32)
    ),
    "reuse": lambda: Kernel(_reuse_kernel).trace(np.zeros((2, 4096), np.float32)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_conflicting_pairs_are_ordered(name):
    program = CASES[name]().program
    assert _check(program) > 0


def test_reuse_case_really_recycles_sbuf():
    program = CASES["reuse"]().program
    offsets = [
        ins.outs[0].offset
        for ins in program.instructions
        if ins.opcode is Opcode.DMA_DIRECT2D and ins.outs[0].space is Space.SBUF
    ]
    assert len(set(offsets)) < len(offsets)


def test_independent_tiles_stay_independent():
    program = CASES["exp"]().program
    loads = [i for i, ins in enumerate(program.instructions) if ins.ins and ins.ins[0].space is Space.HBM]
    assert len(loads) == 3 and all(program.instructions[i].deps == () for i in loads)


def test_a_partial_reader_does_not_block_writes_to_the_part_it_did_not_read() -> None:
    """A write to bytes [512, 1024) of an SBUF tile waits for its writer, not for a reader of [0, 512) only."""
    from nprof.arch.isa import Access, Space
    from nprof.nki.deps import DepTracker

    def sb(offset: int, n: int) -> Access:
        return Access(Space.SBUF, "t", "bfloat16", offset, 128, ((1, n),))

    tracker = DepTracker()
    assert tracker.record(0, (), (sb(0, 512),)) == ()  # writes bytes [0, 1024)
    assert tracker.record(1, (sb(0, 256),), ()) == (0,)  # reads [0, 512)
    assert tracker.record(2, (), (sb(512, 256),)) == (0,)  # writes [512, 1024): no wait for reader 1
    assert tracker.record(3, (), (sb(0, 128),)) == (0, 1)  # writes [0, 256): waits for reader 1
