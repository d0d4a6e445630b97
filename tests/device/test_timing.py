"""Timing by hand from the cost model (trn1: ScalarE 1.4 GHz, VectorE 1.12 GHz, TensorE 2.8 GHz effective)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from nprof.arch.isa import Engine, Opcode
from nprof.arch.presets import get_preset
from tests.device.kit import Kit, rows

SCALAR_NS = 1e9 / 1.4e9  # ns per ScalarE cycle
VECTOR_NS = 1e9 / 1.12e9
TENSOR_NS = 1e9 / 2.8e9


def _activate(k: Kit, n: int = 512, deps: tuple[int, ...] | None = ()) -> int:
    x, y = k.sbuf("x", 128, n), k.sbuf("y", 128, n)
    return k.emit(Engine.SCALAR, Opcode.ACTIVATE, (y,), (x,), deps=deps, func="exp")


def test_one_activate_of_512_takes_512_scalar_cycles() -> None:
    k = Kit()
    _activate(k)
    r = rows(k.run(numerics=False))[0]
    assert abs(512 * SCALAR_NS - 365.714) < 1e-3
    assert (r["ts"], r["duration"]) == (0, 366)  # 365.714 ns rounded to the nearest ns
    assert (r["engine"], r["track"], r["opcode"], r["wait_ns"]) == ("scalar", "scalar", "ACTIVATE", 0)


def test_small_activate_is_floored_at_min_ii() -> None:
    k = Kit()
    _activate(k, n=8)
    assert rows(k.run(numerics=False))[0]["duration"] == round(64 * SCALAR_NS)  # 45.7 -> 46


def test_independent_instructions_on_different_engines_overlap() -> None:
    k = Kit()
    _activate(k)
    a, b, c = k.sbuf("a", 128, 512), k.sbuf("b", 128, 512), k.sbuf("c", 128, 512)
    k.emit(Engine.VECTOR, Opcode.TENSOR_TENSOR, (c,), (a, b), deps=(), op="add")
    ev = rows(k.run(numerics=False))
    assert ev[0]["ts"] == ev[1]["ts"] == 0
    # fp32 SBUF+SBUF tensor_tensor: 2N = 1024 VectorE cycles
    assert ev[1]["duration"] == round(1024 * VECTOR_NS)
    assert k.run(numerics=False).latencies_ns == (round(1024 * VECTOR_NS),)


def test_independent_instructions_on_one_engine_run_back_to_back() -> None:
    k = Kit()
    _activate(k)
    _activate(k)
    ev = rows(k.run(numerics=False))
    assert ev[1]["ts"] == ev[0]["ts"] + ev[0]["duration"] == 366
    assert ev[1]["wait_ns"] == 0


def test_dependent_chain_does_not_overlap_and_pays_the_static_access_latency() -> None:
    k = Kit()
    a = _activate(k)
    b = _activate(k, deps=(a,))
    x, y = k.sbuf("v", 128, 512), k.sbuf("w", 128, 512)
    k.emit(Engine.VECTOR, Opcode.TENSOR_COPY, (y,), (x,), deps=(b,))
    ev = rows(k.run(numerics=False))
    end_a = 512 * SCALAR_NS
    start_b = end_a + 60 * SCALAR_NS  # 60-cycle static access overhead of the dependent instruction's engine
    start_c = start_b + 512 * SCALAR_NS + 60 * VECTOR_NS
    assert ev[1]["ts"] == round(start_b) == 409
    assert ev[2]["ts"] == round(start_c)
    assert ev[2]["duration"] == round(start_c + 512 * VECTOR_NS) - round(start_c)
    assert ev[1]["wait_ns"] == round(start_b - end_a)
    assert ev[2]["deps"] == [1]


def test_dma_takes_fixed_latency_then_bytes_over_bandwidth() -> None:
    k = Kit()
    h = k.hbm("x", (128, 512))
    k.dma(k.sbuf("t", 128, 512), h, queue=3)
    res = k.run(numerics=False)
    d = res.profile.dma.to_pylist()[0]
    # 128 rows of 2 KiB, each + 256 B-equivalent overhead, dealt out to 16 engines of 17 B/ns
    transfer = (128 * 512 * 4 + 128 * 256) / (16 * 17.0)
    assert d["ts"] == 1300  # semaphore-to-start latency
    assert d["duration"] == round(1300 + transfer) - 1300 == 1084
    assert (d["queue"], d["direction"], d["bytes"], d["partitions"], d["tensor"]) == (
        "q3",
        "hbm->sbuf",
        262144,
        128,
        "x",
    )
    assert res.latencies_ns == (round(1300 + transfer),)


def test_a_single_row_dma_uses_one_engine() -> None:
    k = Kit()
    k.dma(k.sbuf("t", 1, 4096), k.hbm("x", (1, 4096)))  # one 16 KiB chunk: one engine
    d = k.run(numerics=False).profile.dma.to_pylist()[0]
    assert d["duration"] == round(1300 + (16384 + 256) / 17.0) - 1300


def test_small_dma_rows_are_overhead_bound() -> None:
    k = Kit()
    k.dma(k.sbuf("t", 128, 32), k.hbm("x", (128, 32)))  # 128 B per partition
    d = k.run(numerics=False).profile.dma.to_pylist()[0]
    payload = 128 * 128 / (16 * 17.0)
    assert d["duration"] == round(1300 + payload * 3) - 1300  # overhead 256 B per 128 B row: 1/3 efficiency


def test_dma_waiting_on_a_semaphore_starts_latency_after_its_dependency() -> None:
    k = Kit()
    a = _activate(k)
    k.dma(k.hbm("o", (128, 512), kind="output"), k.sbuf("y2", 128, 512), deps=(a,))
    d = k.run(numerics=False).profile.dma.to_pylist()[0]
    assert d["ts"] == round(512 * SCALAR_NS + 1300)


NO_GAP = replace(get_preset("trn1"), dma_issue_gap_ns=0.0)  # pool-sharing tests: triggers not spaced


def _sixteen_loads(k: Kit) -> None:
    for q in range(16):
        h = k.hbm(f"x{q}", (128, 512))
        k.dma(k.sbuf(f"t{q}", 128, 512), h, queue=q, deps=())


def test_sixteen_concurrent_transfers_share_the_dma_engines() -> None:
    k = Kit()
    _sixteen_loads(k)  # each would use all 16 engines alone
    alone = (128 * 512 * 4 + 128 * 256) / (16 * 17.0)
    for d in k.run(numerics=False, preset=NO_GAP).profile.dma.to_pylist():
        assert d["ts"] == 1300
        assert d["duration"] == round(1300 + 16 * alone) - 1300 == 17348  # all end when the pool is done


def test_hbm_bandwidth_caps_the_pool() -> None:
    k = Kit()
    _sixteen_loads(k)
    narrow = replace(NO_GAP, hbm_bandwidth=8 * 17e9)  # HBM feeds only 8 engines' worth
    res = k.run(numerics=False, preset=narrow)
    alone = (128 * 512 * 4 + 128 * 256) / (8 * 17.0)  # even alone a transfer is HBM-bound
    for d in res.profile.dma.to_pylist():
        assert d["ts"] == 1300
        assert d["duration"] == round(1300 + 16 * alone) - 1300
    one = Kit()
    one.dma(one.sbuf("t", 128, 512), one.hbm("x", (128, 512)))
    assert one.run(numerics=False, preset=narrow).profile.dma.to_pylist()[0]["duration"] == round(1300 + alone) - 1300


def test_sharing_ends_when_the_other_transfer_finishes() -> None:
    k = Kit()
    k.dma(k.sbuf("a", 128, 512), k.hbm("x", (128, 512)), queue=0, deps=())
    k.dma(k.sbuf("b", 128, 256), k.hbm("y", (128, 256)), queue=1, deps=())  # half the bytes
    ev = k.run(numerics=False, preset=NO_GAP).profile.dma.to_pylist()
    t_a = (128 * 2048 + 128 * 256) / 272.0  # alone, on all 16 engines
    t_b = (128 * 1024 + 128 * 256) / 272.0
    # Both ask for the whole pool, so both run at half speed until b is done, then a runs alone.
    assert ev[1]["duration"] == round(1300 + 2 * t_b) - 1300
    assert ev[0]["duration"] == round(1300 + t_a + t_b) - 1300


def test_transfers_on_one_queue_run_in_order() -> None:
    k = Kit()
    k.dma(k.sbuf("a", 128, 2048), k.hbm("x", (128, 2048)), queue=2, deps=())
    k.dma(k.sbuf("b", 128, 2048), k.hbm("y", (128, 2048)), queue=2, deps=())
    k.dma(k.sbuf("c", 4, 64), k.hbm("z", (4, 64)), queue=2, deps=())
    ev = k.run(numerics=False, preset=NO_GAP).profile.dma.to_pylist()
    alone = (128 * 8192 + 128 * 256) / 272.0  # 3975 ns
    small = (4 * 256 + 4 * 256) / 17.0  # 4 partitions: one engine
    # The second transfer waits for the first to end (its descriptor stage, 1300 ns, overlapped the first).
    assert [e["ts"] for e in ev] == [1300, round(1300 + alone), round(1300 + 2 * alone)]
    assert ev[2]["duration"] == round(1300 + 2 * alone + small) - round(1300 + 2 * alone)
    # A short transfer is held by the descriptor stage: one per 1300 ns on a queue.
    k2 = Kit()
    for q in range(3):
        k2.dma(k2.sbuf(f"s{q}", 4, 64), k2.hbm(f"x{q}", (4, 64)), queue=0, deps=())
    assert [e["ts"] for e in k2.run(numerics=False, preset=NO_GAP).profile.dma.to_pylist()] == [1300, 2600, 3900]


def test_the_trigger_gap_spaces_consecutive_dmas_of_any_queue() -> None:
    """FITTED dma_issue_gap_ns: consecutive DMA triggers of the program are at least the gap apart."""
    k = Kit()
    for q in range(3):
        k.dma(k.sbuf(f"a{q}", 4, 64), k.hbm(f"x{q}", (4, 64)), queue=q, deps=())
    spaced = replace(get_preset("trn1"), dma_issue_gap_ns=700.0)
    assert [d["ts"] for d in k.run(numerics=False, preset=spaced).profile.dma.to_pylist()] == [1300, 2000, 2700]
    assert [d["ts"] for d in k.run(numerics=False, preset=NO_GAP).profile.dma.to_pylist()] == [1300, 1300, 1300]


def test_a_psum_zero_fill_before_an_accumulation_group_costs_nothing() -> None:
    """nl.zeros in PSUM then matmuls accumulating into it: the first matmul overwrites (no VectorE memset)."""
    k = Kit()
    w, x = k.sbuf("w", 128, 128, "bfloat16"), k.sbuf("x", 128, 512, "bfloat16")
    acc = k.psum("acc", 128, 512)
    k.emit(Engine.VECTOR, Opcode.TENSOR_COPY, (k.sbuf("busy", 128, 2048),), (k.sbuf("src", 128, 2048),), deps=())
    z = k.emit(Engine.VECTOR, Opcode.MEMSET, (acc,), deps=(), value=0.0)
    mm = k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (w, x), deps=(z,), accumulate=True)
    ev = rows(k.run(numerics=False))
    assert ev[z]["duration"] == 0 and ev[z]["ts"] == 0  # not queued behind the 2048-element copy
    assert ev[mm]["ts"] == round(60 / 2.8)  # only TensorE's own access latency
    k2 = Kit()  # a zero-fill something else reads first is a real memset
    acc2 = k2.psum("acc", 128, 512)
    z2 = k2.emit(Engine.VECTOR, Opcode.MEMSET, (acc2,), deps=(), value=0.0)
    k2.emit(Engine.VECTOR, Opcode.TENSOR_COPY, (k2.sbuf("o", 128, 512),), (acc2,), deps=(z2,))
    assert rows(k2.run(numerics=False))[z2]["duration"] == round(512 / 1.12)


def test_ldweights_overlaps_the_previous_matmul() -> None:
    k = Kit()
    w0, w1 = k.sbuf("w0", 128, 128, "bfloat16"), k.sbuf("w1", 128, 128, "bfloat16")
    x = k.sbuf("x", 128, 512, "bfloat16")
    acc = k.psum("acc", 128, 512)
    l0 = k.emit(Engine.TENSOR, Opcode.LDWEIGHTS, ins=(w0,), deps=())
    m0 = k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (w0, x), deps=(l0,), accumulate=False)
    l1 = k.emit(Engine.TENSOR, Opcode.LDWEIGHTS, ins=(w1,), deps=())
    k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (w1, x), deps=(l1, m0), accumulate=True)
    ev = rows(k.run(numerics=False))
    ld = 32 * TENSOR_NS  # fast weight load: 128 rows / 4
    mm = 512 * TENSOR_NS  # max(min(64, 128), 512) cycles
    assert (ev[0]["track"], ev[1]["track"]) == ("tensor.stationary", "tensor.moving")
    assert ev[0]["duration"] == round(ld)
    assert ev[1]["ts"] == round(ld)  # TensorE-to-TensorE dependencies pay no semaphore latency
    assert ev[2]["ts"] == ev[1]["ts"]  # loads the next weights while MATMUL 0 runs
    assert ev[2]["ts"] + ev[2]["duration"] < ev[1]["ts"] + ev[1]["duration"]
    assert ev[3]["ts"] == round(ld + mm)  # MATMUL 1 follows MATMUL 0 back to back
    assert ev[3]["wait_ns"] == 0


def test_matmul_waits_for_its_weights_when_the_load_is_late() -> None:
    k = Kit()
    w, x = k.sbuf("w", 128, 128, "bfloat16"), k.sbuf("x", 128, 64, "bfloat16")
    acc = k.psum("acc", 128, 64)
    k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (w, x), deps=())
    a = _activate(k, n=4096)  # ScalarE produces the next weights late
    k.emit(Engine.TENSOR, Opcode.LDWEIGHTS, ins=(w,), deps=(a,))
    k.emit(Engine.TENSOR, Opcode.MATMUL, (acc,), (w, x), deps=(2,))
    ev = rows(k.run(numerics=False))
    ld_start = 4096 * SCALAR_NS + 60 * TENSOR_NS
    assert ev[2]["ts"] == round(ld_start)
    assert ev[3]["ts"] == round(ld_start + 32 * TENSOR_NS)
    assert ev[3]["wait_ns"] == round(ld_start + 32 * TENSOR_NS - 64 * TENSOR_NS)


def test_fp32_matmul_is_four_times_slower_and_transpose_cost() -> None:
    k = Kit()
    w, x = k.sbuf("w", 128, 128), k.sbuf("x", 128, 512)
    k.emit(Engine.TENSOR, Opcode.MATMUL, (k.psum("acc", 128, 512),), (w, x), deps=())
    k.emit(Engine.TENSOR, Opcode.TRANSPOSE, (k.psum("t", 48, 32),), (k.sbuf("s", 32, 48),), deps=())
    ev = rows(k.run(numerics=False))
    assert ev[0]["duration"] == round(4 * 512 * TENSOR_NS)
    end0 = 4 * 512 * TENSOR_NS
    assert ev[1]["ts"] == round(end0)
    assert ev[1]["duration"] == round(end0 + 48 * TENSOR_NS) - round(end0)  # max(P=32, min(64, F=48))
    assert ev[1]["is_transpose"] and ev[1]["hw_flops"] == 2 * 128 * 48 * 32 and ev[1]["flops"] == 0


def test_trn2_clocks() -> None:
    k = Kit(preset="trn2")
    _activate(k)
    assert rows(k.run(numerics=False))[0]["duration"] == round(512 / 1.2)  # ScalarE 1.2 GHz
    assert k.run(numerics=False, preset="trn1").profile.info.preset == "trn1"


def test_timing_is_deterministic_and_independent_of_numerics() -> None:
    k = Kit()
    x = k.load("x", np.ones((128, 512), np.float32))
    y = k.sbuf("y", 128, 512)
    k.emit(Engine.SCALAR, Opcode.ACTIVATE, (y,), (x,), func="exp")
    k.store("out", y)
    a, b, c = k.run(), k.run(), k.run(numerics=False)
    assert a.profile.instructions.equals(b.profile.instructions)
    assert a.profile.dma.equals(c.profile.dma)
    assert a.latencies_ns == c.latencies_ns
    assert c.outputs == {}


def test_the_compiler_moves_an_independent_instruction_ahead_within_its_window() -> None:
    """VectorE: a copy waiting for a load does not hold back the independent copy behind it (nl.no_reorder
    documents that the scheduler reorders independent operations); window 1 keeps program order."""
    k = Kit()
    load = k.dma(k.sbuf("x", 128, 512), k.hbm("h", (128, 512)), deps=())
    first = k.emit(Engine.VECTOR, Opcode.TENSOR_COPY, (k.sbuf("y", 128, 512),), (k.sbuf("x", 128, 512),), deps=(load,))
    second = k.emit(Engine.VECTOR, Opcode.TENSOR_COPY, (k.sbuf("b", 128, 512),), (k.sbuf("a", 128, 512),), deps=())
    ev = rows(k.run(numerics=False, preset=replace(get_preset("trn1"), sched_window=8)))
    copy = round(512 / 1.12)  # max(MIN_II, N) cycles at 1.12 GHz
    assert ev[second]["ts"] == 0 and ev[second]["duration"] == copy
    assert ev[first]["ts"] > ev[load]["ts"]
    strict = rows(k.run(numerics=False))  # the preset keeps program order (sched_window 1, ASSUMED)
    assert strict[second]["ts"] == strict[first]["ts"] + strict[first]["duration"]


def test_the_launch_cost_delays_everything() -> None:
    k = Kit()
    k.dma(k.sbuf("x", 4, 64), k.hbm("h", (4, 64)), deps=())
    k.emit(Engine.VECTOR, Opcode.MEMSET, (k.sbuf("y", 128, 64),), deps=(), value=1.0)
    base = k.run(numerics=False)
    late = k.run(numerics=False, preset=replace(get_preset("trn1"), launch_ns=5000.0))
    assert late.latencies_ns[0] == base.latencies_ns[0] + 5000
    assert [r["ts"] for r in late.profile.instructions.to_pylist()] == [5000]
    assert [r["ts"] for r in late.profile.dma.to_pylist()] == [6300]
