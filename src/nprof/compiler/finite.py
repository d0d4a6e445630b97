"""Which graph values may hold +-inf or NaN by construction (for `nprof.compiler.regather`).

Contract: `may_be_nonfinite(node, flagged)` is True when the FX node `node` takes a non-finite scalar argument
(``masked_fill(m, -inf)``, ``full(shape, -inf)``, ``where(c, x, -inf)``), a tensor constant holding a
non-finite value (`constant_nonfinite`), or a value in `flagged` (node names already so), unless its op maps
every input to finite values or booleans (`FINITE_OPS`: softmax, sigmoid, tanh, comparisons). Graph inputs'
values arrive at run time: `taint(node, taints)` gives the float inputs whose inf would reach `node` by the same
rules; a regather of such a value records them (`FusingBuilder.guard_inputs`, the Program's `lower.GUARD_META`),
and the backend runs a second lowering with them marked non-finite when one holds inf/NaN at run time. Values
that overflow at run time are caught on the device (`nprof.compiler.regather_check`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

FINITE_OPS = frozenset({
    "_softmax", "softmax", "sigmoid", "tanh", "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf",
    "isfinite", "logical_and", "logical_or", "logical_not", "logical_xor", "sym_size",
})  # fmt: skip


def _op_name(target: Any) -> str:
    """The ATen op name of an FX target without overload ('aten.lt.Scalar' -> 'lt')."""
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


def _nonfinite_arg(arg: Any, flagged: set[str]) -> bool:
    if hasattr(arg, "op") and hasattr(arg, "name"):
        return arg.name in flagged
    if isinstance(arg, (list, tuple)):
        return any(_nonfinite_arg(a, flagged) for a in arg)
    if isinstance(arg, float):
        return not math.isfinite(arg)
    return False


def may_be_nonfinite(node: Any, flagged: set[str]) -> bool:
    """Does the call_function `node` produce a value that may hold +-inf or NaN by construction?"""
    if _op_name(node.target) in FINITE_OPS:
        return False
    return _nonfinite_arg(list(node.args), flagged) or _nonfinite_arg(list(node.kwargs.values()), flagged)


def constant_nonfinite(value: Any) -> bool:
    """Does the tensor constant `value` (torch or numpy) hold a non-finite element?"""
    arr = np.asarray(value.detach().cpu().float().numpy() if hasattr(value, "detach") else value)
    return bool(arr.dtype.kind == "f" and not np.isfinite(arr).all())


def _arg_taint(arg: Any, taints: dict[str, frozenset[str]]) -> frozenset[str]:
    if hasattr(arg, "op") and hasattr(arg, "name"):
        return taints.get(arg.name, frozenset())
    if isinstance(arg, (list, tuple)):
        return frozenset().union(*(_arg_taint(a, taints) for a in arg)) if arg else frozenset()
    return frozenset()


def taint(node: Any, taints: dict[str, frozenset[str]]) -> frozenset[str]:
    """The graph inputs whose +-inf/NaN would reach the call_function `node`'s value by the rules of
    `may_be_nonfinite` (`taints`: node name -> such inputs; a float input taints itself); empty for `FINITE_OPS`."""
    if _op_name(node.target) in FINITE_OPS:
        return frozenset()
    return _arg_taint(list(node.args), taints) | _arg_taint(list(node.kwargs.values()), taints)
