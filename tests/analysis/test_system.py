"""The system-profile pass and findings on a hand-built system profile, every number worked out by hand."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from nprof.analysis import run_all
from nprof.analysis.findings import findings
from nprof.analysis.system import system_findings, system_steps
from nprof.analysis.thresholds import Thresholds
from nprof.profile import Profile, ProfileInfo
from nprof.profile.model import make_table

FW, BW = "MODULE_a", "MODULE_b"


def _ins(i: int, ts: int, dur: int, track: str, opcode: str, step: int, layer=None, hlo=None, operands=None) -> dict:
    return {"id": i, "ts": ts, "duration": dur, "engine": "other", "track": track, "opcode": opcode,
            "iteration": step, "layer": layer, "hlo_name": hlo, "operands": operands}  # fmt: skip


def _copy(i: int, ts: int, queue: str, direction: str, nbytes: int, mod: str, step: int) -> dict:
    return {"id": i, "ts": ts, "duration": 10, "queue": queue, "direction": direction, "bytes": nbytes,
            "tensor": mod, "iteration": step}  # fmt: skip


def _system_profile(recompile: bool = False) -> Profile:
    """Two steps. Step 0: dynamo tracing 0-100, compile of FW 100-150, then per step s (base b = 1000 s):
    torch op b+0..b+40, h2d FW b+40..b+50, launch FW b+50..b+80 (device 20), d2h b+80..b+90,
    torch op b+90..b+130 (loss), h2d BW b+130..b+140, launch BW b+140..b+160 (device 30), d2h b+160..b+170,
    torch op b+200..b+230 (optimizer)."""
    rows = [_ins(0, 0, 100, "cpu:1", "aten::empty", 0, hlo="dynamo > compile"),
            _ins(1, 100, 50, "nprof.compile", "nprof::compile", 0, layer=FW)]  # fmt: skip
    dma, n = [], 2
    for s in (0, 1):
        b = 1000 * (s + 1)
        rows += [_ins(n, b, 40, "cpu:1", "aten::mm", s), _ins(n + 1, b + 90, 40, "cpu:1", "aten::sum", s),
                 _ins(n + 2, b + 200, 30, "cpu:1", "aten::add_", s)]  # fmt: skip
        for k, (mod, at, dev) in enumerate(((FW, b + 50, 20), (BW, b + 140, 30))):
            graph = f"{mod}_{'fw' if k == 0 else 'bw'}"
            rows += [_ins(n + 3 + 2 * k, at, 30 if k == 0 else 20, "nprof.launch", "nprof::launch", s, mod,
                          f"{mod}#{s}", graph),
                     _ins(n + 4 + 2 * k, at, dev, "nc:0", "nc_exec_running", s, mod, f"{mod}#{s}",
                          graph + ": x")]  # fmt: skip
            dma += [
                _copy(100 + len(dma), at - 10, "h2d:nc0", "host->device", 4096, mod, s),
                _copy(101 + len(dma), at + (30 if k == 0 else 20), "d2h:nc0", "device->host", 512, mod, s),
            ]
        n += 7
    if recompile:
        rows.append(_ins(50, 1250, 5, "nprof.compile", "nprof::compile", 0 + 1, layer=BW))
    info = ProfileInfo(device="cpu", name="sys", meta={"system": "1"})
    return Profile.build(info, instructions={k: [r[k] for r in rows] for k in rows[0]},
                         dma={k: [r[k] for r in dma] for k in dma[0]})  # fmt: skip


def test_steps_break_down_by_hand() -> None:
    steps = system_steps(_system_profile()).to_pylist()
    assert [s["step"] for s in steps] == [0, 1]
    s0, s1 = steps
    assert (s0["start"], s0["end"]) == (0, 1230) and (s1["start"], s1["end"]) == (2000, 2230)
    assert s0["forward_device_ns"] == 20 and s0["backward_device_ns"] == 30 and s0["device_busy_ns"] == 50
    assert s0["compile_ns"] == 150 and s1["compile_ns"] == 0  # dynamo tracing 100 + lowering 50
    assert s1["launch_ns"] == 50 and s1["copy_ns"] == 40 and s1["copy_bytes"] == 2 * (4096 + 512)
    assert s1["host_ops_ns"] == 110
    # covered in step 1: ops 40+40+30, copies 40, launches 50 -> 200 of the 230 wall
    assert s1["host_gap_ns"] == 30


def test_optimizer_and_collective_phases_overlap_the_parts() -> None:
    """Step 1 plus an optimizer annotation over its last torch op (2195..2235, nested zero_grad 2200..2210)
    and two host collectives: gloo 2100..2120 (waited 5) and nprof's exchange 2110..2150 (waited 30)."""
    p = _system_profile()
    extra = [_ins(60, 2195, 40, "cpu:1", "Optimizer.step#SGD.step", 1), _ins(61, 2200, 10, "cpu:1",
             "Optimizer.zero_grad#SGD.zero_grad", 1), _ins(62, 2100, 20, "cc:gloo", "gloo:all_reduce", 1),
             _ins(63, 2110, 40, "nprof.exchange", "nprof::exchange", 1)]  # fmt: skip
    for r, w in zip(extra, (0, 0, 5, 30), strict=True):
        r["wait_ns"] = w
    added = make_table("instructions", {k: [r[k] for r in extra] for k in extra[0]})
    p = replace(p, instructions=pa.concat_tables([p.instructions, added]))
    s0, s1 = system_steps(p).to_pylist()
    assert (s1["optimizer_ns"], s1["collectives_ns"], s1["collective_wait_ns"]) == (40, 50, 35)
    assert (s0["optimizer_ns"], s0["collectives_ns"], s0["collective_wait_ns"]) == (0, 0, 0)


