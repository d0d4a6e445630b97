"""`nprof.nki.typing`: `tensor[[shape], dtype]` placeholders for `nki.benchmark` / `nki.profile`.

Passing `tensor[[250, 512], nl.float32]` instead of an array means "a random
input of that shape and dtype" (standard normal values, seeded, cast to the
dtype; integer dtypes get small non-negative integers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nprof.nki.dtypes import NUMPY, dtype_name, is_float


@dataclass(frozen=True)
class TensorType:
    """A shape and dtype standing for a random input."""

    shape: tuple[int, ...]
    dtype: str

    def random(self, rng: np.random.Generator) -> np.ndarray:
        if is_float(self.dtype):
            return rng.standard_normal(self.shape).astype(np.float32).astype(NUMPY[self.dtype])
        return rng.integers(0, 8, self.shape).astype(NUMPY[self.dtype])


class _TensorMaker:
    def __getitem__(self, item: Any) -> TensorType:
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError("use tensor[[dim, ...], dtype], e.g. tensor[[250, 512], nl.float32]")
        shape, dtype = item
        shape = tuple(int(s) for s in (shape if isinstance(shape, list | tuple) else (shape,)))
        return TensorType(shape, dtype_name(dtype))


tensor = _TensorMaker()
