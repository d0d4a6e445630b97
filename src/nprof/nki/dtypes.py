"""Element types of the kernel language and their mapping to the ISA dtype names.

`nl.float32`, `nl.bfloat16`, ... are numpy dtypes (bfloat16/float8 from
`ml_dtypes`), so `tensor.dtype == nl.float32` and `np.zeros(..., nl.bfloat16)`
work. `dtype_name` turns anything a user may pass (numpy dtype or type, nl
dtype, string, torch dtype) into one of `nprof.arch.isa.DTYPES`; it raises
`ValueError` for an unsupported type (callers turn it into a KernelError).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from nprof.arch.isa import DTYPES, numpy_dtype

float32 = np.dtype(np.float32)
tfloat32 = np.dtype(np.float32)  # TensorE tf32 mode: stored as fp32 here
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float16 = np.dtype(np.float16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e4m3fn = float8_e4m3  # the newer API's name of the same OCP E4M3FN type
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
int32 = np.dtype(np.int32)
int16 = np.dtype(np.int16)
int8 = np.dtype(np.int8)
uint8 = np.dtype(np.uint8)
uint16 = np.dtype(np.uint16)
uint32 = np.dtype(np.uint32)
bool_ = np.dtype(np.uint8)  # predicates are stored as uint8 0/1
# MX types (NeuronCore-v4, nki.isa.nc_matmul_mx / quantize_mx): packed bits, usable by MX instructions and copies
float8_e4m3fn_x4 = np.dtype(numpy_dtype("mxfp8_e4m3_x4"))
float8_e5m2_x4 = np.dtype(numpy_dtype("mxfp8_e5m2_x4"))
float4_e2m1fn_x4 = np.dtype(numpy_dtype("mxfp4_e2m1_x4"))
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)

NUMPY = {
    "float32": float32,
    "bfloat16": bfloat16,
    "float16": float16,
    "float8_e4m3": float8_e4m3,
    "float8_e5m2": float8_e5m2,
    "int32": int32,
    "int16": int16,
    "int8": int8,
    "uint8": uint8,
    "uint16": uint16,
    "uint32": uint32,
    "mxfp8_e4m3_x4": float8_e4m3fn_x4,
    "mxfp8_e5m2_x4": float8_e5m2_x4,
    "mxfp4_e2m1_x4": float4_e2m1fn_x4,
    "float8_e8m0fnu": float8_e8m0fnu,
}

_ALIASES = {
    "float8_e4m3fn": "float8_e4m3",
    "fp32": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "float": "float32",
    "bool": "uint8",
    "tfloat32": "float32",
    "float8_e4m3fn_x4": "mxfp8_e4m3_x4",
    "float8_e5m2_x4": "mxfp8_e5m2_x4",
    "float4_e2m1fn_x4": "mxfp4_e2m1_x4",
}

PACKED_NKI_NAMES = {"mxfp8_e4m3_x4": "float8_e4m3fn_x4", "mxfp8_e5m2_x4": "float8_e5m2_x4",
                    "mxfp4_e2m1_x4": "float4_e2m1fn_x4"}  # ISA name -> NKI's name (messages)  # fmt: skip


_NAMED: dict[Any, str] = {}  # dtype object -> its ISA name, for the dtypes seen (a kernel uses a handful)


def dtype_name(dtype: Any) -> str:
    """The ISA name of `dtype` (see module doc); ValueError if unsupported."""
    try:
        return _NAMED[dtype]
    except (KeyError, TypeError):  # (TypeError: an unhashable dtype-like)
        pass
    name = _name_of(dtype)
    try:
        _NAMED[dtype] = name
    except TypeError:
        pass
    return name


def _name_of(dtype: Any) -> str:
    """`dtype_name` without the memo."""
    if isinstance(dtype, str):
        name = dtype
    else:
        text = str(dtype)
        if text.startswith("torch."):
            name = text[len("torch.") :]
        else:
            try:
                dt = np.dtype(dtype)
            except TypeError:
                raise ValueError(f"unsupported dtype {dtype!r}") from None
            name = dt.names[0] if dt.names and len(dt.names) == 1 else dt.name  # MX packed types: their field
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    return name


def to_numpy(dtype: Any) -> np.dtype:
    """The numpy dtype of `dtype` (see `dtype_name`)."""
    return NUMPY[dtype_name(dtype)]


def is_float(name: str) -> bool:
    return name.startswith(("float", "bfloat"))


_RANK = {"float32": 5, "float16": 4, "bfloat16": 4, "float8_e4m3": 2, "float8_e5m2": 2, "float8_e8m0fnu": 2}


def promote(a: str, b: str) -> str:
    """Result dtype of a binary op on tiles of dtypes `a` and `b` (floats win; wider wins)."""
    if a == b:
        return a
    fa, fb = is_float(a), is_float(b)
    if fa and not fb:
        return a
    if fb and not fa:
        return b
    if fa and fb:
        ra, rb = _RANK[a], _RANK[b]
        if ra == rb:
            return "float32"  # bf16 with fp16: no common 16-bit type
        return a if ra > rb else b
    return a if np.dtype(NUMPY[a]).itemsize >= np.dtype(NUMPY[b]).itemsize else b
