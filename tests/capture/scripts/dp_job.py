"""A 2-rank data-parallel job for the torchrun tests: the same small MLP trained two ways on every rank.

* compiled: one `torch.compile(backend="nprof")` step holding forward, backward, the gradients' all-reduce
  (functional collectives: CC instructions whose data the ranks exchange) and SGD;
* eager DDP on gloo (its gradient all-reduce runs in DDP's hooks on the host).
Each rank writes `<out>/rank<r>.json`: the largest difference between the two runs' parameters, and the
largest difference between the compiled parameters and those of training on this rank's data alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import nprof.torch

STEPS, LR = 2, 0.1


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    names = [n for n, _ in model.named_parameters()]

    def loss_fn(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(torch.func.functional_call(model, params, (x,)), y)

    def step(x: torch.Tensor, y: torch.Tensor, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        params = dict(zip(names, flat, strict=True))
        grads, loss = torch.func.grad_and_value(loss_fn)(params, x, y)
        new = [params[n] - LR * funcol.all_reduce(grads[n], "sum", dist.group.WORLD) / world for n in names]
        return (loss, *new)

    gen = torch.Generator().manual_seed(1)
    xs, ys = torch.randn(STEPS, world, 4, 8, generator=gen), torch.randint(0, 4, (STEPS, world, 4), generator=gen)
    compiled = torch.compile(step, backend="nprof", fullgraph=True)
    params = [p.detach().clone() for p in model.parameters()]
    alone = [p.detach().clone().requires_grad_() for p in model.parameters()]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    for i in range(STEPS):
        _loss, *params = compiled(xs[i, rank], ys[i, rank], *params)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(xs[i, rank]), ys[i, rank]).backward()
        opt.step()
        grads = torch.autograd.grad(loss_fn(dict(zip(names, alone, strict=True)), xs[i, rank], ys[i, rank]), alone)
        alone = [(a - LR * g).detach().requires_grad_() for a, g in zip(alone, grads, strict=True)]
        nprof.torch.step()
    with torch.no_grad():
        ddp_diff = max(float((a - b).abs().max()) for a, b in zip(params, model.parameters(), strict=True))
        alone_diff = max(float((a - b).abs().max()) for a, b in zip(params, alone, strict=True))
    Path(out, f"rank{rank}.json").write_text(json.dumps({"ddp": ddp_diff, "alone": alone_diff, "world": world}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
