"""Small hand-built profiles for analysis tests."""

from __future__ import annotations

from typing import Any

from nprof.profile import Profile, ProfileInfo


def make(instructions: dict[str, Any] | None = None, dma: dict[str, Any] | None = None, **info: Any) -> Profile:
    """A virtual-device profile from column dicts; ids/tracks/opcodes filled when omitted."""
    base = {"device": "virtual-neuroncore", "name": "hand", "preset": "trn1", "created": "2026-01-01T00:00:00+00:00"}
    base.update(info)
    instructions = dict(instructions or {})
    dma = dict(dma or {})
    n_i = len(instructions.get("ts", []))
    n_d = len(dma.get("ts", []))
    if n_i:
        instructions.setdefault("id", list(range(1, n_i + 1)))
        instructions.setdefault("engine", ["vector"] * n_i)
        instructions.setdefault("track", list(instructions["engine"]))
        instructions.setdefault("opcode", ["TENSOR_TENSOR"] * n_i)
    if n_d:
        dma.setdefault("id", list(range(1001, 1001 + n_d)))
        dma.setdefault("queue", ["q0"] * n_d)
        dma.setdefault("direction", ["hbm->sbuf"] * n_d)
        dma.setdefault("partitions", [128] * n_d)
    return Profile.build(ProfileInfo(**base), instructions=instructions or None, dma=dma or None)
