"""Benchmark: a compiled data-parallel step under torchrun, its collectives exchanged between the processes.

Runs examples/data_parallel/train_dp.py's step (forward, backward, six gradient all-reduces, SGD in one
`torch.compile(backend="nprof")` graph) with `torchrun --nproc_per_node=N`, and the same step alone (one
process, one-rank group: the device sums one contribution, nothing is exchanged). Each rank times its steps
after a warm-up step (wall and process CPU) and counts the exchanges (`process_group.exchange().seq`: a header
and a payload all-gather per collective, plus the arrival-time rounds of the timing model).

Prints per configuration the mean step wall and CPU time, exchanges per step, and the step overhead of the
exchange (N-process step minus the one-process step). The machine is shared: read CPU beside wall.
Usage: .venv/bin/python bench/torchrun.py [--procs 2] [--steps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

JOB = textwrap.dedent('''
    import json, os, sys, time
    sys.path.insert(0, os.path.join(sys.argv[1], "examples", "data_parallel"))
    import torch, torch.distributed as dist
    from train_dp import MLP, make_step, synthetic_mnist
    from nprof.device.process_group import exchange
    steps, out = int(sys.argv[2]), sys.argv[3]
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", init_method="file://" + out + ".rdv", rank=0, world_size=1)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = MLP()
    step = make_step(model, world, lr=0.05)
    x, y = synthetic_mnist(32 * world, seed=0)
    x, y = x[rank * 32:(rank + 1) * 32], y[rank * 32:(rank + 1) * 32]
    params = [p.detach().clone() for p in model.parameters()]
    _loss, *params = step(x, y, *params)  # compile + warm-up
    seq0 = exchange().seq if world > 1 else 0
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(steps):
        _loss, *params = step(x, y, *params)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    seq = (exchange().seq - seq0) if world > 1 else 0
    with open(f"{out}.{rank}.json", "w") as fh:
        json.dump({"wall": wall / steps, "cpu": cpu / steps, "exchanges": seq / steps}, fh)
    dist.destroy_process_group()
''')


def _run(cmd: list[str], out: str, ranks: int) -> list[dict[str, float]]:
    env = {**os.environ, "NPROF_NO_PROGRESS": "1", "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(ranks)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NPROF_CACHE"] = str(Path(tmp) / "cache")
        script = Path(tmp) / "job.py"
        script.write_text(JOB)
        alone = _run([sys.executable, str(script), str(ROOT), str(args.steps), f"{tmp}/alone"], f"{tmp}/alone", 1)[0]
        torchrun = str(Path(sys.executable).parent / "torchrun")
        cmd = [torchrun, f"--nproc_per_node={args.procs}", str(script), str(ROOT), str(args.steps), f"{tmp}/job"]
        ranks = _run(cmd, f"{tmp}/job", args.procs)
    print(f"one process:  step {alone['wall'] * 1e3:8.1f} ms wall  {alone['cpu'] * 1e3:8.1f} ms CPU  (no exchange)")
    for r, got in enumerate(ranks):
        print(f"rank {r}/{args.procs}:   step {got['wall'] * 1e3:8.1f} ms wall  {got['cpu'] * 1e3:8.1f} ms CPU  "
              f"{got['exchanges']:.0f} exchanges/step")  # fmt: skip
    worst = max(ranks, key=lambda g: g["wall"])
    wall, cpu = (worst[k] - alone[k] for k in ("wall", "cpu"))
    print(f"exchange overhead per step: {wall * 1e3:+.1f} ms wall, {cpu * 1e3:+.1f} ms CPU "
          f"({worst['exchanges']:.0f} exchanges; negative = below the noise of a shared machine); goal: the "
          "exchange is not the bottleneck of a step")  # fmt: skip


if __name__ == "__main__":
    main()
