"""The Program (our NEFF-like format): the model and its file."""

from nprof.program.model import Program, TensorDecl, TensorKind

__all__ = ["Program", "TensorDecl", "TensorKind"]
