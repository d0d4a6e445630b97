"""`device.cores`: a program with NeuronCore-v4 MX instructions is refused by the simulator itself on an earlier
core (library users get the same one-line refusal as `nprof capture`), and runs on trn3."""

from __future__ import annotations

import numpy as np
import pytest

import nprof.nki.language as nl
from nprof.device import simulate
from nprof.device.cores import uses_mx
from nprof.device.workers import simulate_workers
from nprof.errors import NprofError
from nprof.nki.kernel import Kernel
from tests.nki.helpers import quantize_scales


def _copy(src):  # type: ignore[no-untyped-def]
    t = nl.load(src)
    out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=t)
    return out


def test_mx_program_is_refused_on_earlier_cores_by_simulate() -> None:
    x = np.ones((32, 16), np.float32)
    program = Kernel(quantize_scales, preset="trn3").trace(x).program
    assert uses_mx(program)
    for preset in ("trn1", "trn2"):
        with pytest.raises(NprofError, match=r"uses NeuronCore-v4 MX instructions.*--device-preset trn3"):
            simulate(program, preset=preset, numerics=False)
        with pytest.raises(NprofError, match="MX instructions"):
            simulate_workers(program, world_size=2, preset=preset)
    assert simulate(program, numerics=False).profile is not None  # the program's own trn3


def test_plain_program_runs_everywhere() -> None:
    program = Kernel(_copy).trace(np.ones((4, 8), np.float32)).program
    assert not uses_mx(program)
    for preset in ("trn1", "trn2", "trn3"):
        simulate(program, preset=preset, numerics=False)


def test_a_program_read_from_a_file_gives_the_same_answer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Read back from a file the scan uses the attached instruction table; traced, the Instructions."""
    from nprof.program.file import load_program, save_program

    mx = Kernel(quantize_scales, preset="trn3").trace(np.ones((32, 16), np.float32)).program
    plain = Kernel(_copy).trace(np.ones((4, 8), np.float32)).program
    for program, expected in ((mx, True), (plain, False)):
        loaded = load_program(save_program(program, tmp_path / f"{expected}.neff"))
        assert uses_mx(loaded) is expected
