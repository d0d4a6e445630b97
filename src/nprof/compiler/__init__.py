"""The PyTorch compiler for the virtual NeuronCore: a torch.compile backend, its lowering and compile cache.

Public API: `nprof_backend` (``torch.compile(model, backend="nprof")``), `CompileCache`, `compile_command`
(``nprof compile -- python train.py``), `supported_ops()` and `STATS` (process-wide counters). Importing this
package does not import torch; the backend imports it when called (if torch is already imported, importing
this package sets Dynamo's ``allow_rnn`` so LSTM/GRU layers are compiled, not skipped).
"""

from __future__ import annotations

import sys
from typing import Any

from nprof.compiler.cache import CompileCache, compile_command
from nprof.compiler.runtime import STATS

if "torch" in sys.modules:  # backend=nprof_backend: let Dynamo trace RNNs before the first graph is traced
    from nprof.compiler.backend import allow_rnn

    allow_rnn()


def nprof_backend(gm: Any, example_inputs: Any, options: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    from nprof.compiler.backend import nprof_backend as backend

    return backend(gm, example_inputs, options, **kwargs)


def supported_ops() -> list[str]:
    from nprof.compiler.lowerings import supported_ops as ops

    return ops()


__all__ = ["STATS", "CompileCache", "compile_command", "nprof_backend", "supported_ops"]
