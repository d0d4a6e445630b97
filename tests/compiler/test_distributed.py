"""Compiled collectives inside a real 2-process job exchange their data across the processes: right results
on every rank, a clear error (never a hang) when the ranks issue different collectives or one never comes;
`nprof compile -- torchrun` finds torchrun."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def _run(fn: object, *args: object) -> str:
    """`fn(*args)`'s result, or the first line of the error it raised (dynamo may wrap the backend's)."""
    try:
        return f"ok {fn(*args).tolist()}"  # type: ignore[operator]
    except Exception as exc:
        return f"error {str(exc).strip().splitlines()[0]}"


def _worker(rank: int, store_path: str, out_dir: str) -> None:
    import os

    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    os.environ.pop("NPROF_FALLBACK", None)
    os.environ["NPROF_COLLECTIVE_TIMEOUT"] = "60"
    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)

    def reduce(x: torch.Tensor) -> torch.Tensor:
        return funcol.all_reduce(x * 2.0, "sum", dist.group.WORLD) + 1.0

    def gather(x: torch.Tensor) -> torch.Tensor:
        return funcol.all_gather_tensor(x + 1.0, 0, dist.group.WORLD)

    x = torch.arange(4, dtype=torch.float32) + 10 * rank
    lines = [_run(torch.compile(reduce, backend="nprof"), x), _run(torch.compile(gather, backend="nprof"), x)]
    torch._dynamo.reset()
    lines.append(_run(torch.compile(reduce if rank == 0 else gather, backend="nprof"), x))  # mismatched ranks
    torch._dynamo.reset()
    os.environ["NPROF_COLLECTIVE_TIMEOUT"] = "2"
    if rank == 0:  # rank 1 never comes
        lines.append(_run(torch.compile(reduce, backend="nprof"), x))
    Path(out_dir, f"rank{rank}.txt").write_text("\n".join(lines))
    dist.barrier()
    dist.destroy_process_group()


def test_collectives_in_a_real_two_process_job_exchange_their_data(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    r0, r1 = ((tmp_path / f"rank{r}.txt").read_text().splitlines() for r in range(2))
    summed = [2.0 * (i + i + 10) + 1.0 for i in range(4)]  # both ranks' data
    assert r0[0] == r1[0] == f"ok {summed}"
    both = [float(i + 1) for i in range(4)] + [float(i + 11) for i in range(4)]
    assert r0[1] == r1[1] == f"ok {both}"
    for line in (r0[2], r1[2]):
        assert "ranks issue different collectives: rank 0 issues all-reduce (add) of 4 elements" in line
        assert "rank 1 issues all-gather of 4 elements" in line and "same order" in line
    assert "rank 0 issues all-reduce (add) of 4 elements" in r0[3] and "did not all reach it within 2 s" in r0[3]
    assert "NPROF_COLLECTIVE_TIMEOUT" in r0[3] and len(r1) == 3


def test_compile_command_finds_programs_beside_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    from nprof.commandline import with_own_python

    monkeypatch.setenv("PATH", "/nonexistent")
    resolved = with_own_python(["torchrun", "--nproc_per_node=2", "train.py"])
    assert resolved[0] == str(Path(sys.executable).parent / "torchrun") and resolved[1:] == ["--nproc_per_node=2",
                                                                                            "train.py"]  # fmt: skip
