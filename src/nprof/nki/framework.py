"""`nki.FrameworkKernel` (Neuron 2.26 API): the base class a framework subclasses to describe an NKI kernel call.

AWS's 2.26 reference (nki.FrameworkKernel): a framework (PyTorch, JAX...)
inherits the class and implements `is_framework_tensor(t)`,
`map_framework_tensor(t)` -> (shape, framework dtype) and
`translate_to_neuron_dtype(dtype)`; `dump_config(*args, **kwargs)` then returns
"the `backend_config`, the list of input names and the list of the output
name" of the XLA custom call that runs the kernel, cached by argument shapes
when `enable_cache` is true. The reference's example constructs it as
`PyTorchFrameworkKernel(func_name=..., func=..., grid=(16, 8))`.

nprof has no Neuron compiler, so its `backend_config` is nprof's own: a JSON
string naming the kernel, its launch grid and the traced Program (input and
output tensors with shapes and dtypes, instruction count), made by tracing the
kernel with the shapes and dtypes the framework reports (no data is needed).
It is not a Neuron backend_config and Neuron cannot load it; what carries over
is the contract: which arguments are tensors, their names, and the outputs
(returned HBM tensors, or arguments the kernel writes, in argument order).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from nprof.errors import NprofError
from nprof.nki.dtypes import dtype_name
from nprof.nki.typing import TensorType


class FrameworkKernel:
    """Base class of a framework's NKI kernel call (see module doc): subclass and implement the three methods."""

    def __init__(self, func_name: str, func: Callable[..., Any], grid: Any = (), enable_cache: bool = True) -> None:
        self.func_name = func_name
        self.func = func
        self.grid = tuple(int(g) for g in grid) if isinstance(grid, tuple | list) else ((int(grid),) if grid else ())
        self.enable_cache = enable_cache
        self._configs: dict[Any, tuple[str, list[str], list[str]]] = {}

    # -- what a framework implements ------------------------------------------------------------
    def is_framework_tensor(self, t: Any) -> bool:
        """True iff `t` is one of the framework's tensors (other arguments are compile-time constants)."""
        raise NotImplementedError(f"{type(self).__name__} must implement is_framework_tensor(t)")

    def map_framework_tensor(self, t: Any) -> tuple[Any, Any]:
        """(shape, framework dtype) of a framework tensor `t`."""
        raise NotImplementedError(f"{type(self).__name__} must implement map_framework_tensor(t)")

    def translate_to_neuron_dtype(self, _dtype: Any) -> Any:
        """The NKI / numpy dtype of a framework dtype."""
        raise NotImplementedError(f"{type(self).__name__} must implement translate_to_neuron_dtype(_dtype)")

    # -- the config ------------------------------------------------------------------------------
    def dump_config(self, *args: Any, **kwargs: Any) -> tuple[str, list[str], list[str]]:
        """(nprof's backend_config JSON, input names, output names) for a call with these arguments (see module
        doc); cached by the tensors' shapes and dtypes and the other arguments when `enable_cache`."""
        specs = [self._spec(a) for a in args]
        kwspecs = {k: self._spec(v) for k, v in kwargs.items()}
        key = (tuple(map(_key, specs)), tuple((k, _key(v)) for k, v in sorted(kwspecs.items())), self.grid)
        if self.enable_cache and key in self._configs:
            return self._configs[key]
        result = self._trace(specs, kwspecs)
        if self.enable_cache:
            self._configs[key] = result
        return result

    def _spec(self, value: Any) -> Any:
        """A framework tensor as the TensorType nprof traces with; anything else unchanged."""
        if not self.is_framework_tensor(value):
            return value
        shape, dtype = self.map_framework_tensor(value)
        try:
            name = dtype_name(self.translate_to_neuron_dtype(dtype))
        except ValueError as err:
            raise NprofError(f"{type(self).__name__}: {err}") from None
        return TensorType(tuple(int(s) for s in shape), name)

    def _trace(self, specs: list[Any], kwspecs: dict[str, Any]) -> tuple[str, list[str], list[str]]:
        from nprof.nki.decorators import jit
        from nprof.nki.kernel import Reshaped

        kernel = jit(self.func)
        if self.grid:
            kernel = kernel[self.grid]
        traced = kernel.trace(*specs, **kwspecs)
        program = traced.program
        decl = {t.name: t for t in program.tensors}
        inputs = [n for n in traced.inputs if n in decl and n not in traced.inplace]
        outputs = [*_names(traced.structure, Reshaped), *traced.inplace]
        config = {
            "nprof_kernel": self.func_name,
            "grid": list(self.grid),
            "inputs": [_describe(decl[n]) for n in inputs],
            "outputs": [_describe(decl[n]) for n in outputs],
            "instructions": len(program.instructions),
            "note": "nprof's own description of the traced kernel; not a Neuron backend_config",
        }
        return json.dumps(config, sort_keys=True), inputs, outputs


def _key(spec: Any) -> Any:
    if isinstance(spec, TensorType):
        return ("tensor", spec.shape, spec.dtype)
    try:
        hash(spec)
    except TypeError:
        return ("value", repr(spec))
    return ("value", spec)


def _names(structure: Any, reshaped: Any) -> list[str]:
    """The HBM tensor names of a traced kernel's return structure, in order."""
    if structure is None:
        return []
    if isinstance(structure, str):
        return [structure]
    if isinstance(structure, reshaped):
        return [structure.name]
    if isinstance(structure, dict):
        return [n for v in structure.values() for n in _names(v, reshaped)]
    return [n for v in structure for n in _names(v, reshaped)]


def _describe(decl: Any) -> dict[str, Any]:
    return {"name": decl.name, "shape": list(decl.shape), "dtype": decl.dtype}
