"""Data-parallel training of the MNIST-shaped MLP: one compiled graph per step with a gradient all-reduce.

Each worker computes the gradients of its own batch (torch.func.grad), all-reduces them with
torch.distributed functional collectives, scales by 1/world and applies SGD — all inside one
`torch.compile(backend="nprof")` graph, so the compiled program holds the forward, the backward, six
all-reduces on the CC-cores and the update (the layout of a torch-neuronx data-parallel step).

    # as in the Neuron profiler's multi-worker walk-through: compile under torchrun, capture 32 workers
    nprof compile --cache cache -- torchrun --nproc_per_node=2 examples/data_parallel/train_dp.py --steps 1
    nprof capture -n cache/MODULE_<hash>/model.neff --collectives-workers-per-node 32 -s output/profile.ntff
    nprof view -n cache/MODULE_<hash>/model.neff -d output/
    # train for real on 2 processes (their virtual devices exchange the gradients), one system profile per rank:
    nprof capture -s run/ -- torchrun --nproc_per_node=2 examples/data_parallel/train_dp.py
    nprof view -d run/

Under torchrun every process trains on its own batches and the compiled all-reduce exchanges the gradients
between the processes (`nprof.device.process_group`). Run directly (`python train_dp.py`), the script is one
process whose gloo group has one rank: torch.compile traces the same graph, the device sums a single
contribution, and `--world N` sets the 1/N gradient scale baked into the graph for an N-worker capture.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mnist_mlp"))
from train import MLP, synthetic_mnist  # the seed's MLP shape, shared with examples/mnist_mlp


def make_step(model: torch.nn.Module, world: int, lr: float, backend: str | None = "nprof") -> Callable[..., Any]:
    """The compiled train step: (params..., x, y) -> (loss, new params...)."""
    names = [n for n, _ in model.named_parameters()]
    scale = 1.0 / world

    def loss_fn(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.func.functional_call(model, params, (x,))
        return torch.nn.functional.nll_loss(out, y)

    def step(x: torch.Tensor, y: torch.Tensor, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        params = dict(zip(names, flat, strict=True))
        grads, loss = torch.func.grad_and_value(loss_fn)(params, x, y)
        new = []
        for n in names:
            g = funcol.all_reduce(grads[n], "sum", dist.group.WORLD)  # the gradient all-reduce (CC-cores)
            new.append(params[n] - lr * scale * g)
        return (loss, *new)

    return torch.compile(step, backend=backend, fullgraph=True) if backend else step


def run(rank: int, world: int, steps: int, batch: int, init: str | None, world_hint: int | None,
        eager: bool) -> list[float]:  # fmt: skip
    """Train `steps` steps as `rank` of `world` (init None: torchrun's environment); the losses."""
    if init is None:
        dist.init_process_group("gloo")
    else:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = MLP()
        images, labels = synthetic_mnist(steps * batch * world, seed=0)
        step = make_step(model, world_hint or world, lr=0.05, backend=None if eager else "nprof")
        params = [p.detach().clone() for p in model.parameters()]
        losses = []
        for i in range(steps):
            lo = (i * world + rank) * batch
            loss, *params = step(images[lo : lo + batch], labels[lo : lo + batch], *params)
            losses.append(float(loss))
        return losses
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--world", type=int, default=None, help="world size the graph is traced for (1/N scale)")
    parser.add_argument("--eager", action="store_true", help="plain PyTorch (no nprof backend)")
    args = parser.parse_args()
    if "RANK" in os.environ:  # under torchrun
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        losses = run(rank, world, args.steps, args.batch, None, args.world, args.eager)
    else:
        rank = 0
        with tempfile.TemporaryDirectory() as tmp:
            init = f"file://{os.path.join(tmp, 'rendezvous')}"
            losses = run(0, 1, args.steps, args.batch, init, args.world, args.eager)
    for i, loss in enumerate(losses):
        who = f"rank {rank} " if "RANK" in os.environ else ""
        print(f"{who}step {i + 1:3d}  loss {loss:.4f}")


if __name__ == "__main__":
    main()
