"""nprof: a performance profiler for machine-learning workloads.

Pipeline (each stage imports only from stages to its left):
compile -> Program -> capture -> Profile -> analysis -> store -> viewer / exports.
"""

__version__ = "0.1.0"

from nprof.errors import NprofError

__all__ = ["NprofError", "__version__"]
