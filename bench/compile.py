"""Benchmark of the torch compiler: compile time, step wall vs eager, simulated step time vs its roofline bound.

    .venv/bin/python bench/compile.py                 # MNIST MLP, a small resnet-shaped CNN, a nanoGPT block
    .venv/bin/python bench/compile.py --resnet18      # + resnet18 (torchvision's layout), batch 8, 32x32 (goal < 10 s)
    .venv/bin/python bench/compile.py --only resnet18_224  # resnet18 at its default 224x224, batch 1 (no goal set)
    .venv/bin/python bench/compile.py --only mobilenet     # MobileNetV2-style (depthwise 3x3), batch 8, 32x32
    .venv/bin/python bench/compile.py --only resnext       # ResNeXt-style (3x3, 8 groups of 8), batch 8, 32x32
    .venv/bin/python bench/compile.py --only mobilenet --decomposed  # depthwise convs decomposed (before the kernel)
    .venv/bin/python bench/compile.py --scaling       # lowering time vs graph size (goal: linear)
    .venv/bin/python bench/compile.py --sizes         # resnet18's lowering CPU per instruction, 32x32 to 224x224

Per model it prints: the first step's wall and CPU time (goal < 10 s) with the CPU split into nprof's lowering, the
program cache write (or read), the device timing (simulated, or read from the timing cache), the numerics and
copies, and the rest: torch's Dynamo/AOTAutograd and the eager ops of the step; each graph's compile time on a cold
cache (lowering + cache write; CPU seconds beside wall) and instruction count; the wall time of one compiled
training step (median of 3) beside the eager step's; the simulated device time of one step beside the roofline bound
of the same programs, i.e. the sum over graphs of max(model FLOPs / peak FLOP/s, compulsory HBM bytes / HBM
bandwidth) where the model FLOPs are torch's FLOP counter's on an eager step (forward and backward apart; the
FLOPs the programs' matmuls issue, which include padding columns a lowering adds, are printed beside them)
and the compulsory bytes are the graph's inputs, weights and outputs read or written once (preset
figures: `nprof.arch.presets`) — goal: within 2x; beside each graph's bound, the least time cost model v2 allows for
one DMA per compulsory tensor (triggers `dma_issue_gap_ns` apart, then the fixed latency; and the fixed latency plus
the bytes at the DMA pool's bandwidth: floors the bound does not include), summed over graphs as the least step; the
DMA count of each graph with the trigger time it implies; the cost-model floor with all I/O packed (max of the bound,
two DMA latencies, and the latency plus the compulsory bytes at the DMA pool's bandwidth), per graph and per step,
with the simulated step's ratio to it and whether 2x the bound is reachable under the cost model; the
warm-cache compile count after a dynamo reset (must be 0); and the first step in new processes: nprof on the warm
cache (goal: "instant", i.e. torch's own compile overhead plus the numerics), beside torch's aot_eager backend
(Dynamo + AOTAutograd, no nprof) and eager. Before all that, a few lines time loading nprof's compiled (numba)
cores as scripts/setup.sh warms them, which a cold numba cache (after a fresh clone, an install or an edit of
their sources) compiles in ~40 s CPU: a one-time cost kept out of the per-model first steps, so they compare
across runs (a core the warm-up misses shows in the first step's lowering).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _example(name: str) -> object:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "examples" / name / "train.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ----- models written here (torchvision and nanoGPT are not importable in the venv) -----------------------------
def _resnet_block(cin: int, cout: int, stride: int) -> object:
    """A BasicBlock: two 3x3 conv-BN (ReLU between), a 1x1 strided conv-BN shortcut when the shape changes."""
    import torch.nn as nn

    class Basic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):  # type: ignore[no-untyped-def]
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + (x if self.down is None else self.down(x)))

    return Basic()


def _resnet(width: int, classes: int = 10) -> object:
    """A resnet18-shaped CNN for 32x32 images: 3x3 stem, 4 stages of 2 BasicBlocks (widths w..8w), pool, fc."""
    import torch.nn as nn

    widths = [width, 2 * width, 4 * width, 8 * width]
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
    cin = width
    for i, w in enumerate(widths):
        layers += [_resnet_block(cin, w, 1 if i == 0 else 2), _resnet_block(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def _resnet18(classes: int = 1000) -> object:
    """torchvision's resnet18 layout (written here): 7x7/2 stem, 3x3/2 max pool, 4 stages of 2 BasicBlocks
    (64..512, 1x1 strided downsample), global average pool, fc to 1000 classes."""
    import torch.nn as nn

    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                               nn.MaxPool2d(3, 2, 1)]  # fmt: skip
    cin = 64
    for i, w in enumerate((64, 128, 256, 512)):
        layers += [_resnet_block(cin, w, 1 if i == 0 else 2), _resnet_block(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def _inverted_residual(cin: int, cout: int, stride: int, expand: int = 6) -> object:
    """MobileNetV2's block: 1x1 expansion conv-BN-ReLU6, 3x3 depthwise (groups = channels) conv-BN-ReLU6, 1x1
    linear projection conv-BN, the shortcut when the shape is kept."""
    import torch.nn as nn

    class Inverted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            wide = cin * expand
            self.layers = nn.Sequential(
                nn.Conv2d(cin, wide, 1, bias=False), nn.BatchNorm2d(wide), nn.ReLU6(),
                nn.Conv2d(wide, wide, 3, stride, 1, groups=wide, bias=False), nn.BatchNorm2d(wide), nn.ReLU6(),
                nn.Conv2d(wide, cout, 1, bias=False), nn.BatchNorm2d(cout),
            )  # fmt: skip
            self.shortcut = stride == 1 and cin == cout

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = self.layers(x)
            return x + y if self.shortcut else y

    return Inverted()


def _mobilenet(classes: int = 10) -> object:
    """A MobileNetV2-style CNN for 32x32 images: 3x3 stem (16 channels), an inverted residual block at 32x32
    (96-channel 3x3 depthwise, stride 1) and a strided one (96 channels, stride 2, to 24), pool, fc."""
    import torch.nn as nn

    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6(),
                         _inverted_residual(16, 16, 1), _inverted_residual(16, 24, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, classes))  # fmt: skip


def _resnext(classes: int = 10) -> object:
    """A ResNeXt-style CNN for 32x32 images: 3x3 stem (32 channels), one bottleneck block (1x1 to 64, 3x3
    grouped conv with 8 groups of 8 channels, 1x1 to 64, a 1x1 projection shortcut), pool, fc."""
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(
                nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                nn.Conv2d(64, 64, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                nn.Conv2d(64, 64, 1, bias=False), nn.BatchNorm2d(64),
            )  # fmt: skip
            self.shortcut = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64))

        def forward(self, x):  # type: ignore[no-untyped-def]
            return (self.layers(x) + self.shortcut(x)).relu()

    return nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), Bottleneck(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))  # fmt: skip


def _gpt(vocab: int = 64, dim: int = 64, heads: int = 4, block: int = 32) -> object:
    """A nanoGPT-shaped model: token + position embedding, one pre-norm causal attention block, GELU MLP, head."""
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.register_buffer("mask", torch.full((block, block), float("-inf")).triu(1))

        def forward(self, x):  # type: ignore[no-untyped-def]
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (c // heads) ** -0.5 + self.mask[:t, :t]
            y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
            x = x + self.proj(y)
            return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
            self.block, self.ln, self.head = Block(), nn.LayerNorm(dim), nn.Linear(dim, vocab)

        def forward(self, idx):  # type: ignore[no-untyped-def]
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            return self.head(self.ln(self.block(x))).reshape(-1, vocab)

    return GPT()


# ----- measurement ----------------------------------------------------------------------------------------------
def _trigger_floor_ns(module: str, hbm_bytes: int) -> tuple[float, float]:
    """The least time the cost model allows for moving each compulsory tensor (inputs, weights, outputs) in one
    DMA, as (trigger floor, transfer floor): one trigger per `dma_issue_gap_ns` (cost model v2,
    docs/hardware.md), then the last transfer's fixed latency; and the fixed latency plus the compulsory bytes
    at the DMA pool's bandwidth (`arch.cost.dma_pool_bandwidth`: 16 engines x 17 B/ns = 272 GB/s on trn1,
    below the 410 GB/s HBM share the bound uses). Not part of the roofline bound; printed beside it."""
    from nprof.arch.cost import dma_pool_bandwidth
    from nprof.arch.presets import get_preset
    from nprof.compiler import STATS, CompileCache
    from nprof.compiler.tailstage import TAIL_NAME
    from nprof.program.file import load_program

    entry = next(m for m in CompileCache().modules() if module.startswith(m.path.name))
    program = load_program(entry.program_path)
    tensors = sum(1 for t in program.tensors if t.kind != "internal" and t.name != TAIL_NAME)
    preset = get_preset(STATS.last_profile[module].info.preset or "trn1")
    triggers = (tensors - 1) * preset.dma_issue_gap_ns + preset.dma_latency_ns
    return triggers, preset.dma_latency_ns + hbm_bytes / dma_pool_bandwidth(preset) * 1e9


def _packed_floor_ns(module: str, bound: float, transfer: float) -> float:
    """The least time cost model v2 allows a graph even with every input in one DMA and every output in one:
    max(the roofline bound; two fixed DMA latencies, a load and the store of a result computed from it; the
    fixed latency plus the compulsory bytes at the DMA pool's bandwidth, `transfer`)."""
    from nprof.arch.presets import get_preset
    from nprof.compiler import STATS

    preset = get_preset(STATS.last_profile[module].info.preset or "trn1")
    return max(bound, 2 * preset.dma_latency_ns, transfer)


def _floor_rule(preset_name: str = "trn1") -> str:
    """The cost-model floor's rule in words with the preset's figures and their public sources."""
    from nprof.arch.cost import MODEL_VERSION, dma_pool_bandwidth
    from nprof.arch.presets import get_preset

    p = get_preset(preset_name)
    return (f"two fixed DMA latencies, {2 * p.dma_latency_ns / 1e3:.1f} us: a load of every input and the store "
            f"of a result computed from it, each ~{p.dma_latency_ns / 1e3:.1f} us from semaphore to transfer start "
            f"(HARDWARE.md, NKI performance guide); one latency plus the compulsory bytes at the DMA pool's "
            f"{dma_pool_bandwidth(p) / 1e9:.0f} GB/s ({p.dma_queues} DMA engines x "
            f"{p.dma_queue_bandwidth / 1e9:.0f} B/ns, HARDWARE.md: the DMA bandwidth guide); launch cost "
            f"{p.launch_ns:.0f} ns (fitted, docs/hardware.md)) under cost model v{MODEL_VERSION}, all I/O packed in "
            "one load and one store per graph: no program of these graphs runs faster in the simulator")  # fmt: skip


def _dma_count(module: str) -> tuple[int, float]:
    """(DMAs in the module's program, the cost model's least gap between two DMA triggers in ns)."""
    from nprof.arch.isa import Opcode
    from nprof.arch.presets import get_preset
    from nprof.compiler import STATS, CompileCache
    from nprof.program.file import load_program

    entry = next(m for m in CompileCache().modules() if module.startswith(m.path.name))
    program = load_program(entry.program_path)
    preset = get_preset(STATS.last_profile[module].info.preset or "trn1")
    return sum(i.opcode is Opcode.DMA_DIRECT2D for i in program.instructions), preset.dma_issue_gap_ns


def _roofline_ns(module: str, flops: int) -> tuple[float, int, int, int]:
    """(bound ns, model FLOPs, compulsory HBM bytes, FLOPs of the program's matmul instructions) of one compiled
    module's program (its last execution): `flops` are the model's (torch's FLOP counter on the eager graph),
    not the program's, whose matmuls may also multiply padding columns the lowering adds and drops."""
    import numpy as np

    from nprof.compiler import STATS, CompileCache
    from nprof.program.file import load_program

    entry = next(m for m in CompileCache().modules() if module.startswith(m.path.name))
    program = load_program(entry.program_path)
    profile = STATS.last_profile[module]
    issued = int(np.asarray(profile.instructions["flops"]).sum())
    itemsize = {"float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2, "int8": 1, "uint8": 1}
    compulsory = _compulsory_bytes(program, itemsize)
    info = profile.info
    bound = max(flops / info.peak_flops, compulsory / info.hbm_bandwidth) * 1e9
    return bound, flops, compulsory, issued


def _compulsory_bytes(program: object, itemsize: dict[str, int]) -> int:
    """Bytes of the program's inputs, weights and outputs, an input pack (`nprof.compiler.packing`,
    `nprof.compiler.rowpack`) counted as its distinct members' elements (4 bytes each: fp32 or int32), not its
    padding nor twice for a member two packs hold; the tail pack (`nprof.compiler.tailstage`) not at all: its
    members are outputs the program still declares."""
    import json

    import numpy as np

    from nprof.compiler.packing import PACKED_META
    from nprof.compiler.tailstage import TAIL_NAME

    packs = json.loads(program.meta.get(PACKED_META, "{}"))  # type: ignore[attr-defined]
    members = {str(entry[0]): int(entry[2]) for layout in packs.values() for entry in layout}
    tensors = [t for t in program.tensors  # type: ignore[attr-defined]
               if t.kind != "internal" and t.name not in packs and t.name != TAIL_NAME]  # fmt: skip
    return sum(int(np.prod(t.shape)) * itemsize.get(t.dtype, 4) for t in tensors) + 4 * sum(members.values())


def _model_flops(model: object, inputs: object, target: object, loss_fn: Callable[..., object]) -> dict[str, int]:
    """FLOPs of one eager training step of a copy of `model` by torch's FLOP counter (matmuls, convolutions,
    attention: the roofline's compute), as {"fw": forward incl. the loss, "bw": backward}."""
    import copy

    from torch.utils.flop_counter import FlopCounterMode

    twin = copy.deepcopy(model)
    with FlopCounterMode(display=False) as fw:
        loss = loss_fn(twin(inputs), target)  # type: ignore[operator]
    with FlopCounterMode(display=False) as bw:
        loss.backward()  # type: ignore[attr-defined]
    return {"fw": fw.get_total_flops(), "bw": bw.get_total_flops()}


def jit_line() -> str:
    """Load (or, on a cold numba cache, compile) the compiled cores a torch.compile run uses, timed, as lines: what
    scripts/setup.sh runs once (`nprof.compiler.warmup.warm_cores`). numba caches the machine code on disk
    (`cache=True`: the package's __pycache__, or NUMBA_CACHE_DIR); after a fresh clone, an install or an edit of a
    core's sources, the first process compiles it: ~40 s CPU on this machine, paid inside the first compile of
    that process unless done here first. A core this list missed shows in the first step's lowering below."""
    from nprof.compiler.warmup import warm_cores

    wall = time.perf_counter()
    cores = warm_cores()
    wall = time.perf_counter() - wall
    compiled = sum(n for _, _, n in cores)
    state = f"cold numba cache: {compiled} signatures compiled" if compiled else "warm numba cache: loaded"
    lines = [f"  {label}: {cpu:.2f} s CPU, {n} signature(s) compiled" for label, cpu, n in cores]
    return "\n".join([f"nprof's compiled cores, as scripts/setup.sh warms them ({state}; once per install or edit, "
                      f"not per model): {wall:.2f} s wall, {sum(c for _, c, _ in cores):.2f} s CPU; not included "
                      "in the first steps below", *lines])  # fmt: skip


def _timed(fn: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def bench(label: str, model: object, make_batch: Callable[[], tuple[object, object]], loss_name: str) -> None:
    """Compile (cold cache), time compiled vs eager steps, compare simulated time with the roofline bound."""
    import torch

    from nprof.compiler import STATS, CompileCache

    inputs, target = make_batch()
    loss_fn = getattr(torch.nn.functional, loss_name)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # type: ignore[attr-defined]
    compiled = torch.compile(model, backend="nprof")

    def step(fwd: Callable[..., object]) -> Callable[[], None]:
        def run() -> None:
            opt.zero_grad()
            loss_fn(fwd(inputs), target).backward()
            opt.step()

        return run

    model_flops = _model_flops(model, inputs, target, loss_fn)
    STATS.reset()
    torch._dynamo.reset()
    first_wall, first_cpu = _timed(step(compiled))
    kinds = {m.path.name: (m.manifest["kind"], m.manifest["instructions"]) for m in CompileCache().modules()}
    print(f"== {label}")
    print(f"first step (compiles every graph): {first_wall:.2f} s wall, {first_cpu:.2f} s CPU (goal < 10 s); "
          f"CPU: {_breakdown(first_cpu)}")  # fmt: skip
    cpu_of = dict(STATS.compile_cpu_seconds)
    for module, seconds in STATS.compile_seconds:
        kind, n = kinds.get(module, ("?", 0))
        cpu = cpu_of.get(module, 0.0)
        print(f"  compile {kind:<3} {module}: {seconds:7.2f} s wall, {cpu:7.2f} s CPU  ({n} instructions, "
              f"{cpu / max(n, 1) * 1e6:.0f} us CPU each)")  # fmt: skip
    STATS.reset()
    compiled_walls = []
    for _ in range(3):
        STATS.device_ns.clear()
        compiled_walls.append(_timed(step(compiled)))
    eager_walls = [_timed(step(model)) for _ in range(3)]  # type: ignore[arg-type]
    wall, cpu = statistics.median(w for w, _ in compiled_walls), statistics.median(c for _, c in compiled_walls)
    eager, eager_cpu = statistics.median(w for w, _ in eager_walls), statistics.median(c for _, c in eager_walls)
    print(f"later steps: compiled {wall:.3f} s wall ({cpu:.3f} s CPU), eager {eager:.4f} s wall ({eager_cpu:.4f} s "
          f"CPU): {wall / eager:.1f}x eager in wall, {cpu / eager_cpu:.1f}x in CPU (issue 11: 44-84x)")  # fmt: skip
    device = sum(ns for _, ns in STATS.device_ns)
    kind_of = {name: kind for name, (kind, _) in kinds.items()}
    bounds = [(_roofline_ns(m, model_flops[next(k for n, k in kind_of.items() if m.startswith(n))]), ns, m)
              for m, ns in STATS.device_ns]  # fmt: skip
    bound = sum(b[0][0] for b in bounds)
    floors = [_packed_floor_ns(m, b, _trigger_floor_ns(m, hbm)[1]) for (b, _, hbm, _), _, m in bounds]
    floor = sum(floors)
    print(f"simulated step: {device / 1e3:.1f} us; roofline bound {bound / 1e3:.1f} us: {device / bound:.1f}x the "
          f"bound (goal <= 2x); beside it the cost-model floor {floor / 1e3:.1f} us = {floor / bound:.1f}x the bound "
          f"(2x the bound {'is' if floor <= 2 * bound else 'is NOT'} reachable), the step {device / floor:.1f}x "
          "the floor")  # fmt: skip
    print(f"  the floor, per graph: max(the bound; {_floor_rule()}); summed over graphs")
    least = 0.0
    for ((b, flops, hbm, issued), ns, m), packed in zip(bounds, floors, strict=True):
        triggers, transfer = _trigger_floor_ns(m, hbm)
        least += max(b, triggers, transfer)
        dmas, gap = _dma_count(m)
        print(f"  {m[-3:]}: {ns / 1e3:9.1f} us vs bound {b / 1e3:8.2f} us "
              f"({flops / 1e6:.1f} model MFLOP, {issued / 1e6:.1f} issued by matmuls; {hbm / 1e3:.0f} kB) = "
              f"{ns / b:.1f}x, vs cost-model floor {packed / 1e3:.2f} us = {ns / packed:.1f}x; {dmas} DMAs "
              f"({dmas * gap / 1e3:.1f} us of triggers); one "
              f"DMA per compulsory tensor takes >= {triggers / 1e3:.2f} us of DMA triggers, its bytes >= "
              f"{transfer / 1e3:.2f} us through the DMA pool")  # fmt: skip
    print(f"least step the cost model allows with one DMA per compulsory tensor: {least / 1e3:.1f} us = "
          f"{least / bound:.1f}x the bound; simulated step {device / least:.2f}x that")  # fmt: skip
    STATS.reset()
    torch._dynamo.reset()  # forget the in-process compiled code: the backend runs again, on a warm cache
    warm_wall, warm_cpu = _timed(step(torch.compile(model, backend="nprof")))
    print(f"warm cache after a dynamo reset: {STATS.compiled} graphs compiled (goal 0), {STATS.cache_hits} loaded; "
          f"first step {warm_wall:.2f} s wall, {warm_cpu:.2f} s CPU: {_breakdown(warm_cpu)}")  # fmt: skip


def _breakdown(step_cpu: float) -> str:
    """Where the CPU of a first step went, from `STATS` (measured by the backend with process_time)."""
    from nprof.compiler import STATS

    lower = sum(c for _, c in STATS.compile_cpu_seconds)
    store = sum(c for _, c in STATS.store_cpu_seconds)
    timing = sum(c for _, c in STATS.timing_cpu_seconds)
    load = sum(c for _, c in STATS.load_cpu_seconds)
    execs = sum(c for _, c in STATS.cpu_seconds)
    graphs = len(STATS.timing_cpu_seconds)
    torch_cpu = step_cpu - lower - load - execs
    return (f"nprof lowering {lower - store:.2f} s + program cache write {store:.2f} s + read {load:.2f} s; device "
            f"timing {timing:.2f} s ({graphs - STATS.timing_hits} graph(s) simulated, {STATS.timing_hits} read from "
            f"the cache); numerics and copies {execs - timing:.2f} s; torch's Dynamo/AOTAutograd/eager ops "
            f"{torch_cpu:.2f} s")  # fmt: skip


def first_step(name: str, backend: str) -> None:
    """One first training step of model `name` in this (fresh) process: torch.compile with `backend` ("none":
    eager), printed as one line with its CPU breakdown (used by `fresh_processes`)."""
    import torch

    _, make_model, make_batch, loss_name = MODELS[name]()
    torch.manual_seed(0)
    model = make_model()
    inputs, target = make_batch()
    loss_fn = getattr(torch.nn.functional, loss_name)
    run = model if backend == "none" else torch.compile(model, backend=backend)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        opt.zero_grad()
        loss_fn(run(inputs), target).backward()
        opt.step()

    wall, cpu = _timed(step)
    extra = f": {_breakdown(cpu)}" if backend == "nprof" else ""
    print(f"{wall:.2f} s wall, {cpu:.2f} s CPU{extra}")


def fresh_processes(name: str, extra: tuple[str, ...] = ()) -> None:
    """The first step of model `name` in new processes: nprof on the warm cache this run filled (goal: torch's
    own overhead plus the numerics, nothing compiled or simulated again), beside torch's aot_eager (Dynamo and
    AOTAutograd, no nprof) and eager on the same step."""
    import subprocess

    for backend, what in (("nprof", "nprof, warm cache"), ("aot_eager", "torch aot_eager (no nprof)"),
                          ("none", "eager")):  # fmt: skip
        cmd = [sys.executable, __file__, "--first-step", name, "--backend", backend, *extra]
        done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ), check=False)
        line = done.stdout.strip().splitlines()[-1] if done.returncode == 0 else done.stderr.strip()[-300:]
        print(f"new process, first step, {what}: {line}")


def scaling() -> None:
    """Lowering time of CNNs of 2 to 32 conv-BN-ReLU blocks (after a 1-block warm-up that is not
    printed: first-use imports), forward and backward (goal: CPU time per instruction flat)."""
    import torch
    import torch.nn as nn

    from nprof.compiler import STATS, CompileCache

    for depth in (1, 2, 4, 8, 16, 32):
        torch.manual_seed(0)
        layers: list[nn.Module] = [nn.Conv2d(3, 16, 3, 1, 1)]
        for _ in range(depth):
            layers += [nn.Conv2d(16, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU()]
        layers += [nn.Flatten(), nn.Linear(16 * 16 * 16, 10)]
        model = nn.Sequential(*layers)
        STATS.reset()
        torch._dynamo.reset()
        x = torch.randn(4, 3, 16, 16)
        torch.compile(model, backend="nprof")(x).sum().backward()
        names = dict(STATS.compile_cpu_seconds)
        n = sum(m.manifest["instructions"] for m in CompileCache().modules() if m.path.name in names)
        seconds = sum(names.values())
        if depth == 1:
            continue  # the warm-up
        print(f"scaling: {depth} blocks: {n:6d} instructions in {seconds:6.2f} s CPU = "
              f"{seconds / max(n, 1) * 1e6:.0f} us each (goal: flat)")  # fmt: skip


SIZES = ((32, 8), (64, 2), (160, 2), (224, 1), (224, 2))  # (image side, batch) of `sizes`


def sizes(which: tuple[tuple[int, int], ...] = SIZES) -> None:
    """resnet18 (torchvision's layout) at each (side, batch) of `which`: each graph's lowering CPU (lowering +
    cache write, measured by the backend with process_time; compile-only, so nothing is simulated or run) and
    its CPU per instruction (goal: flat across sizes, i.e. lowering linear in graph size). A 2-image 32x32
    warm-up (first-use imports) is not printed."""
    import torch

    from nprof.compiler import STATS, CompileCache

    for side, batch in ((32, 2), *which):
        torch.manual_seed(0)
        model = _resnet18()
        x, y = _images(batch, 1000, side)()
        STATS.reset()
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="nprof", options={"compile_only": True})
        torch.nn.functional.cross_entropy(compiled(x), y).backward()
        if (side, batch) == (32, 2):
            continue  # the warm-up
        kinds = {m.path.name: (m.manifest["kind"], m.manifest["instructions"]) for m in CompileCache().modules()}
        for module, cpu in STATS.compile_cpu_seconds:
            kind, n = kinds.get(module, ("?", 0))
            print(f"sizes: resnet18 {side}x{side} batch {batch} {kind:<3}: {n:6d} instructions, lowering "
                  f"{cpu:6.2f} s CPU = {cpu / max(n, 1) * 1e6:4.0f} us each (goal: flat)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resnet18", action="store_true", help="also the full resnet18 widths, batch 8")
    parser.add_argument("--scaling", action="store_true", help="only the lowering-vs-graph-size check")
    parser.add_argument("--sizes", action="store_true", help="only resnet18's lowering CPU per instruction by size")
    parser.add_argument("--only", default="",
                        help="comma-separated subset of mlp,resnet,gpt,mobilenet,resnext,resnet18,resnet18_224")
    parser.add_argument("--no-fresh", action="store_true", help="skip the first steps in new processes")
    parser.add_argument("--decomposed", action="store_true",
                        help="depthwise convolutions by their decomposition, not kernels.conv_depthwise (before)")
    parser.add_argument("--first-step", default="", help=argparse.SUPPRESS)  # a fresh process of fresh_processes
    parser.add_argument("--backend", default="nprof", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.decomposed:
        from nprof.compiler import grouped_conv

        grouped_conv.KERNEL = False
    if args.first_step:
        os.environ.setdefault("NPROF_NO_PROGRESS", "1")
        first_step(args.first_step, args.backend)
        return
    os.environ["NPROF_CACHE"] = tempfile.mkdtemp(prefix="nprof-bench-cache-")
    os.environ.setdefault("NPROF_NO_PROGRESS", "1")
    import torch

    import nprof.compiler.lowerings
    import nprof.device
    import nprof.program.file  # noqa: F401

    print(jit_line())
    if args.scaling:
        scaling()
        return
    if args.sizes:
        sizes()
        return
    chosen = set(args.only.split(",")) if args.only else {"mlp", "resnet", "gpt"}
    if args.resnet18:
        chosen.add("resnet18")
    for name in MODELS:
        if name in chosen:
            label, make_model, make_batch, loss_name = MODELS[name]()
            torch.manual_seed(0)
            bench(label, make_model(), make_batch, loss_name)
            if not args.no_fresh:
                fresh_processes(name, ("--decomposed",) if args.decomposed else ())


def _mlp() -> tuple[str, Callable[[], object], Callable[[], tuple[object, object]], str]:
    mlp = _example("mnist_mlp")
    return "MNIST MLP 784-128-64-10, batch 32 (seed 000)", mlp.MLP, lambda: mlp.synthetic_mnist(32), "nll_loss"


def _images(batch: int, classes: int, size: int = 32) -> Callable[[], tuple[object, object]]:
    import torch

    return lambda: (torch.randn(batch, 3, size, size), torch.randint(0, classes, (batch,)))


MODELS: dict[str, Callable[[], tuple[str, Callable[[], object], Callable[[], tuple[object, object]], str]]] = {
    "mlp": _mlp,
    "resnet": lambda: ("resnet18-shaped CNN, widths 16..128, batch 4, 32x32", lambda: _resnet(16), _images(4, 10),
                       "cross_entropy"),
    "resnet18": lambda: ("resnet18 (torchvision's layout, 1000 classes), batch 8, 32x32", _resnet18,
                         _images(8, 1000), "cross_entropy"),
    "resnet18_224": lambda: ("resnet18 (torchvision's layout, 1000 classes), batch 1, 224x224", _resnet18,
                             _images(1, 1000, 224), "cross_entropy"),
    "mobilenet": lambda: ("MobileNetV2-style CNN (96-channel depthwise 3x3 at 32x32 and stride 2), batch 8, 32x32",
                          _mobilenet, _images(8, 10), "cross_entropy"),
    "resnext": lambda: ("ResNeXt-style CNN (3x3 conv of 8 groups of 8 channels at 32x32), batch 8, 32x32",
                        _resnext, _images(8, 10), "cross_entropy"),
    "gpt": lambda: ("nanoGPT-shaped block (vocab 64, dim 64, 4 heads, T 32), batch 4", _gpt, _tokens,
                    "cross_entropy"),
}  # fmt: skip


def _tokens() -> tuple[object, object]:
    import torch

    return torch.randint(0, 64, (4, 32)), torch.randint(0, 64, (4 * 32,))


if __name__ == "__main__":
    main()
