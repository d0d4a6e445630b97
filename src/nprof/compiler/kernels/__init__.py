"""Lowering kernels: one function per family of ATen ops, each emitting NKI-ISA instructions via an `Emitter`."""
