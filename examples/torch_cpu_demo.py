"""nprof demo: profile a few training steps of a small PyTorch MLP on the CPU, then print the summary.

Run it with `.venv/bin/python examples/torch_cpu_demo.py [OUTPUT_DIR]`. It writes
OUTPUT_DIR/mlp_train.ntff (default ./demo-output) with `nprof.torch.profile` and prints
`nprof view -s OUTPUT_DIR/mlp_train.ntff --output-format summary-text`; open the timeline with
`nprof view -s OUTPUT_DIR/mlp_train.ntff`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

import nprof.torch
from nprof.cli import main as nprof_main

STEPS, BATCH, FEATURES, HIDDEN, CLASSES = 5, 64, 256, 512, 10


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, HIDDEN)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(HIDDEN, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))
        h = self.norm(self.act(self.fc2(h)))
        return self.head(h)


def main() -> int:
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-output")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "mlp_train.ntff"
    torch.manual_seed(0)
    model = MLP()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(BATCH, FEATURES)  # synthetic data
    y = torch.randint(0, CLASSES, (BATCH,))
    loss = nn.functional.cross_entropy(model(x), y)  # warm-up step, outside the profile
    loss.backward()
    with nprof.torch.profile(path, device="cpu") as prof:
        for _ in range(STEPS):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            prof.step()  # rows of step N get iteration N
    print(f"profiled {STEPS} training steps of a {FEATURES}-{HIDDEN}-{HIDDEN}-{CLASSES} MLP -> {path}")
    print(f"final loss {loss.item():.4f}\n")
    return nprof_main(["view", "-s", str(path), "--output-format", "summary-text"])


if __name__ == "__main__":
    sys.exit(main())
