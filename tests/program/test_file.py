"""Program file round trip and refusals."""

from __future__ import annotations

import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.container import write_container
from nprof.errors import FormatError, NprofError
from nprof.profile import Profile, ProfileInfo
from nprof.program.file import FORMAT, load_program, save_program
from nprof.program.model import Program, TensorDecl


def sample() -> Program:
    h = Access(Space.HBM, "x", "bfloat16", 0, 4, ((1, 8),), 0, 8)
    s = Access(Space.SBUF, "t", "bfloat16", 64, 4, ((16, 2), (1, 4)), 2)
    p = Access(Space.PSUM, "acc", "float32", 0, 4, ((1, 8),))
    w = Access(Space.HBM, "w", "float8_e4m3", 0, 4, ((1, 4),), 0, 4)
    instrs = (
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (s,), (h,), attrs(reload=True), queue=5, source="k.py:3"),
        Instruction(
            Engine.GPSIMD,
            Opcode.AFFINE_SELECT,
            (s,),
            (s,),
            attrs(steps=(1, -1), cmp="ge", fill=-1e30, offset=0, channel_multiplier=2),
            deps=(0,),
            layer="model.fc1",
            hlo_name="%add = add(x, y)",
        ),
        Instruction(Engine.TENSOR, Opcode.MATMUL, (p,), (s, s), attrs(accumulate=False), deps=(0, 1)),
        Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, (w,), (w,), queue=0),
    )
    tensors = (
        TensorDecl("x", (4, 8), "bfloat16", "input"),
        TensorDecl("w", (4, 4), "float8_e4m3", "weight"),
        TensorDecl("out", (4, 8), "float32", "output"),
    )
    consts = {"w": np.arange(16, dtype=np.float32).reshape(4, 4).astype(ml_dtypes.float8_e4m3fn)}
    return Program("k", "trn2", tensors, instrs, consts, 4096, 2048, {"source": "k.py"})


def test_round_trip(tmp_path: Path) -> None:
    prog = sample()
    path = save_program(prog, tmp_path / "k.neff")
    back = load_program(path)
    assert back.instructions == prog.instructions
    assert back.tensors == prog.tensors
    assert (back.name, back.preset, back.sbuf_bytes, back.psum_bytes, dict(back.meta)) == (
        "k", "trn2", 4096, 2048, {"source": "k.py"},
    )  # fmt: skip
    assert back.constants["w"].dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(back.constants["w"].view(np.uint8), prog.constants["w"].view(np.uint8))
    assert back.instructions[1].attr("steps") == (1, -1)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temp file


def test_tables_are_plain_parquet(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = save_program(sample(), tmp_path / "k.neff")
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        assert {"manifest.json", "instructions.parquet", "tensors.parquet", "constants.parquet"} <= names
        zf.extract("instructions.parquet", tmp_path)
    t = pq.read_table(tmp_path / "instructions.parquet")
    assert t.column("opcode").to_pylist() == ["DMA_DIRECT2D", "AFFINE_SELECT", "MATMUL", "DMA_DIRECT2D"]
    assert t.column("ins").to_pylist()[0][0]["tensor"] == "x"


def test_refuses_a_profile(tmp_path: Path) -> None:
    path = Profile.build(ProfileInfo(device="virtual-neuroncore")).save(tmp_path / "p.ntff")
    with pytest.raises(FormatError, match=r"this is an nprof profile, not a program; pass it with -s"):
        load_program(path)


def test_refuses_a_real_neff(tmp_path: Path) -> None:
    path = tmp_path / "model.neff"
    path.write_bytes(b"NEFF\x00\x01" + bytes(200))
    with pytest.raises(FormatError, match=r"real AWS NEFF.*nprof runs its own programs"):
        load_program(path)


def test_refuses_other_formats_newer_schema_truncation_and_junk(tmp_path: Path) -> None:
    other = write_container(tmp_path / "o.neff", "something-else", 1, {}, {})
    with pytest.raises(FormatError, match=r"not an nprof program file"):
        load_program(other)
    newer = write_container(tmp_path / "n.neff", FORMAT, 99, {}, {})
    with pytest.raises(FormatError, match=r"schema version 99 is newer.*upgrade nprof"):
        load_program(newer)
    good = save_program(sample(), tmp_path / "g.neff").read_bytes()
    cut = tmp_path / "cut.neff"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(FormatError, match=r"truncated|corrupt"):
        load_program(cut)
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello")
    with pytest.raises(FormatError, match=r"not an nprof program file"):
        load_program(junk)
    with pytest.raises(NprofError, match=r"no such file"):
        load_program(tmp_path / "missing.neff")


def test_refuses_an_invalid_program(tmp_path: Path) -> None:
    prog = sample()
    bad = Program(prog.name, prog.preset, prog.tensors, (*prog.instructions[:2], Instruction(
        Engine.VECTOR, Opcode.MEMSET, (prog.instructions[0].outs[0],), (), deps=(7,))))  # fmt: skip
    path = save_program(bad, tmp_path / "bad.neff")
    with pytest.raises(FormatError, match=r"instruction 2 depends on 7, not an earlier one"):
        load_program(path)
    oob = Access(Space.HBM, "x", "bfloat16", 30, 4, ((1, 8),), 0, 8)
    bad2 = Program(prog.name, prog.preset, prog.tensors, (Instruction(
        Engine.DMA, Opcode.DMA_DIRECT2D, (prog.instructions[0].outs[0],), (oob,), queue=0),))  # fmt: skip
    with pytest.raises(FormatError, match=r"out of bounds"):
        load_program(save_program(bad2, tmp_path / "oob.neff"))


def _copy_program(src: Access) -> Program:
    """One DMA of `src` (from the sample's 32-element tensor 'x') into the sample's SBUF tile."""
    prog = sample()
    return Program(prog.name, prog.preset, prog.tensors, (Instruction(
        Engine.DMA, Opcode.DMA_DIRECT2D, (prog.instructions[0].outs[0],), (src,), queue=0),))  # fmt: skip


def test_negative_strides_round_trip_and_are_bounded_on_both_sides(tmp_path: Path) -> None:
    """A copy read in reverse (a flip: partitions at a negative stride) is stored and read back; an access whose
    negative stride reaches below element 0 is refused, also when a positive stride lifts its last element."""
    reverse = Access(Space.HBM, "x", "bfloat16", 24, 4, ((1, 8),), 0, -8)  # rows 3, 2, 1, 0 of x [4, 8]
    back = load_program(save_program(_copy_program(reverse), tmp_path / "flip.neff"))
    assert back.instructions[0].ins[0] == reverse
    below = Access(Space.HBM, "x", "bfloat16", 2, 1, ((-1, 5),), 0, 0)  # elements 2, 1, 0, -1, -2
    lifted = Access(Space.HBM, "x", "bfloat16", 0, 2, ((-1, 5),), 0, 10)  # 0..-4 and 10..6
    for bad in (below, lifted):
        with pytest.raises(NprofError, match=r"out of bounds"):
            _copy_program(bad).validate()
        with pytest.raises(FormatError, match=r"out of bounds"):
            load_program(save_program(_copy_program(bad), tmp_path / "bad.neff"))
