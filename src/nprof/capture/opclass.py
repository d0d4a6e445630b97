"""Classify real-hardware ops and kernels onto engine categories, and count their FLOPs.

Contract:
* `engine_of(name)` maps an op or kernel name (``aten::addmm``,
  ``ampere_sgemm_128x64_tn``, ``GeluBackward0``...) to one of the profile's
  engine categories: ``tensor`` (matmul, conv, bmm, addmm, linear, baddbmm,
  einsum, attention, GEMM kernels), ``scalar`` (activations and transcendental
  functions: relu, gelu, silu, tanh, sigmoid, exp, log, softmax...), ``vector``
  (elementwise arithmetic, reductions, norms, copies, fills, losses) and
  ``other`` for the rest (views, allocation, indexing, runtime calls).
  The first matching rule wins in that order, so ``vectorized_elementwise_kernel<GeluFunctor>``
  is scalar and ``addmm`` is tensor.
* `op_flops(name, dims, concrete)` returns model FLOPs (2 x multiply-accumulates)
  of a matmul/conv/attention op from its recorded input shapes (torch.profiler's
  ``Input Dims`` and ``Concrete Inputs``), 0 for every other op or when shapes
  are missing. Only compute-bound ops count, the convention of MFU.
* `input_bytes(args)` returns the bytes of an op's recorded input tensors
  (shapes x element sizes of torch's ``Input type`` names), 0 when unknown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from nprof.errors import NprofError

MAX_COUNT = 2**62  # FLOPs/bytes per op: sums over many ops stay within int64

ENGINE_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "tensor",
        re.compile(
            r"gemm|gemv|matmul|xmma|wgmma|cutlass|einsum|flash|attention|scaled_dot_product|conv(?!ert)"
            r"|scaled_mm|int_mm|(?<![a-z_])(mm|addmm|bmm|baddbmm|addbmm|linear|dot|vdot|addmv|mv|bilinear|tensordot)(?![a-z])"
        ),
    ),
    (
        "scalar",
        re.compile(
            r"relu|gelu|silu|swish|tanh|sigmoid|softmax|softplus|softsign|mish|hardswish|hardsigmoid"
            r"|(?<![a-z])(elu|selu|celu|glu|exp|exp2|expm1|log|log1p|log2|log10|erf|erfc|erfinv|sqrt|rsqrt"
            r"|reciprocal|sin|cos|tan|pow|activation)(?![a-z])"
        ),
    ),
    (
        "vector",
        re.compile(
            r"elementwise|reduce|norm|loss|foreach|dropout|cumsum|cumprod"
            r"|(?<![a-z])(add|sub|rsub|mul|div|neg|abs|sum|mean|max|min|amax|amin|prod|var|std|clamp|clip"
            r"|where|copy|fill|zero|zeros|ones|eq|ne|lt|le|gt|ge|sign|floor|ceil|round|trunc|fmod|remainder"
            r"|addcmul|addcdiv|lerp|argmax|argmin|maximum|minimum|masked_fill|sgd|adam|adamw|square"
            r"|logical_and|logical_or|logical_not|bitwise_and|bitwise_or|threshold)(?![a-z])"
        ),
    ),
)


@lru_cache(maxsize=65536)
def engine_of(name: str) -> str:
    """Engine category of an op or kernel name (see module doc)."""
    text = name.lower().replace("backward", "_backward")
    for engine, pattern in ENGINE_RULES:
        if pattern.search(text):
            return engine
    return "other"


def _prod(values: Sequence[int]) -> int:
    return math.prod(int(v) for v in values)


def _is_shape(d: object) -> bool:
    return isinstance(d, list) and all(isinstance(v, int) for v in d)


def _matmul_flops(a: list[int], b: list[int]) -> int:
    if not a or not b:
        return 0
    if len(a) == 1 and len(b) == 1:
        return 2 * a[0]
    if len(b) == 1:
        return 2 * _prod(a)
    a2 = [1, *a] if len(a) == 1 else a
    m, k = a2[-2], a2[-1]
    n = b[-1]
    batch_a, batch_b = a2[:-2], b[:-2]
    width = max(len(batch_a), len(batch_b))
    pa = [1] * (width - len(batch_a)) + list(batch_a)
    pb = [1] * (width - len(batch_b)) + list(batch_b)
    batch = _prod([max(x, y) for x, y in zip(pa, pb, strict=True)])
    return 2 * batch * m * n * k


def _ints(text: object, rank: int, default: int) -> list[int]:
    """Parse a Concrete Inputs entry like "[2, 2]" or "1" into `rank` ints."""
    if isinstance(text, list):
        vals = [int(v) for v in text if isinstance(v, int | float)]
    elif isinstance(text, int | float):
        vals = [int(text)]
    else:
        vals = [int(v) for v in re.findall(r"-?\d+", str(text or ""))]
    if not vals:
        return [default] * rank
    if len(vals) == 1:
        return vals * rank
    return (vals + [vals[-1]] * rank)[:rank]


def _conv_flops(name: str, dims: list, concrete: list) -> int:
    if len(dims) < 2 or not _is_shape(dims[0]) or not _is_shape(dims[1]):
        return 0
    x, w = dims[0], dims[1]
    if len(x) < 3 or len(w) != len(x):
        return 0
    rank = len(x) - 2
    c = list(concrete) + [""] * (10 - len(concrete))
    transposed = False
    if name.endswith(("conv1d", "conv2d", "conv3d")) and "transpose" not in name:
        stride, pad, dil, groups = c[3], c[4], c[5], c[6]
    elif "conv_transpose" in name:
        stride, pad, dil, groups, transposed = c[3], c[4], c[7], c[6], True
    else:  # aten::convolution / _convolution / backend convolutions: (x, w, b, stride, padding, dilation, transposed..)
        stride, pad, dil = c[3], c[4], c[5]
        transposed = str(c[6]).strip().lower() in ("true", "1")
        groups = c[8]
    s, p, d = _ints(stride, rank, 1), _ints(pad, rank, 0), _ints(dil, rank, 1)
    g = max(1, _ints(groups, 1, 1)[0])
    kernel = w[2:]
    if transposed:  # w: [Cin, Cout/groups, k...]; work per input element
        return 2 * x[0] * x[1] * _prod(x[2:]) * w[1] * _prod(kernel)
    out = [(x[2 + i] + 2 * p[i] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1 for i in range(rank)]
    if any(o <= 0 for o in out):
        return 0
    return 2 * x[0] * w[0] * _prod(out) * (x[1] // g) * _prod(kernel)


def _attention_flops(dims: list) -> int:
    if len(dims) < 3 or not all(_is_shape(d) and len(d) >= 2 for d in dims[:3]):
        return 0
    q, k, v = dims[0], dims[1], dims[2]
    batch = _prod(q[:-2])
    length, e = q[-2], q[-1]
    s, ev = k[-2], v[-1]
    return 2 * batch * length * s * e + 2 * batch * length * s * ev


def op_flops(name: str, dims: object, concrete: object = None) -> int:
    """Model FLOPs of one op from its input shapes (see module doc); 0 when unknown; NprofError past MAX_COUNT."""
    return _bounded(name, "FLOPs", _op_flops(name, dims, concrete))


def _bounded(name: str, what: str, value: int) -> int:
    if value > MAX_COUNT or value < 0:
        raise NprofError(
            f"op {name[:60]!r}: its recorded input shapes give {value:.3g} {what}, outside [0, 2^62]; "
            "the trace's 'Input Dims' are wrong"
        )
    return value


def _op_flops(name: str, dims: object, concrete: object = None) -> int:
    if not isinstance(dims, list) or not dims:
        return 0
    base = name.rsplit("::", 1)[-1]
    conc = concrete if isinstance(concrete, list) else []
    try:
        two = len(dims) >= 2 and _is_shape(dims[0]) and _is_shape(dims[1])
        three = len(dims) >= 3 and _is_shape(dims[1]) and _is_shape(dims[2])
        if base in ("mm", "bmm", "matmul", "mv", "dot", "vdot") and two:
            return _matmul_flops(dims[0], dims[1])
        if base in ("addmm", "baddbmm", "addbmm", "addmv") and three:
            return _matmul_flops(dims[1], dims[2])
        if base == "linear" and len(dims) >= 2 and _is_shape(dims[0]) and _is_shape(dims[1]) and dims[0]:
            x, w = dims[0], dims[1]
            out_features = w[0] if len(w) == 2 else 1
            return 2 * _prod(x[:-1]) * x[-1] * out_features
        if "conv" in base and "convert" not in base and "backward" not in base:
            return _conv_flops(base, dims, conc)
        if "scaled_dot_product" in base and "backward" not in base:
            return _attention_flops(dims)
    except (TypeError, ValueError, IndexError, ZeroDivisionError):
        return 0
    return 0


_DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
                "c10::complex<double>": 16}  # fmt: skip


def input_bytes(args: dict[str, Any]) -> int:
    """Bytes of the tensors an op read: its recorded input shapes times their element sizes."""
    dims, types = args.get("Input Dims"), args.get("Input type") or []
    total = 0
    for k, d in enumerate(dims if isinstance(dims, list) else ()):
        t = types[k] if k < len(types) else ""
        size = _DTYPE_BYTES.get(t) or (1 if "Float8" in str(t) else 0)
        if size and isinstance(d, list) and all(isinstance(v, int) for v in d):
            total += size * _prod(d)
    return _bounded("with recorded inputs", "bytes", total)
