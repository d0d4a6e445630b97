"""`simulate`: run a Program on the virtual NeuronCore; outputs, latencies and a Profile.

Contract of `simulate(program, inputs=None, *, preset=None, numerics=True,
executions=1, profile_nth=None, rank=0, world_size=1, ignore_exec_errors=False)`:

* `preset`: a name ("trn1"/"trn2"), a `Preset`, or None for the program's own.
* Inputs are checked against the program's input tensors: an unknown name or a
  wrong shape raises `NprofError` naming the tensor and the expected
  shape/dtype. Dtypes convert silently within a kind — any float array to a
  float tensor (rounded to nearest even, e.g. float64 -> float32 -> bfloat16),
  integers to an integer tensor when every value fits, integers to a float
  tensor; anything else (float -> int, bool, complex) is an error. A missing
  input runs on zeros with a warning that results may be inf/NaN.
* Numerics run every instruction in program order on real numpy buffers
  (`device.memory`, `device.numerics`); `outputs` holds every output tensor in
  its declared shape and dtype. An out-of-bounds or malformed instruction
  raises `NprofError`; with `ignore_exec_errors=True` it is skipped and
  reported in `warnings`. Outputs containing NaN/inf are an error unless
  `ignore_exec_errors` is set or some input was missing (zero inputs often
  produce them), in which case they are a warning; `allow_nonfinite=True` (a compiled torch graph, where
  inf/NaN are values like any other, e.g. a -inf attention mask) makes them a warning too. `numerics=False` (timing
  only) skips all of that: `outputs` is empty.
* Timing (`device.schedule`) does not depend on data, and the device keeps no
  state between executions (no caches), so every execution takes the same
  time: `latencies_ns` repeats it `executions` times and the profile shows
  execution `profile_nth` (1-based, default the last; earlier ones are warm-up).
* `world_size > 1`: `world_size` workers run the program on the same inputs
  (`device.workers.simulate_workers`, collectives across them) and the result
  is worker `rank`'s.
* Peak FLOPs in the profile: the preset's FP32 peak when every MATMUL has an
  FP32 operand, its FP8 peak when every MATMUL is FP8 x FP8, else BF16.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from nprof.arch import cost
from nprof.arch.presets import Preset, get_preset
from nprof.device import numerics as num
from nprof.device.cores import check_preset_runs
from nprof.device.indirect import IndirectIndexError
from nprof.device.memory import AccessError, Memory, convert, is_int, numpy_dtype
from nprof.device.plan import plan_for
from nprof.device.record import build_tables
from nprof.device.schedule import schedule
from nprof.errors import DeviceIndexError, NprofError
from nprof.gcpause import gc_paused
from nprof.profile import Profile, ProfileInfo, TensorInfo
from nprof.program.model import Program, TensorDecl
from nprof.progress import progress

ZERO_INPUTS_WARNING = "results may be inf/NaN"


@dataclass(frozen=True)
class SimResult:
    """What one `simulate` call produced."""

    outputs: dict[str, np.ndarray]  # every output tensor (empty when numerics=False)
    profile: Profile  # the profiled execution
    latencies_ns: tuple[int, ...]  # device time of every execution, in ns
    warnings: tuple[str, ...]  # one line each: missing inputs, NaN/inf outputs, skipped instructions


def one_blas_thread() -> AbstractContextManager[object]:
    """A context limiting BLAS to one thread (the simulator's numerics run one instruction at a time)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def check_input(decl: TensorDecl, value: object) -> np.ndarray:
    """`value` as an array of `decl`'s shape and dtype; NprofError naming the input when it cannot be."""
    arr = np.asarray(value)
    want = numpy_dtype(decl.dtype)
    what = f"input {decl.name!r} expects shape {tuple(decl.shape)} {decl.dtype}"
    if tuple(arr.shape) != tuple(decl.shape):
        if arr.size == decl.elements and arr.ndim <= 1 and len(decl.shape) <= 1:
            arr = arr.reshape(decl.shape)
        else:
            raise NprofError(f"{what}, got shape {tuple(arr.shape)} {arr.dtype}")
    if arr.dtype == want:
        return arr
    src_float = arr.dtype.kind == "f" or arr.dtype == numpy_dtype("bfloat16") or arr.dtype.name.startswith("float8")
    if not is_int(decl.dtype):
        if src_float or arr.dtype.kind in "iu":
            return convert(arr.astype(np.float64) if arr.dtype.kind in "iu" else arr, decl.dtype)
    elif arr.dtype.kind in "iu":
        info = np.iinfo(want)
        if arr.size == 0 or (int(arr.min()) >= info.min and int(arr.max()) <= info.max):
            return arr.astype(want)
        raise NprofError(f"{what}: values outside the {decl.dtype} range; fix the input")
    raise NprofError(f"{what}, got {arr.dtype}; convert the array to {decl.dtype}")


def prepare_inputs(program: Program, inputs: Mapping[str, object] | None) -> tuple[dict[str, np.ndarray], list[str]]:
    """Checked input arrays by name, and the names of missing inputs (zero-filled)."""
    decls = {t.name: t for t in program.inputs}
    given = dict(inputs or {})
    unknown = [name for name in given if name not in decls]
    if unknown:
        names = ", ".join(decls) or "(none)"
        raise NprofError(f"program {program.name!r} has no input {unknown[0]!r}; its inputs are: {names}")
    checked = {name: check_input(decls[name], value) for name, value in given.items()}
    missing = [name for name in decls if name not in checked]
    return checked, missing


def _peak(program: Program, preset: Preset) -> tuple[float, str]:
    """The preset's peak for the program's MATMULs (`Plan.matmul_dtype`) and that dtype's name."""
    kind = plan_for(program, preset).matmul_dtype
    return preset.peak("float8_e4m3" if kind == "float8" else kind), kind


def _run_numerics(program: Program, mem: Memory, ignore_exec_errors: bool, warnings: list[str]) -> None:
    skipped = 0
    n = len(program.instructions)
    handlers = num.HANDLERS
    # Tiles are small: multi-threaded BLAS only adds contention, so numerics run single-threaded.
    with progress(n, f"simulating {program.name}") as bar, np.errstate(all="ignore"), one_blas_thread():
        for i, ins in enumerate(program.instructions):
            try:
                handlers[ins.opcode](ins, mem)  # = num.execute, inside one errstate for the whole run
            except (AccessError, ValueError, IndexError, KeyError, TypeError) as exc:
                where = f"instruction {i} ({ins.opcode.value}{', ' + ins.source if ins.source else ''})"
                if not ignore_exec_errors:
                    if isinstance(exc, IndirectIndexError):  # a runtime index: the message says how to fix it
                        err = DeviceIndexError(f"{ins.source or where}: {exc}")
                        err.nki_message = exc.nki_message
                        raise err from None
                    raise NprofError(
                        f"execution error in {where}: {exc}; fix the program or pass --ignore-exec-errors"
                    ) from exc
                skipped += 1
                if skipped <= 5:
                    warnings.append(f"execution error in {where} skipped: {exc}")
            if i % 4096 == 4095:
                bar.advance(4096)
    if skipped > 5:
        warnings.append(f"{skipped - 5} more instructions with execution errors skipped")


def simulate(
    program: Program,
    inputs: Mapping[str, np.ndarray] | None = None,
    *,
    preset: str | Preset | None = None,
    numerics: bool = True,
    executions: int = 1,
    profile_nth: int | None = None,
    rank: int = 0,
    world_size: int = 1,
    ignore_exec_errors: bool = False,
    allow_nonfinite: bool = False,
) -> SimResult:
    """Run `program` on the virtual NeuronCore (see the module doc for the full contract)."""
    if not 0 <= rank < max(world_size, 1):
        raise NprofError(f"rank {rank} is out of range for world_size {world_size}")
    if world_size != 1:
        return _one_rank_of_job(program, inputs, preset, numerics, executions, rank, world_size, ignore_exec_errors)
    if executions < 1:
        raise NprofError(f"executions must be >= 1, got {executions}")
    nth = executions if profile_nth is None else profile_nth
    if not 1 <= nth <= executions:
        raise NprofError(f"profile_nth {nth} is outside the executions 1..{executions}")
    pre = get_preset(preset if preset is not None else program.preset)
    check_preset_runs(program, pre)
    if program.sbuf_bytes > pre.sbuf_partition_bytes or program.psum_bytes > pre.psum_partition_bytes:
        raise NprofError(
            f"program {program.name!r} needs {program.sbuf_bytes} B SBUF / {program.psum_bytes} B PSUM per "
            f"partition; preset {pre.name} has {pre.sbuf_partition_bytes} / {pre.psum_partition_bytes}"
        )
    warnings: list[str] = []
    checked, missing = prepare_inputs(program, inputs)
    if not numerics:
        pass  # timing does not depend on data: nothing to warn about
    elif missing and not checked:
        warnings.append(f"no inputs given: running on all-zero inputs; {ZERO_INPUTS_WARNING}")
    elif missing:
        warnings.append(f"inputs {', '.join(missing)} not given: running on zeros for them; {ZERO_INPUTS_WARNING}")

    with gc_paused():
        plan = plan_for(program, pre)
        timing = schedule(plan, program)
    outputs: dict[str, np.ndarray] = {}
    if numerics:
        outputs = _numerics(program, pre, checked, bool(missing) or allow_nonfinite, ignore_exec_errors, warnings)

    total = round(timing.makespan)
    with gc_paused():
        instructions, dma = build_tables(program, plan, timing, iteration=0)
    info = sim_profile_info(
        program,
        pre,
        mode="sim",
        rank=rank,
        world_size=world_size,
        total_time_ns=total,
        meta={"executions": str(executions), "profiled_execution": str(nth), "numerics": str(bool(numerics)).lower()},
    )
    profile = Profile.build(info, instructions=instructions, dma=dma)
    return SimResult(outputs, profile, (total,) * executions, tuple(warnings))


def sim_profile_info(
    program: Program,
    pre: Preset,
    *,
    mode: str,
    rank: int,
    world_size: int,
    total_time_ns: int,
    meta: Mapping[str, str],
    nc_idx: int = 0,
    nd_idx: int = 0,
) -> ProfileInfo:
    """The ProfileInfo of a simulated run of `program` on `pre` (single- and multi-worker).

    `mode` goes into the producer ("sim", "sim, multi-worker"); `meta` is added
    after the program's own metadata, then the model that produced the times
    (`arch.cost.model_meta`: cost-model version and fitted constants).
    """
    peak, peak_dtype = _peak(program, pre)
    return ProfileInfo(
        device="virtual-neuroncore",
        name=program.name,
        producer=f"{ProfileInfo.producer} ({mode})",
        preset=pre.name,
        device_name=f"virtual {pre.core} ({pre.name})",
        rank=rank,
        world_size=world_size,
        nc_idx=nc_idx,
        nd_idx=nd_idx,
        total_time_ns=total_time_ns,
        peak_flops=peak,
        hbm_bandwidth=pre.hbm_bandwidth,
        peaks_source=f"{pre.peaks_source}; peak of {peak_dtype} matmuls",
        tensors=tuple(
            TensorInfo(t.name, tuple(t.shape), t.dtype, t.kind) for t in program.tensors if t.kind != "internal"
        ),
        meta={**{str(k): str(v) for k, v in program.meta.items()}, **meta, **cost.model_meta(pre)},
    )


def _one_rank_of_job(
    program: Program,
    inputs: Mapping[str, np.ndarray] | None,
    preset: str | Preset | None,
    numerics: bool,
    executions: int,
    rank: int,
    world_size: int,
    ignore_exec_errors: bool,
) -> SimResult:
    """`world_size` workers run `program` on the same inputs; the result of worker `rank`."""
    from nprof.device.workers import simulate_workers  # the multi-worker runner builds on this module

    job = simulate_workers(
        program,
        None if inputs is None else dict(inputs),
        world_size=world_size,
        preset=preset,
        numerics=numerics,
        profile_ranks=[rank],
        executions=executions,
        ignore_exec_errors=ignore_exec_errors,
    )
    return job.results[rank]


def _numerics(
    program: Program,
    pre: Preset,
    checked: dict[str, np.ndarray],
    zero_inputs: bool,
    ignore_exec_errors: bool,
    warnings: list[str],
) -> dict[str, np.ndarray]:
    mem = Memory(program, pre)
    for name, value in checked.items():
        mem.load(name, value)
    for t in program.tensors:
        if t.kind != "weight":
            continue
        const = program.constants.get(t.name)
        if const is None:
            warnings.append(f"weight {t.name!r} has no value in the program: running on zeros")
            continue
        mem.load(t.name, check_input(t, const))
    _run_numerics(program, mem, ignore_exec_errors, warnings)
    return collect_outputs(program, mem, zero_inputs or ignore_exec_errors, warnings)


def collect_outputs(
    program: Program, mem: Memory, lenient: bool, warnings: list[str], label: str = ""
) -> dict[str, np.ndarray]:
    """Copy `program`'s outputs out of `mem`, checking float outputs for NaN/inf.

    Non-finite values raise NprofError (an execution error), or, when `lenient`,
    append a warning to `warnings`; `label` prefixes the message (e.g. "rank 3: ").
    """
    outputs: dict[str, np.ndarray] = {}
    for t in program.outputs:
        out = mem.hbm[t.name].reshape(t.shape).copy()
        outputs[t.name] = out
        if out.dtype.kind in "iu":
            continue
        bad = ~np.isfinite(out.astype(np.float32))
        if bad.any():
            text = f"{label}output {t.name!r} has {int(bad.sum())} NaN/inf values of {out.size}"
            if not lenient:
                raise NprofError(f"execution error: {text}; check the inputs or pass --ignore-exec-errors")
            warnings.append(text)
    return outputs
