"""Benchmark: simulated instructions per second of the virtual NeuronCore.

Builds synthetic programs of 10^4, 10^5 and 10^6 instructions (a tiled
matmul + activation + elementwise pipeline: DMA loads on 16 queues, LDWEIGHTS/
MATMUL into PSUM, ACTIVATE, TENSOR_TENSOR, DMA stores, each depending on its
producers) and times `nprof.device.simulate` in timing-only and numeric modes.
Prints one line per (size, mode); the goal is >= 1,000,000 instructions/s
timing-only, growing linearly. Timing-only runs twice: on a program that
carries its instructions as the program file's Arrow table ("columnar": a
program loaded from a file or made by a columnar producer; the table is made
once, outside the timing) and on `Instruction` objects only (the simulator
first turns them into columns). Also times the NKI exp example when
`examples/` provides one.

Then a real compiled graph (`--graph resnet18`, bench/compile.py's model at `--image`x`--image`, batch 8):
one training step through `torch.compile(backend="nprof")` lowers its forward and backward graphs, and for
each the bench times, on the lowered Program of Instruction objects, what the backend does after lowering up
to the simulated timing: "before", the program file's table written from the objects (`instruction_table`,
per instruction) then `simulate(numerics=False)` reading that table; "after", `with_columns` (one pass over
the objects: the plan's columns and the file's table) then `simulate`; and "as lowered": the program as the
backend receives it, carrying the instruction columns the compiler's list scheduler made (a permutation of
columns made once, `nprof.device.columns_order`): `with_columns` (the table from those columns) then
`simulate`, building the plan from the columns, and with the plan the list scheduler left too (what the backend
runs: simulate only schedules and writes the profile tables). numba is loaded there as in a compile process (the
compiler uses it), so the compiled scheduler core runs. CPU seconds, best of `--repeat`.

Usage: .venv/bin/python bench/sim_speed.py [--sizes 10000,100000,1000000] [--numeric-max 100000]
                                            [--repeat 3] [--rows 64] [--graph resnet18|none] [--image 64]
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from nprof.arch.isa import Access, Engine, Instruction, Opcode, Space, attrs
from nprof.device import simulate
from nprof.device.schedule import COMPILED_FROM, compiled_core
from nprof.program.model import Program, TensorDecl

P, F, K = 128, 128, 128  # tile: partitions x free elements


def _sb(name: str, slot: int, dtype: str = "bfloat16", n: int = F) -> Access:
    return Access(Space.SBUF, name, dtype, slot * n * 4, P, ((1, n),))


def _fresh(a: Access) -> Access:
    return Access(a.space, a.tensor, a.dtype, a.offset, a.partitions, a.free, a.partition_start, a.partition_stride)


def synthetic(n: int, rows: int = 64) -> Program:
    """About `n` instructions of a dependent tile pipeline (9 instructions per tile) over `rows` distinct HBM
    tiles (0: every tile its own, as a kernel walking a large tensor: nearly every DMA a distinct signature)."""
    tiles = max(1, n // 9)
    rows = rows or tiles
    a = TensorDecl("a", (rows * P, F), "bfloat16", "input")
    w = TensorDecl("w", (K, F), "bfloat16", "weight")
    out = TensorDecl("out", (rows * P, F), "bfloat16", "output")
    hb = [Access(Space.HBM, "a", "bfloat16", r * P * F, P, ((1, F),), 0, F) for r in range(rows)]
    ho = [Access(Space.HBM, "out", "bfloat16", r * P * F, P, ((1, F),), 0, F) for r in range(rows)]
    wa = Access(Space.HBM, "w", "bfloat16", 0, K, ((1, F),), 0, F)
    ws = Access(Space.SBUF, "w_sb", "bfloat16", 60000, K, ((1, F),))
    ps = [Access(Space.PSUM, "acc", "float32", b * 2048, P, ((1, F),)) for b in range(8)]
    instrs: list[Instruction] = [Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, outs=(ws,), ins=(wa,), queue=0)]
    last_store = [0] * 8
    for t in range(tiles):
        b = t % 8
        x, y, z = _sb("x", b), _sb("y", b + 8), _sb("z", b + 16)
        i0 = len(instrs)
        instrs += [
            Instruction(Engine.DMA, Opcode.DMA_DIRECT2D, outs=(x,), ins=(hb[t % rows],), queue=t % 16),
            Instruction(Engine.TENSOR, Opcode.LDWEIGHTS, ins=(ws,), deps=(0,)),
            Instruction(
                Engine.TENSOR,
                Opcode.MATMUL,
                outs=(ps[b],),
                ins=(ws, x),
                attrs=attrs(accumulate=False),
                deps=(i0, i0 + 1, last_store[b]),
            ),
            Instruction(
                Engine.SCALAR, Opcode.ACTIVATE, outs=(y,), ins=(ps[b],), attrs=attrs(func="gelu"), deps=(i0 + 2,)
            ),
            Instruction(
                Engine.VECTOR, Opcode.TENSOR_TENSOR, outs=(z,), ins=(y, x), attrs=attrs(op="add"), deps=(i0 + 3,)
            ),
            Instruction(
                Engine.VECTOR,
                Opcode.TENSOR_SCALAR,
                outs=(z,),
                ins=(z,),
                attrs=attrs(op0="multiply", operand0=0.5),
                deps=(i0 + 4,),
            ),
            Instruction(Engine.GPSIMD, Opcode.TENSOR_COPY, outs=(y,), ins=(z,), deps=(i0 + 5,)),
            Instruction(Engine.SCALAR, Opcode.ACTIVATE, outs=(z,), ins=(y,), attrs=attrs(func="tanh"), deps=(i0 + 6,)),
            Instruction(
                Engine.DMA, Opcode.DMA_DIRECT2D, outs=(ho[t % rows],), ins=(z,), queue=(t + 8) % 16, deps=(i0 + 7,)
            ),
        ]
        last_store[b] = i0 + 8
    # like the NKI tracer, give every operand of every instruction its own Access object (equal values repeat)
    instrs = [replace(i, ins=tuple(map(_fresh, i.ins)), outs=tuple(map(_fresh, i.outs))) for i in instrs]
    rng = np.random.default_rng(0)
    import ml_dtypes

    weights = {"w": rng.standard_normal((K, F)).astype(ml_dtypes.bfloat16)}
    return Program("synthetic", "trn1", (a, w, out), tuple(instrs), constants=weights)


def _instruction_table(program: Program) -> object:
    """The program file's Arrow instruction table of `program` (what a loaded or columnar program carries)."""
    try:
        from nprof.program.table import instruction_table  # type: ignore[import-not-found]
    except ImportError:  # older trees: the table the program file stores
        from nprof.container import open_container
        from nprof.program.file import save_program

        with tempfile.TemporaryDirectory() as tmp:
            box = open_container(save_program(program, Path(tmp) / "p.neff"), "nprof-program", 1, "program", str)
            try:
                return box.read_table("instructions")
            finally:
                box.close()
    return instruction_table(replace(program))


