"""`nprof.nki`: NKI-style kernels traced into Programs for the virtual NeuronCore.

`from nprof import nki`, `import nprof.nki.language as nl`,
`import nprof.nki.isa as nisa`, `from nprof.nki.typing import tensor` replace
the `neuronxcc` imports of an AWS NKI kernel. `nki.jit`, `nki.simulate_kernel`,
`nki.benchmark` and `nki.profile` run kernels on the simulated device;
`nprof.nki.trace.ProgramBuilder` traces kernels into a Program directly.
"""

from nprof.nki import isa, language, typing
from nprof.nki.trace import ProgramBuilder

__all__ = ["ProgramBuilder", "isa", "language", "typing"]
