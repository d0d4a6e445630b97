"""Compiled collectives inside a real 2-process job: refused by default (a virtual device per process would
reduce only its own data), right with the eager fallback; `nprof compile -- torchrun` finds torchrun."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def _worker(rank: int, store_path: str, out_dir: str) -> None:
    import os
    import warnings

    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    os.environ.pop("NPROF_FALLBACK", None)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)

    def step(x: torch.Tensor) -> torch.Tensor:
        return funcol.all_reduce(x * 2.0, "sum", dist.group.WORLD) + 1.0

    x = torch.full((4,), float(rank + 1))
    lines = []
    try:
        torch.compile(step, backend="nprof")(x)
        lines.append("error-mode: ran")
    except Exception as exc:  # the backend's refusal, wrapped by dynamo
        lines.append(f"error-mode: {'2-process job' in str(exc)}")
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = torch.compile(step, backend="nprof", options={"fallback": "eager"})(x)
    lines.append(f"eager: {got.tolist()}")
    Path(out_dir, f"rank{rank}.txt").write_text("\n".join(lines))
    dist.destroy_process_group()


def test_collectives_in_a_real_two_process_job_refuse_or_run_right(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        lines = (tmp_path / f"rank{rank}.txt").read_text().splitlines()
        assert lines[0] == "error-mode: True"
        assert lines[1] == f"eager: {[2.0 * (1 + 2) + 1.0] * 4}"  # both ranks' data summed


def test_compile_command_finds_programs_beside_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    from nprof.commandline import with_own_python

    monkeypatch.setenv("PATH", "/nonexistent")
    resolved = with_own_python(["torchrun", "--nproc_per_node=2", "train.py"])
    assert resolved[0] == str(Path(sys.executable).parent / "torchrun") and resolved[1:] == ["--nproc_per_node=2",
                                                                                            "train.py"]  # fmt: skip
