"""`nki.compiler.backends`: the compiler-internal modules nki-samples' reference kernels import.

AWS publishes no API reference for these (`neuronxcc.nki.compiler.backends.neuron.tensor.local_tile`,
`...neuron.indexing.TileIndex`); nki-samples' `util/kernel_helpers.py` and `util/tile_info.py` import them, the
first never used, the second only as a type hint of index expressions. nprof provides the two names in the roles
those kernels use them in (`nprof.nki.compiler.backends.neuron`), so the modules import and run unchanged.
"""
