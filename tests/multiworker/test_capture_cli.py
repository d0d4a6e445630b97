"""`nprof capture -n PROGRAM -r N [--collectives-*] [-m FILE] -s DIR` end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nprof.capture.multiworker import capture_workers
from nprof.cli import main
from nprof.errors import NprofError
from nprof.profile import Profile
from nprof.program.file import save_program
from tests.multiworker.kit import collective_program

SHAPE = (8, 16)


@pytest.fixture
def program_file(tmp_path: Path) -> Path:
    return save_program(collective_program("all_reduce", SHAPE, SHAPE, name="arprog"), tmp_path / "ar.neff")


def test_capture_all_workers(tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "output"
    assert main(["capture", "-n", str(program_file), "-r", "4", "-s", str(out / "profile.ntff")]) == 0
    cap = capsys.readouterr()
    assert sorted(p.name for p in out.iterdir()) == [f"profile_rank_{r}.ntff" for r in range(4)]
    assert "on 4 virtual trn1 NeuronCores (1 node x 4 workers)" in cap.out and "1 collective operations" in cap.out
    assert (
        cap.err
        == "nprof capture: warning: ranks 0..3: no inputs given: running on all-zero inputs; results may be inf/NaN\n"
    )
    p = Profile.load(out / "profile_rank_3.ntff")
    assert (p.info.rank, p.info.world_size, p.info.nd_idx, p.info.nc_idx) == (3, 4, 1, 1)
    assert p.info.program == str(program_file.resolve())
    assert p.collectives.column("rank").to_pylist() == [3]
    assert "cc" in p.instructions.column("engine").to_pylist()


def test_profile_one_worker(tmp_path: Path, program_file: Path) -> None:
    argv = ["capture", "-n", str(program_file), "-r", "4", "--collectives-profile-id", "2", "-s", str(tmp_path)]
    assert main([*argv, "--timing-only"]) == 0
    assert [p.name for p in tmp_path.glob("*.ntff")] == ["profile_rank_2.ntff"]


def test_multi_node_files_line_up(tmp_path: Path, program_file: Path) -> None:
    """Two commands (one per node) write the same profiles as one 4-rank run would, with EFA between nodes."""
    for start in (0, 2):
        argv = ["capture", "-n", str(program_file), "-r", "2", "--collectives-worker-count", "4",
                "--collectives-worker-start-id", str(start), "-s", str(tmp_path / f"node{start // 2}")]  # fmt: skip
        assert main([*argv, "--timing-only"]) == 0
    assert sorted(p.name for p in (tmp_path / "node0").iterdir()) == ["profile_rank_0.ntff", "profile_rank_1.ntff"]
    assert sorted(p.name for p in (tmp_path / "node1").iterdir()) == ["profile_rank_2.ntff", "profile_rank_3.ntff"]
    rows = [
        Profile.load(tmp_path / f"node{r // 2}" / f"profile_rank_{r}.ntff").collectives.to_pylist()[0] for r in range(4)
    ]
    assert {r["ts"] + r["duration"] for r in rows} == {rows[0]["ts"] + rows[0]["duration"]}
    assert {r["algorithm"] for r in rows} == {"ring/efa"}
    assert Profile.load(tmp_path / "node1" / "profile_rank_2.ntff").info.meta["node"] == "1"


def test_multi_input_file(tmp_path: Path, program_file: Path) -> None:
    for r in range(3):
        np.save(tmp_path / f"x{r}.npy", np.full(SHAPE, r + 1, np.float32))
    (tmp_path / "inputs.txt").write_text("# rank name file\n0 x x0.npy\n1 x x1.npy\n\n2 x x2.npy\n")
    paths, job = capture_workers(
        program_file, tmp_path / "out", workers_per_node=3, rank_inputs={0: {}, **_parse(tmp_path / "inputs.txt")}
    )
    assert len(paths) == 3
    np.testing.assert_array_equal(job.results[1].outputs["out"], np.full(SHAPE, 6.0))
    assert main(["capture", "-n", str(program_file), "-r", "3", "-m", str(tmp_path / "inputs.txt"),
                 "-s", str(tmp_path / "cli")]) == 0  # fmt: skip


def _parse(path: Path) -> dict:
    from nprof.capture.multiworker import parse_multi_input

    return parse_multi_input(path)


@pytest.mark.parametrize(
    "extra,message",
    [
        (["-r", "2", "--collectives-profile-id", "5"], "--collectives-profile-id 5 is not on this node"),
        (["-r", "2", "--collectives-profile-id", "x"], "must be `all` or a rank"),
        (["-r", "2", "--collectives-worker-count", "3", "--collectives-worker-start-id", "2"], "do not fit a 3-worker"),
        (["--collectives-worker-count", "4"], "needs -r/--collectives-workers-per-node"),
        (["-r", "2", "-m", "/nonexistent/m.txt"], "no such file"),
    ],
)
def test_user_mistakes_are_one_line(
    tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    assert main(["capture", "-n", str(program_file), "-s", str(tmp_path / "o"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nprof capture: ") and message in err and err.count("\n") == 1


def test_bad_multi_input_line(tmp_path: Path, program_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.txt").write_text("0 x\n")
    assert main(["capture", "-n", str(program_file), "-r", "2", "-m", str(tmp_path / "m.txt")]) == 2
    assert "m.txt:1: expected `RANK NAME FILE.npy`" in capsys.readouterr().err


def _traced(program, world: int, group: tuple[int, ...] | None = None):
    """`program` with its collectives marked as traced on a `world`-rank process group (as the compiler does)."""
    from dataclasses import replace

    from nprof.arch.isa import COLLECTIVES

    def mark(ins):
        if ins.opcode not in COLLECTIVES:
            return ins
        attrs = {k: v for k, v in ins.attrs if k != "group"}
        attrs["traced_world"] = world
        if group:
            attrs["group"] = group
        return replace(ins, attrs=tuple(sorted(attrs.items())))

    return replace(program, instructions=tuple(mark(i) for i in program.instructions))


def test_a_graph_traced_for_two_workers_captured_as_32_says_how_it_scaled(tmp_path: Path, capsys) -> None:
    from nprof.arch.presets import get_preset
    from nprof.capture.multiworker import scaling_note
    from nprof.device.collectives import Topology, ring_time_ns
    program = _traced(collective_program("all_reduce", SHAPE, SHAPE), 2)
    assert scaling_note(program, 2, 2) is None
    note = scaling_note(program, 32, 32)
    ins = next(i for i in program.instructions if i.opcode.value == "ALL_REDUCE")
    was, now = (ring_time_ns(ins.opcode, ins.ins[0].nbytes, tuple(range(n)), Topology(n, n), get_preset("trn1"))
                for n in (2, 32))  # fmt: skip
    assert "traced for 2 workers and runs here on 32" in note
    assert f"from {was / 1000:.3f} us on 2 to {now / 1000:.3f} us on 32" in note
    path = save_program(program, tmp_path / "model.neff")
    assert main(["capture", "-n", str(path), "-r", "32", "--timing-only", "-s", str(tmp_path / "out")]) == 0
    assert note in capsys.readouterr().out
    assert Profile.load(tmp_path / "out" / "profile_rank_31.ntff").info.meta["scaling"] == note
    gather = _traced(collective_program("all_gather", SHAPE, (2 * SHAPE[0], SHAPE[1])), 2, group=(0, 1))
    with pytest.raises(NprofError, match="traced for a group of 2 workers, which fixes its output shape"):
        scaling_note(gather, 32, 32)
