"""What the compiled graphs wait for: each graph's simulated time with one DMA rule of the cost model switched off.

    .venv/bin/python bench/dma_sensitivity.py                    # MNIST MLP, the resnet-shaped CNN, nanoGPT
    .venv/bin/python bench/dma_sensitivity.py --only resnet18    # any subset of bench/compile.py's models

One training step of each model (bench/compile.py's definitions) is compiled into a fresh cache; then every
lowered program (forward and backward) is timed by the device's scheduler (`nprof.device.schedule`, the time
`simulate` reports) under the preset as it is, and again under a copy of the preset with one constant set to
0: `dma_issue_gap_ns` (the least time between two DMA triggers, cost model v2: consecutive triggers on any
queue), `dma_chunk_overhead_bytes` (the fixed cost of each contiguous run of a transfer), and
`dma_latency_ns` (the fixed ~1.3 us from semaphore to transfer start). These are what-ifs, not predictions:
the same program under the model with that rule removed; the drop is an upper bound on what any change of the
compiler that only reduces that cost (fewer DMAs, longer runs, fewer DMAs in a chain) can gain. Also printed:
the program's DMA count and the sum of its trigger slots (count x gap), which overlap the transfers and the
compute and so are not a time the step spends.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RULES = ("dma_issue_gap_ns", "dma_chunk_overhead_bytes", "dma_latency_ns")


def _bench_compile() -> object:
    spec = importlib.util.spec_from_file_location("bench_compile", ROOT / "bench" / "compile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _step(name: str) -> None:
    """One compiled training step of bench/compile.py's model `name` (fills the compile cache)."""
    import torch

    models = _bench_compile().MODELS  # type: ignore[attr-defined]
    _, make_model, make_batch, loss_name = models[name]()
    torch.manual_seed(0)
    model = make_model()
    inputs, target = make_batch()
    torch._dynamo.reset()
    getattr(torch.nn.functional, loss_name)(torch.compile(model, backend="nprof")(inputs), target).backward()


def _times(program: object) -> tuple[float, dict[str, float]]:
    """(simulated ns, {rule: simulated ns with that preset constant set to 0})."""
    from nprof.arch.presets import get_preset
    from nprof.device.plan import build_plan
    from nprof.device.schedule import schedule

    preset = get_preset(program.preset)  # type: ignore[attr-defined]
    base = float(schedule(build_plan(program, preset), program).makespan)  # type: ignore[arg-type]
    off = {}
    for rule in RULES:
        variant = dataclasses.replace(preset, **{rule: 0})
        off[rule] = float(schedule(build_plan(program, variant), program).makespan)  # type: ignore[arg-type]
    return base, off


def report(name: str, seen: set[str]) -> None:
    """Compile model `name` and print one line per new graph of the cache."""
    from nprof.arch.isa import Opcode
    from nprof.arch.presets import get_preset
    from nprof.compiler import CompileCache
    from nprof.program.file import load_program

    _step(name)
    print(f"== {name}")
    for entry in sorted(CompileCache().modules(), key=lambda e: e.manifest["kind"] != "fw"):  # forward first
        if entry.path.name in seen:
            continue
        seen.add(entry.path.name)
        program = load_program(entry.program_path)
        dmas = sum(i.opcode is Opcode.DMA_DIRECT2D for i in program.instructions)
        gap = get_preset(program.preset).dma_issue_gap_ns
        base, off = _times(program)
        what_if = ", ".join(f"{rule} = 0: {ns / 1e3:.1f} us ({(ns - base) / 1e3:+.1f})" for rule, ns in off.items())
        kind = entry.manifest["kind"]
        print(f"  {kind:<3} {base / 1e3:8.1f} us simulated; {dmas} DMAs ({dmas * gap / 1e3:.1f} us of trigger slots, "
              f"summed); what-if {what_if}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="mlp,resnet,gpt", help="comma-separated subset of mlp,resnet,gpt,resnet18")
    args = parser.parse_args()
    os.environ["NPROF_CACHE"] = tempfile.mkdtemp(prefix="nprof-dma-sensitivity-")
    os.environ.setdefault("NPROF_NO_PROGRESS", "1")
    seen: set[str] = set()
    for name in args.only.split(","):
        report(name, seen)


if __name__ == "__main__":
    main()
