"""The examples in examples/nki run as scripts and compute what numpy computes."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from nprof.arch.isa import Opcode
from nprof.nki import Kernel
from nprof.profile import Profile

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nki"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"nki_example_{name}", EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_exp_kernel_script_prints_table_and_writes_files(tmp_path):
    env = {**os.environ, "NPROF_NO_PROGRESS": "1"}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "exp_kernel.py")], cwd=tmp_path, capture_output=True, text=True, env=env,
        timeout=600, check=True,
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:3] == ["B", "NC", "NC"] and "NCL(99)" in lines[0] and "%USER" in lines[0]
    assert lines[-1] == "Profile results are written to profile.ntff"
    assert (tmp_path / "file.neff").is_file()
    profile = Profile.load(tmp_path / "profile.ntff")
    sources = profile.table("instructions").column("nki_source_location").to_pylist()
    assert any(s and s.startswith("exp_kernel.py:") for s in sources)


def test_exp_kernel_numerics():
    mod = _module("exp_kernel")
    x = np.random.default_rng(0).standard_normal((250, 512)).astype(np.float32)
    out = Kernel(mod.tensor_exp_kernel_.func).run(x)
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)


def test_matmul_tiled_numerics_and_instructions(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mod = _module("matmul_tiled")
    assert mod.main(save=False) < 1e-3
    rng = np.random.default_rng(1)
    lhsT, rhs = rng.standard_normal((384, 128)).astype(np.float32), rng.standard_normal((384, 512)).astype(np.float32)
    traced = Kernel(mod.matmul_tiled).trace(lhsT, rhs)
    ops = [i.opcode for i in traced.program.instructions]
    assert ops.count(Opcode.MATMUL) == 3 and ops.count(Opcode.LDWEIGHTS) == 3
    np.testing.assert_allclose(Kernel(mod.matmul_tiled).run(lhsT, rhs), lhsT.T @ rhs, rtol=1e-4, atol=1e-3)


def test_softmax_layernorm_numerics():
    mod = _module("softmax_layernorm")
    err_sm, err_ln = mod.main()
    assert err_sm < 1e-6 and err_ln < 1e-4
