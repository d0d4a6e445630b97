"""Python operators on tiles (`a + b`, `x * 2.0`, `acc += ...`, `t[...] = v`), lowered by `nprof.nki.compute`.

`TileOperators` is a mixin of `NkiTensor`: arithmetic and comparisons build
VectorE/ScalarE instructions exactly like the matching `nl` functions; in-place
forms write into the left operand (`psum_tile += nisa.nc_matmul(...)`
accumulates in PSUM); item assignment copies, memsets a scalar, or DMAs.
"""

from __future__ import annotations

import importlib
from typing import Any

from nprof.nki.index import IndexExpr
from nprof.nki.source import kernel_error


def _dyn(tile: Any, expr: IndexExpr) -> Any:
    from nprof.nki.indirect import DynIndex

    return DynIndex(tile, expr)


def _module(name: str) -> Any:
    """`nprof.nki.<name>` (`compute` or `assign`), imported on first use: both import this module."""
    module = _MODULES.get(name)
    if module is None:
        module = _MODULES[name] = importlib.import_module(f"nprof.nki.{name}")
    return module


_MODULES: dict[str, Any] = {}


class TileOperators:
    """Operator overloads of kernel tensors (see module doc)."""

    __slots__ = ()
    index: Any  # NkiTensor.index

    def _op(self, name: str, *args: Any) -> Any:
        return getattr(_module("compute"), name)(*args)

    def __add__(self, o: Any) -> Any:
        if isinstance(o, IndexExpr):  # `offsets[0, i] + iy`: a runtime index (nprof.nki.indirect)
            return _dyn(self, o)
        return self._op("binary", "add", self, o)

    def __radd__(self, o: Any) -> Any:
        if isinstance(o, IndexExpr):
            return _dyn(self, o)
        return self._op("binary", "add", o, self)

    def __sub__(self, o: Any) -> Any:
        return self._op("binary", "subtract", self, o)

    def __rsub__(self, o: Any) -> Any:
        return self._op("binary", "subtract", o, self)

    def __mul__(self, o: Any) -> Any:
        return self._op("binary", "multiply", self, o)

    def __rmul__(self, o: Any) -> Any:
        return self._op("binary", "multiply", o, self)

    def __truediv__(self, o: Any) -> Any:
        return self._op("binary", "divide", self, o)

    def __rtruediv__(self, o: Any) -> Any:
        return self._op("binary", "divide", o, self)

    def __pow__(self, o: Any) -> Any:
        return self._op("binary", "power", self, o)

    def __neg__(self) -> Any:
        return self._op("binary", "multiply", self, -1.0)

    def __abs__(self) -> Any:
        return self._op("unary", "abs", self)

    def __gt__(self, o: Any) -> Any:
        return self._op("binary", "is_gt", self, o)

    def __ge__(self, o: Any) -> Any:
        return self._op("binary", "is_ge", self, o)

    def __lt__(self, o: Any) -> Any:
        return self._op("binary", "is_lt", self, o)

    def __le__(self, o: Any) -> Any:
        return self._op("binary", "is_le", self, o)

    def __and__(self, o: Any) -> Any:
        return self._op("binary", "logical_and", self, o)

    def __or__(self, o: Any) -> Any:
        return self._op("binary", "logical_or", self, o)

    def __iadd__(self, o: Any) -> Any:
        return _module("assign").inplace("add", self, o)

    def __isub__(self, o: Any) -> Any:
        return _module("assign").inplace("subtract", self, o)

    def __imul__(self, o: Any) -> Any:
        return _module("assign").inplace("multiply", self, o)

    def __itruediv__(self, o: Any) -> Any:
        return _module("assign").inplace("divide", self, o)

    def __setitem__(self, items: Any, value: Any) -> None:
        _module("assign").assign(self.index(items), value)

    def __bool__(self) -> bool:
        raise kernel_error("a tile has no truth value at trace time; use nl.where or a mask instead of `if`")
