"""`nki.language.constants` (imported by nki-samples' `rmsnorm_quant` as `neuronxcc.nki.language.constants`):
`sizeinbytes(dtype)`, the bytes of one element of an NKI dtype.

AWS publishes no API page for this module; the one name nki-samples uses is provided with the meaning its
caller gives it (`sizeinbytes(np.float32) // sizeinbytes(nl.float8_e4m3)` elements hold one fp32 value).
Registered as the submodule `nprof.nki.language.constants` by `nprof.nki.language`.
"""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import ITEMSIZE
from nprof.nki.dtypes import dtype_name
from nprof.nki.source import kernel_error


def sizeinbytes(dtype: Any) -> int:
    """Bytes of one element of `dtype` (any dtype nprof accepts: nl dtype, numpy type, name); KernelError if
    the dtype is not an NKI dtype."""
    try:
        return ITEMSIZE[dtype_name(dtype)]
    except ValueError as err:
        raise kernel_error(str(err)) from None


__all__ = ["sizeinbytes"]
