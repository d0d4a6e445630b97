"""Train a small MLP on synthetic MNIST-shaped data through torch.compile(backend="nprof").

Every forward and backward graph runs on the virtual NeuronCore (numerics on), so the loss printed is the
device's. No download: the images are random 28x28 tensors whose labels come from a fixed random "teacher"
projection, so the MLP can actually learn them.

    python examples/mnist_mlp/train.py                 # 20 steps, batch 32
    nprof compile -- python examples/mnist_mlp/train.py --steps 1   # compile every graph into the cache
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import nprof.torch


class MLP(nn.Module):
    """784 -> hidden -> hidden/2 -> 10 with ReLU, log-softmax output (the seed's mnist_mlp shape)."""

    def __init__(self, input_size: int = 784, hidden: int = 128, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(input_size, hidden)
        self.fc2 = nn.Linear(hidden, hidden // 2)
        self.fc3 = nn.Linear(hidden // 2, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        x = torch.relu(self.fc1(x))
        x = torch.relu(self.fc2(x))
        return torch.log_softmax(self.fc3(x), dim=1)


def synthetic_mnist(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` random 1x28x28 images in [0, 1) and learnable labels (argmax of a fixed random projection)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, 28, 28, generator=g)
    teacher = torch.randn(784, 10, generator=g)
    labels = (images.flatten(1) @ teacher).argmax(dim=1)
    return images, labels


def train(steps: int = 20, batch: int = 32, hidden: int = 128, lr: float = 0.05, backend: str | None = "nprof",
          seed: int = 0) -> list[float]:  # fmt: skip
    """Train and return the loss of every step (backend None = eager PyTorch, for comparison)."""
    torch.manual_seed(seed)
    model = MLP(hidden=hidden)
    images, labels = synthetic_mnist(steps * batch, seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    step_fn = torch.compile(model, backend=backend) if backend else model
    losses = []
    for i in range(steps):
        x = images[i * batch : (i + 1) * batch]
        y = labels[i * batch : (i + 1) * batch]
        opt.zero_grad()
        loss = nn.functional.nll_loss(step_fn(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        nprof.torch.step()  # under `nprof capture`: rows of step i get iteration i (a no-op otherwise)
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--eager", action="store_true", help="run plain PyTorch instead of the nprof backend")
    args = parser.parse_args()
    start = time.perf_counter()
    losses = train(args.steps, args.batch, args.hidden, backend=None if args.eager else "nprof")
    for i, loss in enumerate(losses):
        print(f"step {i + 1:3d}  loss {loss:.4f}")
    print(f"{args.steps} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