def test_findings_host_bound_gaps_copies() -> None:
    kinds = {f["kind"]: f for f in system_findings(_system_profile())}
    assert set(kinds) == {"host_bound", "launch_gap", "repeated_copies"}
    assert "2 of 2 steps are host-bound" in kinds["host_bound"]["message"]
    gap = kinds["launch_gap"]  # gaps: FW#0 end 1080 -> BW#0 1140 (60), BW#0 end 1160 -> FW#1 2050 (890), 60 again
    assert gap["impact_ns"] == 890 and gap["ts"] == 1160 and gap["end"] == 2050
    assert "3 such gaps total 1.01 us" in gap["message"]
    copies = [f for f in system_findings(_system_profile()) if f["kind"] == "repeated_copies"]
    assert len(copies) == 2 and "4.0 KiB host->device on each of its 2 calls" in copies[0]["message"]


def test_host_bound_follows_its_threshold() -> None:
    p = _system_profile()  # a step whose host work exceeds 1.5 times the device's busy time
    assert "host_bound" in {f["kind"] for f in system_findings(p, thresholds=Thresholds(host_bound_ratio=1.5))}
    assert "host_bound" not in {f["kind"] for f in system_findings(p, thresholds=Thresholds(host_bound_ratio=1000))}


def test_recompile_after_the_first_step_is_a_warning() -> None:
    rows = {f["kind"]: f for f in system_findings(_system_profile(recompile=True))}
    assert rows["recompile"]["severity"] == "warning" and "MODULE_b (step 1)" in rows["recompile"]["message"]


def test_system_findings_reach_the_findings_table_and_run_all() -> None:
    profile = _system_profile()
    assert {"host_bound", "launch_gap", "repeated_copies"} <= set(findings(profile)["kind"].to_pylist())
    assert run_all(profile)["system_steps"].num_rows == 2


def test_other_profiles_get_nothing() -> None:
    plain = Profile.build(ProfileInfo(device="cpu"), instructions=None)
    assert system_steps(plain).num_rows == 0 and system_findings(plain) == []
