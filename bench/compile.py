"""Benchmark of the torch compiler: compile time per graph, simulated and wall time of a training step.

    .venv/bin/python bench/compile.py            # the seed's MNIST MLP (784-128-64-10, batch 32) and the ViT block

Prints, per model: each graph's compile time (lowering + cache write, cold cache) and instruction count; the
simulated device time of one training step (forward + backward programs, ns); the wall time of one
simulated training step once compiled (median of 5 steps; goal < 1 s for the MLP); and the warm-cache
compile count after a dynamo reset, which must be 0 (every graph is loaded from the cache).
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _example(name: str) -> object:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "examples" / name / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bench(label: str, run_steps: object) -> None:
    import torch

    from nprof.compiler import STATS, CompileCache

    STATS.reset()
    torch._dynamo.reset()
    run_steps(1)  # type: ignore[operator]  # cold cache: compiles every graph
    kinds = {m.path.name: (m.manifest["kind"], m.manifest["instructions"]) for m in CompileCache().modules()}
    print(f"== {label}")
    for module, seconds in STATS.compile_seconds:
        kind, n = kinds.get(module, ("?", 0))
        print(f"compile {kind:<3} {module}: {seconds * 1000:8.1f} ms  ({n} instructions)")
    STATS.reset()
    walls = []
    for _ in range(5):
        STATS.device_ns.clear()
        start = time.perf_counter()
        run_steps(1)  # type: ignore[operator]
        walls.append(time.perf_counter() - start)
    device = sum(ns for _, ns in STATS.device_ns)
    print(f"simulated step time: {device} ns ({', '.join(f'{m[-6:]} {ns} ns' for m, ns in STATS.device_ns)})")
    print(f"wall time of one simulated training step: {statistics.median(walls):.3f} s (median of 5)")
    STATS.reset()
    torch._dynamo.reset()  # forget the in-process compiled code: the backend runs again, on a warm cache
    run_steps(1)  # type: ignore[operator]
    print(
        f"warm cache after a dynamo reset: {STATS.compiled} graphs compiled, {STATS.cache_hits} loaded from the cache"
    )


def main() -> None:
    os.environ["NPROF_CACHE"] = tempfile.mkdtemp(prefix="nprof-bench-cache-")
    os.environ.setdefault("NPROF_NO_PROGRESS", "1")
    import torch

    import nprof.compiler.ops
    import nprof.device
    import nprof.program.file  # noqa: F401

    mlp = _example("mnist_mlp")
    torch.manual_seed(0)
    model = mlp.MLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    images, labels = mlp.synthetic_mnist(32)

    def mlp_steps(n: int) -> None:
        step = torch.compile(model, backend="nprof")
        for _ in range(n):
            opt.zero_grad()
            torch.nn.functional.nll_loss(step(images), labels).backward()
            opt.step()

    bench("MNIST MLP 784-128-64-10, batch 32 (seed 000)", mlp_steps)

    vit = _example("vit_block")
    torch.manual_seed(0)
    vmodel = vit.TinyViT()
    vmodel.block.drop.p = 0.0
    vopt = torch.optim.SGD(vmodel.parameters(), lr=0.05)
    vimages, vlabels = vit.synthetic_images(8)

    def vit_steps(n: int) -> None:
        step = torch.compile(vmodel, backend="nprof")
        for _ in range(n):
            vopt.zero_grad()
            torch.nn.functional.cross_entropy(step(vimages), vlabels).backward()
            vopt.step()

    bench("TinyViT (16 tokens + cls, dim 32, 2 heads), batch 8", vit_steps)


if __name__ == "__main__":
    main()
