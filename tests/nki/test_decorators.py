"""nki.jit / simulate_kernel / benchmark / profile: results, the latency table, files written."""

import numpy as np
import pytest

import nprof.nki.language as nl
from nprof import nki
from nprof.errors import NprofError
from nprof.nki.decorators import COLUMNS
from nprof.nki.typing import tensor
from nprof.profile import Profile
from nprof.program.file import load_program


def exp_kernel(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.exp(nl.load(x)))
    return out


def test_jit_returns_numpy_and_caches_programs():
    k = nki.jit(exp_kernel)
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_allclose(k(x), np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(k(x + 1), np.exp(x + 1), rtol=1e-6)
    assert len(k._cache) == 1
    k(np.zeros((4, 8), np.float32))
    assert len(k._cache) == 2
    assert k.__name__ == "exp_kernel"


def test_jit_with_parentheses_and_tuple_outputs():
    @nki.jit()
    def two(x, scale):
        a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        nl.store(a, value=t * scale)
        nl.store(b, value=t + scale)
        return a, b

    x = np.ones((4, 4), np.float32)
    a, b = two(x, 3.0)
    np.testing.assert_array_equal(a, 3 * x)
    np.testing.assert_array_equal(b, 4 * x)


def test_simulate_kernel_accepts_float64():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    out = nki.simulate_kernel(exp_kernel, x)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_benchmark_table_percentiles_and_files(tmp_path, capsys):
    neff, ntff = tmp_path / "k.neff", tmp_path / "k.ntff"
    bench = nki.benchmark(warmup=2, iters=20, save_neff_name=str(neff), save_trace_name=str(ntff))(exp_kernel)
    out = bench(tensor[[128, 512], nl.float32])
    assert out.shape == (128, 512)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == [w for c in COLUMNS for w in c.split()]
    row = printed[1].split()
    assert len(row) == len(COLUMNS) and row[4] == "virtual"
    assert printed[2].startswith("NCL(p): simulated device time (preset trn1, cost model ")
    assert "L(p), INF/S, IRES/S, %USER: N/A" in printed[2]
    assert printed[3] == f"Profile results are written to {ntff}"

    result = bench.benchmark_result
    nc = [result.nc_latency.get_latency_percentile(p) for p in (1, 50, 99)]
    assert nc[0] == nc[1] == nc[2] > 0  # deterministic device
    assert result.e2e_latency is None  # no host measured: nothing invented
    assert float(row[10]) == pytest.approx(nc[0], abs=0.01)
    assert [row[i] for i in (5, 6, 7, 8, 9, 13)] == ["N/A"] * 6

    prog = load_program(neff)
    assert [t.name for t in prog.inputs] == ["x"]
    profile = Profile.load(ntff)
    assert profile.event_count > 0
    with pytest.raises(NprofError):
        result.nc_latency.get_latency_percentile(101)


def test_benchmark_repeated_runs_are_identical(capsys):
    bench = nki.benchmark(warmup=1, iters=5)(exp_kernel)
    bench(tensor[[128, 64], nl.float32])
    first = capsys.readouterr().out
    bench(tensor[[128, 64], nl.float32])
    assert capsys.readouterr().out == first


def test_profile_writes_files_and_refuses_overwrite(tmp_path):
    prof = nki.profile(working_directory=tmp_path / "w", save_neff_name="a.neff", save_trace_name="a.ntff")(exp_kernel)
    x = np.ones((8, 8), np.float32)
    np.testing.assert_allclose(prof(x), np.exp(x), rtol=1e-6)
    assert (tmp_path / "w" / "a.neff").is_file() and (tmp_path / "w" / "a.ntff").is_file()
    with pytest.raises(NprofError, match="already exists"):
        prof(x)
    again = nki.profile(working_directory=tmp_path / "w", save_neff_name="a.neff", save_trace_name="a.ntff",
                        overwrite=True, profile_nth=3)(exp_kernel)  # fmt: skip
    again(x)
    assert Profile.load(tmp_path / "w" / "a.ntff").event_count > 0


def test_profile_needs_working_directory():
    with pytest.raises(NprofError, match="working_directory"):
        nki.profile(exp_kernel)


def test_output_argument_style_kernels_fill_the_callers_array():
    def add_into(a, b, c):
        nl.store(c, value=nl.add(nl.load(a), nl.load(b)))

    a, b = np.ones((4, 4), np.float32), np.full((4, 4), 2.0, np.float32)
    c = np.zeros((4, 4), np.float32)
    assert nki.simulate_kernel(add_into, a, b, c) is None
    np.testing.assert_array_equal(c, a + b)
    c2 = np.zeros((4, 4), np.float32)
    k = nki.jit(add_into)
    k(a, b, c2)
    k(a, b, c2)  # cached program, same copy-back
    np.testing.assert_array_equal(c2, a + b)


def test_read_then_write_of_an_argument_is_rejected():
    def scale_in_place(x):
        nl.store(x, value=nl.multiply(nl.load(x), 2.0))

    with pytest.raises(NprofError, match="in place"):
        nki.simulate_kernel(scale_in_place, np.ones((2, 2), np.float32))


def test_trn2_preset_runs_and_is_recorded(tmp_path, capsys):
    bench = nki.benchmark(warmup=0, iters=2, preset="trn2", save_neff_name=str(tmp_path / "k.neff"))(exp_kernel)
    bench(np.ones((128, 64), np.float32))
    assert load_program(tmp_path / "k.neff").preset == "trn2"
    trn1 = nki.benchmark(warmup=0, iters=2)(exp_kernel)
    trn1(np.ones((128, 64), np.float32))
    capsys.readouterr()
    assert bench.benchmark_result.nc_latency.mean != trn1.benchmark_result.nc_latency.mean
    assert nki.jit(exp_kernel, preset="trn2").trace(np.ones((4, 4), np.float32)).program.preset == "trn2"


def test_profile_with_num_execs_profiles_every_nth_execution(tmp_path):
    """num_execs=5, profile_nth=2: executions 2 and 4 profiled into <stem>_exec_<n>.ntff, each with a JSON
    summary in json_reports/; num_execs below profile_nth profiles profile_nth itself."""
    import json

    from nprof.nki.decorators import profiled_executions, trace_file_name
    from nprof.profile import Profile

    assert profiled_executions(2, 5) == [2, 4] and profiled_executions(10, 3) == [10]
    assert profiled_executions(3, None) == [3]
    assert trace_file_name("p.ntff", 1, 4) == "p.ntff" and trace_file_name("p.ntff", 4, 4) == "p_exec_4.ntff"

    def add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
        return out

    kernel = nki.profile(working_directory=tmp_path, save_trace_name="p.ntff", num_execs=5, profile_nth=2)(add)
    a, b = np.ones((4, 8), np.float32), np.full((4, 8), 2.0, np.float32)
    np.testing.assert_array_equal(kernel(a, b), a + b)
    for n in (2, 4):
        assert Profile.load(tmp_path / f"p_exec_{n}.ntff").info.meta["profiled_execution"] == str(n)
        report = json.loads((tmp_path / "json_reports" / f"p_exec_{n}.json").read_text())
        profile = Profile.load(tmp_path / f"p_exec_{n}.ntff")
        assert report["profiled_execution"] == str(n) and report["total_time_ns"] == profile.total_time_ns > 0
        assert report["instructions"] == profile.instructions.num_rows and report["trace"] == f"p_exec_{n}.ntff"
    assert not (tmp_path / "p.ntff").exists() and (tmp_path / "file.neff").exists()
