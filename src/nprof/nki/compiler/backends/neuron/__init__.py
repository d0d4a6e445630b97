"""`nki.compiler.backends.neuron`: `tensor.local_tile` (the on-chip tile type) and `indexing.TileIndex` (the type
of index expressions); see `nprof.nki.compiler.backends`."""
