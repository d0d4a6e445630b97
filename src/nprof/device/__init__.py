"""The virtual NeuronCore simulator: `simulate(program, inputs, ...) -> SimResult`.

Modules: `plan` (columnar per-instruction costs), `schedule` (the timing
model), `memory` and `numerics` (functional state and opcode semantics),
`record` (Profile tables), `simulate` (the entry point).
"""

from nprof.device.simulate import SimResult, simulate

__all__ = ["SimResult", "simulate"]
