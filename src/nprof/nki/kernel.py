"""Running kernels: tracing a Python kernel with numpy arguments into a Program and simulating it.

`Kernel` wraps a kernel function. `Kernel.trace(*args)` declares one HBM
input per array argument (named after the kernel's parameters; `TensorType`
placeholders from `nprof.nki.typing` stand for random inputs), passes other
arguments through as Python values, runs the kernel under a
`ProgramBuilder` and marks the HBM tensors it returns as outputs. Programs are
cached per argument signature (shapes, dtypes, non-array values).
`Kernel.run(...)` simulates on the virtual device and returns the outputs as
numpy arrays in the structure the kernel returned (a tensor, or a
tuple/list/dict of them). Array arguments the kernel writes (NKI's older
output-argument style) become Program outputs and are copied back into the
caller's arrays; reading such an argument before writing it is an error (its
initial value would be lost). Called while another kernel is being traced, or
with a ProgramBuilder's tensors, a `Kernel` records into that builder instead.
`kernel[grid]` is an SPMD launch (see `ProgramBuilder.call_spmd`).
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from nprof.arch.isa import Space
from nprof.errors import DeviceIndexError, NprofError
from nprof.nki import trace as _trace
from nprof.nki.alloc import OverCapacity
from nprof.nki.dtypes import NUMPY, dtype_name
from nprof.nki.tensor import NkiTensor
from nprof.nki.typing import TensorType
from nprof.program.model import Program

RANDOM_SEED = 0  # seed of the random inputs standing in for `tensor[[...], dtype]` placeholders


@dataclass(frozen=True)
class Traced:
    """A traced kernel: its Program, the HBM input names in argument order, and the output structure."""

    program: Program
    inputs: Mapping[str, np.ndarray]  # input name -> array (converted to the declared dtype; see `Inputs`)
    structure: Any  # the kernel's return value with each HBM tensor replaced by its name
    inplace: tuple[str, ...] = ()  # array arguments the kernel writes (outputs passed as arguments)
    originals: dict[str, Any] | None = None  # the caller's objects for those arguments


class Inputs(Mapping[str, np.ndarray]):
    """A kernel's input arrays by name, converted to their declared dtypes. Random inputs (`TensorType`
    placeholders) are drawn on first access, all of them at once in argument order from one generator seeded
    with RANDOM_SEED, so the values do not depend on when (or whether) they are read; a timing-only run never
    draws them."""

    def __init__(self, given: dict[str, Any], specs: dict[str, tuple[tuple[int, ...], str]]) -> None:
        self._given, self._specs = given, specs
        self._names = tuple(specs)
        self._drawn: dict[str, np.ndarray] = {}  # shared with the views `without` makes

    def without(self, names: tuple[str, ...]) -> Inputs:
        """The same inputs minus `names` (sharing the drawn arrays)."""
        out = Inputs(self._given, self._specs)
        out._names = tuple(n for n in self._names if n not in names)
        out._drawn = self._drawn
        return out

    def _draw(self) -> dict[str, np.ndarray]:
        if not self._drawn and self._given:
            rng = np.random.default_rng(RANDOM_SEED)
            for label, value in self._given.items():
                arr = value.random(rng) if isinstance(value, TensorType) else value
                self._drawn[label] = np.asarray(arr).astype(NUMPY[self._specs[label][1]], copy=False)
        return self._drawn

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        return self._draw()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _flat_arguments(arguments: dict[str, Any], params: Any) -> list[tuple[str, Any]]:
    """(input name, value) of every bound argument, *args as name0, name1..., **kwargs by their keys."""
    out: list[tuple[str, Any]] = []
    for name, value in arguments.items():
        kind = params[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            out.extend((f"{name}{i}", v) for i, v in enumerate(value))
        elif kind is inspect.Parameter.VAR_KEYWORD:
            out.extend(value.items())
        else:
            out.append((name, value))
    return out


def _as_array(value: Any) -> np.ndarray | None:
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        return value.detach().cpu().float().numpy() if "bfloat16" in str(value.dtype) else value.detach().cpu().numpy()
    return None


def _declare_dtype(arr: np.ndarray) -> str:
    if arr.dtype == np.float64:
        return "float32"
    if arr.dtype == np.int64:
        return "int32"
    if arr.dtype == np.bool_:
        return "uint8"
    try:
        return dtype_name(arr.dtype)
    except ValueError as err:
        raise NprofError(f"kernel argument of dtype {arr.dtype}: {err}") from None


class Kernel:
    """A kernel function plus how to run it (see module doc)."""

    def __init__(self, func: Callable[..., Any], *, preset: str = "trn1") -> None:
        self.func = func
        self.preset = preset
        self.__wrapped_kernel__ = func
        self._cache: dict[Any, Traced] = {}
        self.grid: tuple[int, ...] = ()
        self._launches: dict[tuple[int, ...], Kernel] = {}
        functools.update_wrapper(self, func)
        # like NKI's kernel objects, not a plain function to introspection: pytest must not collect a kernel
        # named test_* as a test (its parameters are no fixtures); the signature stays the kernel's
        delattr(self, "__wrapped__")  # set by update_wrapper
        self.__signature__ = inspect.signature(func)

    # -- tracing ------------------------------------------------------------------------------
    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> inspect.BoundArguments:
        try:
            return inspect.signature(self.func).bind(*args, **kwargs)
        except TypeError as err:
            raise NprofError(f"kernel {self.func.__name__}: {err}") from None

    def trace(self, *args: Any, **kwargs: Any) -> Traced:
        bound = self._bind(args, kwargs)
        given: dict[str, np.ndarray | TensorType] = {}
        specs: dict[str, tuple[tuple[int, ...], str]] = {}  # input name -> (shape, declared dtype)
        key: list[Any] = []
        params = inspect.signature(self.func).parameters
        for label, item in _flat_arguments(bound.arguments, params):
            arr = item if isinstance(item, TensorType) else _as_array(item)
            if arr is not None:
                dt = _declare_dtype(np.empty(0, NUMPY[arr.dtype]) if isinstance(arr, TensorType) else arr)
                given[label], specs[label] = arr, (tuple(arr.shape), dt)
                key.append((label, tuple(arr.shape), dt))
            else:
                key.append((label, repr(item)))
        cache_key = tuple(key)
        cached = self._cache.get(cache_key)
        originals = _originals(bound.arguments, params)
        arrays = Inputs(given, specs)
        if cached is not None:
            return Traced(cached.program, arrays.without(cached.inplace), cached.structure, cached.inplace, originals)
        try:
            builder, result = self._record(args, kwargs, specs)
        except OverCapacity:  # scope lifetimes do not fit: allocate by liveness, as the compiler does
            probe, _ = self._record(args, kwargs, specs, virtual=True)
            builder, result = self._record(args, kwargs, specs, uses_total=probe.use_counts)
        structure = self._outputs(builder, result)
        inplace = self._inplace(builder, tuple(specs))
        traced = Traced(builder.build(), arrays.without(inplace), structure, inplace, originals)
        self._cache[cache_key] = traced
        return traced

    def _record(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        arrays: Mapping[str, tuple[tuple[int, ...], str]],
        *,
        virtual: bool = False,
        uses_total: dict[tuple[int, int], int] | None = None,
    ) -> tuple[Any, Any]:
        """Run the kernel into a new ProgramBuilder: (builder, kernel result). `virtual`: unbounded on-chip
        memory (a probe counting each tile's uses); `uses_total`: free each tile after its last use."""
        bound = self._bind(args, kwargs)
        params = inspect.signature(self.func).parameters
        builder = _trace.ProgramBuilder(self.func.__name__, self.preset)
        builder.plan_lifetimes(virtual=virtual, uses_total=uses_total)
        try:
            source_file = inspect.getsourcefile(self.func) or ""
        except TypeError:
            source_file = ""
        builder.meta.update(kernel=self.func.__qualname__, source_file=source_file)
        handles = {label: builder.hbm_tensor(label, shape, dt) for label, (shape, dt) in arrays.items()}
        for name, value in list(bound.arguments.items()):
            kind = params[name].kind
            if kind is inspect.Parameter.VAR_POSITIONAL:
                bound.arguments[name] = tuple(handles.get(f"{name}{i}", v) for i, v in enumerate(value))
            elif kind is inspect.Parameter.VAR_KEYWORD:
                bound.arguments[name] = {k: handles.get(k, v) for k, v in value.items()}
            elif name in handles:
                bound.arguments[name] = handles[name]
        func = _returning_hbm(self.func)
        if self.grid:
            return builder, builder.call_spmd(func, self.grid, *bound.args, **bound.kwargs)
        return builder, builder.call(func, *bound.args, **bound.kwargs)

    def _inplace(self, builder: _trace.ProgramBuilder, names: tuple[str, ...]) -> tuple[str, ...]:
        """Array arguments the kernel writes become outputs (NKI's older output-argument style)."""
        if not any(builder.hbm_written(n) for n in names):  # the common case: no instruction to scan
            return ()
        first_read: dict[str, int] = {}
        first_write: dict[str, int] = {}
        for i, ins in enumerate(builder.instructions):
            for acc in ins.ins:
                if acc.space is Space.HBM:
                    first_read.setdefault(acc.tensor, i)
            for acc in ins.outs:
                if acc.space is Space.HBM:
                    first_write.setdefault(acc.tensor, i)
        written = tuple(n for n in names if n in first_write)
        for name in written:
            if first_read.get(name, first_write[name]) < first_write[name]:
                raise NprofError(
                    f"kernel {self.func.__name__} reads its argument {name!r} and then writes it in place; "
                    "store the result into a new tensor (nl.ndarray(..., buffer=nl.shared_hbm)) and return it"
                )
            builder.tensors()[name].kind = "output"
        return written

    def _outputs(self, builder: _trace.ProgramBuilder, result: Any) -> Any:
        if result is None:
            return None
        if isinstance(result, NkiTensor):
            if result.space is not Space.HBM:
                raise NprofError(
                    f"kernel {self.func.__name__} returns an on-chip tile; return an HBM tensor "
                    "(nl.ndarray(..., buffer=nl.shared_hbm)) that the kernel stored into"
                )
            if result.base.kind == "input":  # type: ignore[union-attr]
                raise NprofError(f"kernel {self.func.__name__} returns its input {result.name!r}; return a new tensor")
            builder.mark_output(result)
            shape, base = tuple(result.shape), tuple(result.base.shape)
            if shape != base and int(np.prod(shape)) == int(np.prod(base)):  # `t.reshape(...)` returned
                return Reshaped(result.name, shape)
            return result.name
        if isinstance(result, tuple | list):
            return type(result)(self._outputs(builder, r) for r in result)
        if isinstance(result, dict):
            return {k: self._outputs(builder, v) for k, v in result.items()}
        raise NprofError(f"kernel {self.func.__name__} returned a {type(result).__name__}; return HBM tensors")

    # -- running ------------------------------------------------------------------------------
    def simulate(self, *args: Any, executions: int = 1, profile_nth: int | None = None, **kwargs: Any) -> Any:
        """Trace and simulate; returns (Traced, SimResult)."""
        from nprof.device import simulate

        traced = self.trace(*args, **kwargs)
        try:  # NaN/inf in an output is a value, as in NKI's simulator (nc_match_replace8(imm=-inf), exp overflow)
            result = simulate(traced.program, traced.inputs, executions=executions, profile_nth=profile_nth,
                              allow_nonfinite=True)  # fmt: skip
        except DeviceIndexError as err:
            raise nki_index_error(err) from err
        return traced, result

    def run(self, *args: Any, **kwargs: Any) -> Any:
        traced, result = self.simulate(*args, **kwargs)
        return finish(traced, result.outputs)

    def __getitem__(self, grid: Any) -> Kernel:
        """`kernel[grid]`: an SPMD launch over `grid` (an int or a tuple of ints), instances run in order."""
        key = tuple(int(g) for g in (grid if isinstance(grid, tuple | list) else (grid,)))
        launch = self._launches.get(key)
        if launch is None:  # same class and options (benchmark/profile settings), its own grid and caches
            launch = copy.copy(self)
            launch.grid, launch._cache, launch._launches = key, {}, {}
            self._launches[key] = launch
        return launch

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        builder = _trace._ACTIVE[-1] if _trace._ACTIVE else None
        if builder is None:
            handles = [a for a in (*args, *kwargs.values()) if isinstance(a, NkiTensor)]
            builder = handles[0].base.builder if handles else None  # a ProgramBuilder's tensors: record there
        if builder is not None:
            if self.grid:
                return builder.call_spmd(self.func, self.grid, *args, **kwargs)
            return builder.call(self.func, *args, **kwargs)
        return self.run(*args, **kwargs)


def nki_index_error(err: DeviceIndexError) -> IndexError:
    """What NKI's simulator raises for an out-of-bounds runtime index: a plain `IndexError` with its own line
    (AWS's tests assert `type(exc) == IndexError` and that message). nprof's line (the kernel's `file:line`, the
    fix) stays the cause and a note, so the traceback shows both; nprof's CLI still prints `err`, one line."""
    exc = IndexError(err.nki_message or str(err))
    exc.add_note(f"nprof: {err}")
    return exc


def _returning_hbm(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` whose returned on-chip tiles are stored into new HBM outputs before its tiles are freed: AWS's
    simulation-mode examples (range_select, dma_transpose) return SBUF tiles, which NKI's simulator hands back
    as arrays. One DMA each, and a warning: on a NeuronCore a kernel returns HBM tensors."""

    from nprof.nki import loop_returns

    inner = loop_returns.rewrite(func)  # what builder.call would run (returns inside loops, as NKI traces them)

    def run(*args: Any, **kwargs: Any) -> Any:
        return _spill(inner(*args, **kwargs), func)

    return run


def _spill(result: Any, func: Callable[..., Any]) -> Any:
    if isinstance(result, NkiTensor) and result.space is not Space.HBM:
        import warnings

        import nprof.nki.language as nl
        from nprof.nki.calls import NkiCompatWarning

        warnings.warn(f"kernel {func.__name__} returns the on-chip tile {result.name!r}: nprof stores it to a new HBM "
                      "output (one DMA) as NKI's simulator returns its values; on a NeuronCore return an HBM tensor",
                      NkiCompatWarning, stacklevel=4)  # fmt: skip
        out = nl.ndarray(result.shape, dtype=result.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=result)
        return out
    if isinstance(result, tuple | list):
        return type(result)(_spill(r, func) for r in result)
    if isinstance(result, dict):
        return {k: _spill(v, func) for k, v in result.items()}
    return result


def _originals(arguments: dict[str, Any], params: Any) -> dict[str, Any]:
    return dict(_flat_arguments(arguments, params))


def finish(traced: Traced, outputs: dict[str, np.ndarray]) -> Any:
    """Copy written arguments back into the caller's arrays; return the kernel's outputs in its structure."""
    for name in traced.inplace:
        target = (traced.originals or {}).get(name)
        if isinstance(target, np.ndarray) and target.flags.writeable and name in outputs:
            target[...] = outputs[name].astype(target.dtype) if target.dtype != outputs[name].dtype else outputs[name]
    _device_prints(traced, outputs)
    return unflatten(traced.structure, outputs)


def _device_prints(traced: Traced, outputs: dict[str, np.ndarray]) -> None:
    """Print the values `nl.device_print` captured, in kernel order (the user asked for this output)."""
    import json

    for name, prefix in json.loads(traced.program.meta.get("device_print", "[]")):
        if name in outputs:
            print(prefix, outputs[name])


@dataclass(frozen=True)
class Reshaped:
    """An output returned as a reshaped view of an HBM tensor (`out.reshape(shape)`): handed back in that shape,
    as NKI's simulator does."""

    name: str
    shape: tuple[int, ...]


def unflatten(structure: Any, outputs: dict[str, np.ndarray]) -> Any:
    if structure is None:
        return None
    if isinstance(structure, str):
        return outputs[structure]
    if isinstance(structure, Reshaped):
        return outputs[structure.name].reshape(structure.shape)
    if isinstance(structure, tuple | list):
        return type(structure)(unflatten(s, outputs) for s in structure)
    return {k: unflatten(v, outputs) for k, v in structure.items()}
