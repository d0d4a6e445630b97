"""Hypothesis mutation fuzzing of every reader: only NprofError may escape (bounded, deterministic).

The long run is bench/fuzz.py; the mutators live in tests/fuzz_kit.py.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import fuzz_kit as fk
from tests.conftest import tiny_profile

FUZZ = settings(
    max_examples=25, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


def _check(outcome: str) -> None:
    assert not outcome.startswith("crash"), outcome


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(seed=SEEDS, n=st.integers(1, 4))
def test_chrome_trace_reader(workdir: Path, seed: int, n: int) -> None:
    rng = random.Random(seed)
    path = workdir / "t.json"
    path.write_bytes(fk.dumps(fk.mutate_json(rng, rng.choice(fk.chrome_seeds()), n)))
    _check(fk.run_case(fk.read_trace_and_analyse, path))


@FUZZ
@given(seed=SEEDS)
def test_profile_reader(workdir: Path, seed: int) -> None:
    p = tiny_profile()
    path = workdir / "p.ntff"
    tables = {n: p.table(n) for n in ("instructions", "dma", "collectives", "counters")}
    fk.mutate_container(random.Random(seed), "nprof-profile", 1, p.info.to_json(), tables, path)
    _check(fk.run_case(fk.read_profile_and_analyse, path))


@FUZZ
@given(seed=SEEDS)
def test_program_reader(workdir: Path, seed: int) -> None:
    from nprof.container import open_container
    from nprof.program.file import save_program
    from tests.program.test_file import sample

    base = save_program(sample(), workdir / "base.neff")
    box = open_container(base, "nprof-program", 1, "program")
    tables = {n: box.read_table(n) for n in box.table_names}
    manifest = dict(box.manifest)
    box.close()
    path = workdir / "p.neff"
    fk.mutate_container(random.Random(seed), "nprof-program", 1, manifest, tables, path)
    _check(fk.run_case(fk.read_program, path))


@FUZZ
@given(seed=SEEDS)
def test_npy_reader(workdir: Path, seed: int) -> None:
    path = workdir / "x.npy"
    path.write_bytes(fk.mutate_npy(random.Random(seed), np.arange(12, dtype=np.float32).reshape(3, 4)))
    _check(fk.run_case(fk.read_npy, path))
