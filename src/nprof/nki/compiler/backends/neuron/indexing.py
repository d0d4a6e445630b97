"""`nki.compiler.backends.neuron.indexing.TileIndex`: the type of NKI index expressions (what `nl.arange`,
`nl.mgrid` and arithmetic on them return), nprof's `IndexExpr` (see `nprof.nki.compiler.backends`)."""

from __future__ import annotations

from nprof.nki.index import IndexExpr

TileIndex = IndexExpr

__all__ = ["TileIndex"]
