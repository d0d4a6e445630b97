"""`nprof.nki`: NKI-style kernels traced into Programs for the virtual NeuronCore.

`from nprof import nki`, `import nprof.nki.language as nl`,
`import nprof.nki.isa as nisa`, `from nprof.nki.typing import tensor` replace
the `neuronxcc` imports of an AWS NKI kernel. `nki.jit`, `nki.simulate_kernel`,
`nki.benchmark` and `nki.profile` run kernels on the simulated device
(`nprof.nki.decorators`); `nki.tensor` is the class of kernel tensors and tiles
(`nprof.nki.tensor.NkiTensor`; import from the module by its full name);
`nki.compiler` is the allocation-control API;
`nki.collectives` records CC-core collectives for multi-worker runs;
`nprof.nki.trace.ProgramBuilder` traces kernels into a Program directly (the
compiler's entry point).
"""

import sys
import types
from typing import Any

from nprof.nki import collectives, compiler, isa, language, typing  # collectives: nki.collectives (multi-worker)
from nprof.nki.decorators import baremetal, benchmark, jit, profile, simulate, simulate_kernel
from nprof.nki.framework import FrameworkKernel
from nprof.nki.kernel import Kernel
from nprof.nki.tensor import NkiTensor
from nprof.nki.trace import ProgramBuilder


class _TraceModule(types.ModuleType):
    """`nprof.nki.trace` is also callable: `nki.trace(kernel)` is NKI's older name for `nki.jit`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return jit(*args, **kwargs)


sys.modules["nprof.nki.trace"].__class__ = _TraceModule
tensor = NkiTensor  # `nki.tensor`: the class of kernel tensors and tiles (2.26 API); module: nprof.nki.tensor

__all__ = [
    "FrameworkKernel",
    "Kernel",
    "ProgramBuilder",
    "baremetal",
    "benchmark",
    "collectives",
    "compiler",
    "isa",
    "jit",
    "language",
    "profile",
    "simulate",
    "simulate_kernel",
    "tensor",
    "typing",
]