def _copy(program: Program, table: object | None) -> Program:
    """A fresh copy of `program` (no cached plan), carrying `table` as its instruction table when given."""
    program = replace(program, instructions=tuple(program.instructions))
    if table is not None:
        object.__setattr__(program, "_instruction_table", table)  # as nprof.program.table.attach_table does
    return program


def _time(program: Program, numerics: bool, table: object | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one simulate call on a fresh copy of the program (no cached plan)."""
    program = _copy(program, table)
    gc.collect()
    w0, c0 = time.perf_counter(), time.process_time()
    simulate(program, numerics=numerics)
    return time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--numeric-max", type=int, default=100000, help="largest size to run with numerics")
    ap.add_argument("--rows", type=int, default=64, help="distinct HBM tiles (0: every tile its own)")
    ap.add_argument("--repeat", type=int, default=3, help="timing-only runs per size (the fastest is shown)")
    ap.add_argument("--graph", default="resnet18", choices=("resnet18", "none"), help="a real compiled graph")
    ap.add_argument("--image", type=int, default=64, help="image side of the compiled resnet18 (batch 8)")
    args = ap.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall figures suffer when the machine is busy)"
    )
    simulate(synthetic(100))  # warm-up: one-time imports (pyarrow's pandas shim, threadpoolctl) are not simulation
    c0 = time.process_time()
    core = compiled_core(COMPILED_FROM)  # the compiled scheduler core: numba + its cached machine code, once
    simulate(synthetic(100), numerics=False)
    state = "loaded" if core is not None else "not available (numba missing): pure-Python passes"
    print(f"compiled scheduler core {state}: {time.process_time() - c0:.2f} s CPU once per process")
    print("goal: >= 1,000,000 instr/s timing-only, linear in size")
    for n in (int(s) for s in args.sizes.split(",")):
        program = synthetic(n, args.rows)
        count = len(program.instructions)
        table = _instruction_table(program)
        runs = (("timing-only columnar    ", False, table), ("timing-only Instructions", False, None),
                ("numeric                 ", True, None))  # fmt: skip
        for mode, numerics, carried in runs:
            if numerics and count > args.numeric_max:
                print(f"{count:>9} instructions  {mode}  skipped (--numeric-max {args.numeric_max})")
                continue
            wall, cpu = min(_time(program, numerics, carried) for _ in range(1 if numerics else args.repeat))
            print(
                f"{count:>9} instructions  {mode}  {wall:8.3f} s wall {count / wall:>11,.0f} instr/s"
                f"  ({cpu:.3f} s CPU, {count / cpu:,.0f} instr/s)"
            )
            if not numerics:
                plan_cpu = _plan_cpu(program, carried)
                share = 100 * plan_cpu / cpu
                print(f"{'':>9}   of which plan building (device/plan.py) {plan_cpu:.3f} s CPU ({share:.0f}%)")
    _exp_example()
    if args.graph != "none":
        _compiled_graphs(args.image, args.repeat)


def _plan_cpu(program: Program, table: object | None) -> float:
    """CPU seconds of `build_plan` alone on a fresh copy of the program."""
    from nprof.arch.presets import get_preset
    from nprof.device.plan import build_plan

    program = _copy(program, table)
    gc.collect()
    c0 = time.process_time()
    build_plan(program, get_preset(program.preset))
    return time.process_time() - c0


def _lowered_programs(image: int) -> list[Program]:
    """The Programs (Instruction objects, as lowered) of one resnet18 training step through torch.compile."""
    import importlib.util

    import torch

    import nprof.compiler.backend as backend

    try:
        from nprof.device.plan import share_derived
    except ImportError:  # older trees: the lowering leaves neither
        share_derived = None

    spec = importlib.util.spec_from_file_location("bench_compile", Path(__file__).resolve().parent / "compile.py")
    assert spec is not None and spec.loader is not None
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    lowered: list[Program] = []
    lower = backend.lower_graph

    def keep(gm: object, plan: object) -> object:  # the lowering's own result, before the backend uses it
        program, slots = lower(gm, plan)
        copy = replace(program)
        if share_derived is not None:  # the columns and plan the lowering left on it
            share_derived(program, copy)
        lowered.append(copy)
        return program, slots

    os.environ["NPROF_CACHE"] = tempfile.mkdtemp(prefix="nprof-sim-speed-")
    os.environ.setdefault("NPROF_NO_PROGRESS", "1")
    backend.lower_graph = keep  # type: ignore[assignment]
    try:
        torch.manual_seed(0)
        model = models._resnet18()
        x, y = torch.randn(8, 3, image, image), torch.randint(0, 1000, (8,))
        torch.nn.functional.cross_entropy(torch.compile(model, backend="nprof")(x), y).backward()
    finally:
        backend.lower_graph = lower
    return lowered


def _compiled_graphs(image: int, repeat: int) -> None:
    """Before/after CPU of (table or columns + timing-only simulate) per lowered graph (see module doc)."""
    from nprof.device.columns import with_columns
    from nprof.program.table import instruction_table

    programs = _lowered_programs(image)

    def before(p: Program) -> None:
        instruction_table(p)
        simulate(p, numerics=False)

    def after(p: Program) -> None:
        simulate(with_columns(p), numerics=False)

    print(f"compiled resnet18 (bench/compile.py's layout), batch 8, {image}x{image}: each lowered graph from its "
          "Instruction objects to its simulated timing (CPU, best of runs; goal >= 1,000,000 instr/s)")  # fmt: skip
    for p in programs:
        n = len(p.instructions)
        deps = sum(len(i.deps) for i in p.instructions)
        cpu = {label: _best_cpu(p, path, repeat) for label, path in (("before", before), ("after", after))}
        old, new = cpu["before"], cpu["after"]
        print(f"  {p.name[-2:]} {n:>7} instructions ({deps / max(n, 1):.0f} deps each): before {old:.3f} s CPU "
              f"{n / old:>9,.0f} instr/s; after {new:.3f} s CPU {n / new:>9,.0f} instr/s")  # fmt: skip
        _as_lowered(p, repeat)


def _best_cpu(p: Program, path: Callable[[Program], None], repeat: int, carry: str = "") -> float:
    """Least CPU seconds of `path` on a fresh copy of `p` (no table, plan or columns cached; `carry`: "columns"
    or "columns+plan", what the lowering left on `p` is given to the copy)."""
    runs = []
    for _ in range(repeat):
        copy = replace(p)
        if carry == "columns":
            from nprof.device.columns import attach_columns, attached_columns

            cols = attached_columns(p)
            if cols is not None:
                attach_columns(copy, cols)
        elif carry == "columns+plan":
            from nprof.device.plan import share_derived

            share_derived(p, copy)
        gc.collect()
        c0 = time.process_time()
        path(copy)
        runs.append(time.process_time() - c0)
    return min(runs)


def _as_lowered(p: Program, repeat: int) -> None:
    """The program as the backend gets it from the lowering: its columns attached by the compiler's list
    scheduler (`with_columns` then builds only the table), with the plan it left (simulate only schedules and
    writes the tables) and without (simulate builds the plan from the columns)."""
    try:
        from nprof.device.columns import attached_columns, with_columns
    except ImportError:
        return
    if attached_columns(p) is None:
        print("     as lowered: no columns attached by the lowering (this tree converts the objects)")
        return
    n = len(p.instructions)

    def path(q: Program) -> None:
        simulate(with_columns(q), numerics=False)

    cols, plan = _best_cpu(p, path, repeat, "columns"), _best_cpu(p, path, repeat, "columns+plan")
    print(f"     as lowered (the compiler's columns attached): table + simulate {cols:.3f} s CPU {n / cols:>9,.0f} "
          f"instr/s; with the list scheduler's plan too (what the backend runs) {plan:.3f} s CPU "
          f"{n / plan:>9,.0f} instr/s")  # fmt: skip


def _exp_example() -> None:
    """Wall time of `python examples/nki/exp_kernel.py` (trace + benchmark + save), run in a scratch dir."""
    script = Path(__file__).resolve().parent.parent / "examples" / "nki" / "exp_kernel.py"
    if not script.exists():
        print("exp-kernel example: examples/nki/exp_kernel.py not available; skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, str(script)], cwd=tmp, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t0
    status = "ok" if done.returncode == 0 else f"failed (exit {done.returncode}): {done.stderr.strip()[-200:]}"
    print(f"exp-kernel example: {wall:.3f} s wall for the whole script (python start-up included), {status}")


if __name__ == "__main__":
    main()
