"""A small ViT-style model (patch embedding, one pre-norm transformer block, class head) trained through
torch.compile(backend="nprof") on synthetic images: attention matmuls and the MLP run on TensorE, softmax
and layer norms on VectorE/ScalarE, GELU on ScalarE — forward and backward on the virtual NeuronCore.

    python examples/vit_block/train.py --steps 5
    nprof compile -- python examples/vit_block/train.py --steps 1
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn


class Attention(nn.Module):
    """Multi-head self-attention written with plain matmuls (so every op lowers to the device)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        out = torch.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)); x + mlp(ln2(x)) with a GELU MLP."""

    def __init__(self, dim: int = 32, heads: int = 2, mlp_ratio: int = 2, dropout: float = 0.1) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.mlp(self.ln2(x)))


class TinyViT(nn.Module):
    """16x16 single-channel images, 4x4 patches -> 16 tokens (+ class token) of width `dim`, one block, head."""

    def __init__(self, image: int = 16, patch: int = 4, dim: int = 32, heads: int = 2, classes: int = 10) -> None:
        super().__init__()
        self.patch = patch
        tokens = (image // patch) ** 2
        self.embed = nn.Linear(patch * patch, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        self.block = Block(dim, heads)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b, _, h, w = images.shape
        p = self.patch
        patches = images.reshape(b, h // p, p, w // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)
        x = self.embed(patches)
        x = torch.cat([self.cls.expand(b, -1, -1), x], dim=1) + self.pos
        x = self.norm(self.block(x))
        return self.head(x[:, 0])


def synthetic_images(n: int, image: int = 16, classes: int = 10, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, image, image, generator=g)
    teacher = torch.randn(image * image, classes, generator=g)
    return images, (images.flatten(1) @ teacher).argmax(dim=1)


def train(
    steps: int = 5,
    batch: int = 8,
    lr: float = 0.05,
    backend: str | None = "nprof",
    seed: int = 0,
    dropout: float = 0.0,
) -> list[float]:
    """Train with cross-entropy and SGD; return every step's loss (backend None = eager PyTorch).

    With `dropout` > 0 the device draws its own masks (from torch's generator, in another order than eager
    PyTorch), so losses are comparable with eager only at dropout 0."""
    torch.manual_seed(seed)
    model = TinyViT()
    images, labels = synthetic_images(steps * batch, seed=seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    model.block.drop.p = dropout
    step_fn = torch.compile(model, backend=backend) if backend else model
    losses = []
    for i in range(steps):
        x, y = images[i * batch : (i + 1) * batch], labels[i * batch : (i + 1) * batch]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(step_fn(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dropout", type=float, default=0.1, help="dropout probability in the block")
    parser.add_argument("--eager", action="store_true", help="run plain PyTorch instead of the nprof backend")
    args = parser.parse_args()
    start = time.perf_counter()
    backend = None if args.eager else "nprof"
    for i, loss in enumerate(train(args.steps, args.batch, backend=backend, dropout=args.dropout)):
        print(f"step {i + 1:3d}  loss {loss:.4f}")
    print(f"{args.steps} steps in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
