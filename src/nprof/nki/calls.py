"""Calling conventions of the NKI API: the two call styles, and parameters nprof accepts but cannot model.

* No catch-all keywords: every `nl`/`nisa`/`nki` function has the explicit
  signature of AWS's API reference, so a misspelt keyword (`dtpye=`) is
  Python's own `TypeError` naming it.
* A parameter that is accepted for compatibility but changes nothing in
  nprof's model (a DMA queue priority, a compiler hint) warns once per traced
  kernel, naming it: `unmodelled("nisa.dma_copy", "priority")`
  (`NkiCompatWarning`).
* Two call styles (`beta2`): Neuron 2.26's return-value style
  (`acc = nisa.nc_matmul(stationary, moving)`) and the newer "beta 2" style
  whose output is the first argument or `dst=`
  (`nisa.nc_matmul(acc, stationary, moving)`). A function written for the 2.26
  style takes a keyword-only `dst=`; `@beta2(names, at)` rebinds a positional
  beta-2 call (recognised by a tile where 2.26 has a non-tile parameter, at
  index `at`) to keywords so one implementation serves both.
"""

from __future__ import annotations

import functools
import inspect
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from nprof.nki import indirection as _indirection
from nprof.nki import trace as _trace
from nprof.nki.source import user_location
from nprof.nki.tensor import NkiTensor

_WARNED: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


class NkiCompatWarning(UserWarning):
    """An NKI parameter nprof accepts but does not model (the kernel still runs; the value is ignored)."""


def first_in_kernel(key: str) -> bool:
    """True the first time `key` is asked about in the kernel being traced (always True outside a kernel): the
    once-per-kernel rule of nprof's compatibility warnings."""
    try:
        builder: Any = _trace.current()
    except Exception:  # outside a kernel: every time (no kernel to attach "once" to)
        return True
    seen = _WARNED.setdefault(builder, set())
    if key in seen:
        return False
    seen.add(key)
    return True


def unmodelled(func: str, param: str, detail: str = "") -> None:
    """Warn once per traced kernel that `func`'s `param` is accepted but not modelled by nprof."""
    key = f"{func}({param}=)"
    if not first_in_kernel(key):
        return
    where = user_location() or "<kernel>"
    extra = f" ({detail})" if detail else ""
    warnings.warn(f"{where}: {key} is accepted but not modelled by nprof; it is ignored{extra}",
                  NkiCompatWarning, stacklevel=3)  # fmt: skip


def unmodelled_if(func: str, **params: tuple[Any, Any]) -> None:
    """`unmodelled(func, name)` for each `name=(value, default)` whose value differs from its default."""
    for name, (value, default) in params.items():
        if value is not default and value != default:
            unmodelled(func, name)


def beta2(names: tuple[str, ...], at: int | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Accept the beta-2 positional style of a 2.26-style function (see module doc).

    A call is beta-2 style when positional argument `at` is a tile (2.26 has a
    non-tile parameter there, or fewer positionals), or, with `at=None`, when it
    has more positional arguments than the 2.26 form takes; its positional
    arguments are then bound, in order, to `names` (beta 2's order, `dst` first).
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        params = inspect.signature(fn).parameters.values()
        most = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)

        def dst_first(args: tuple[Any, ...]) -> bool:
            if at is None:
                return len(args) > most
            return len(args) > at and (isinstance(args[at], NkiTensor) or _indirection.is_indirect(args[at]))

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if dst_first(args):
                if len(args) > len(names):
                    raise TypeError(f"{fn.__name__}() takes at most {len(names)} positional arguments in the "
                                    f"dst-first style ({', '.join(names)}), got {len(args)}")  # fmt: skip
                for name, value in zip(names, args, strict=False):
                    if name in kwargs:
                        raise TypeError(f"{fn.__name__}() got multiple values for argument {name!r}")
                    kwargs[name] = value
                args = ()
            if _indirection.USED:  # tensor indirection operands (`t.indirect(index)`, nprof.nki.indirection)
                return _with_indirection(fn, args, kwargs)
            return fn(*args, **kwargs)

        wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        wrapper._nki_beta2 = names  # type: ignore[attr-defined]
        return wrapper

    return deco


def _with_indirection(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call instruction `fn` with its indirect operands gathered and an indirect `dst` scattered after it (G = 32
    offsets per index group on the Tensor engine, 16 on the others: `nprof.nki.indirection`)."""
    group = _indirection.GROUP["tensor" if fn.__name__ in ("nc_matmul", "nc_matmul_mx") else "vector"]
    args, kwargs, scatter = _indirection.resolve(args, kwargs, group)
    result = fn(*args, **kwargs)
    if scatter is None:
        return result
    tile = kwargs["dst"]
    _trace.current().flush()  # (a pending matmul into the new tile is committed before its columns are moved)
    scatter.scatter(tile, group)
    return scatter if result is tile else result
