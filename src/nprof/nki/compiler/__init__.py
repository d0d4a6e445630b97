"""`nprof.nki.compiler` (`nki.compiler`, imported as `ncc`): the allocation-control API of Neuron 2.26.

* `sbuf.auto_alloc()` / `psum.auto_alloc()` are `nl.sbuf` / `nl.psum`.
* `sbuf.alloc(func)`, `sbuf.mod_alloc(...)`, `psum.alloc(func)`,
  `psum.mod_alloc(...)` (direct allocation: the kernel places each logical
  tile itself) are honoured as `buffer=` of `nl.ndarray`/`nl.zeros`: tiles sit
  at the given addresses, aliasing included, with the compiler's placement
  rules and lifetime-conflict check (`nprof.nki.direct`).
* `skip_middle_end_transformations` and `no_reorder` are faithful as is:
  nprof records the kernel's instructions as written and never transforms or
  reorders them. `force_auto_alloc` is what nprof always does.
  `enable_stack_allocator`, `allocation_scope` and `multi_buffer` change only
  where tiles live; they warn once per kernel (not modelled).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

from nprof.nki.calls import unmodelled
from nprof.nki.compiler import psum, sbuf

__all__ = [
    "allocation_scope", "enable_stack_allocator", "force_auto_alloc", "multi_buffer", "no_reorder", "psum", "sbuf",
    "skip_middle_end_transformations",
]  # fmt: skip


def _decorator(func: Callable[..., Any] | None, before: Callable[[], None] | None) -> Any:
    """`func` unchanged (or a decorator when None); `before` runs at each traced call."""

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        if before is None:
            return f
        if hasattr(f, "__getitem__"):  # an nki.jit kernel: `kernel[grid]` launches keep the hook
            return _Hooked(f, before)

        @functools.wraps(f)
        def inner(*args: Any, **kwargs: Any) -> Any:
            before()
            return f(*args, **kwargs)

        return inner

    return wrap if func is None else wrap(func)


class _Hooked:
    """An `nki.jit` kernel with a hook run at each call, itself launchable over a grid (`kernel[grid]`); other
    attributes are the kernel's."""

    def __init__(self, kernel: Any, before: Callable[[], None]) -> None:
        self._kernel, self._before = kernel, before
        functools.update_wrapper(self, kernel, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._before()
        return self._kernel(*args, **kwargs)

    def __getitem__(self, grid: Any) -> _Hooked:
        return _Hooked(self._kernel[grid], self._before)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kernel, name)


def skip_middle_end_transformations(func: Callable[..., Any] | None = None) -> Any:
    """Run the kernel exactly as written (what nprof always does)."""
    return _decorator(func, None)


def force_auto_alloc(func: Callable[..., Any] | None = None) -> Any:
    """Ignore direct allocations and let the allocator place every tile (what nprof always does)."""
    return _decorator(func, None)


def enable_stack_allocator(func: Callable[..., Any] | None = None, log_level: int = 50) -> Any:
    """Use the compiler's stack allocator: accepted; nprof's own allocator places the tiles (warns)."""
    return _decorator(func, lambda: unmodelled("nki.compiler.enable_stack_allocator", "func"))


@contextlib.contextmanager
def allocation_scope() -> Iterator[None]:
    """A scope for direct allocations: accepted; nprof's allocator places the tiles (warns)."""
    unmodelled("nki.compiler.allocation_scope", "scope")
    yield


@contextlib.contextmanager
def no_reorder() -> Iterator[None]:
    """Keep the instructions in program order: nprof never reorders them."""
    yield


def multi_buffer(factor: int = 2) -> Any:
    """A multi-buffering directive: accepted; the tiles are allocated as declared (warns when used)."""
    unmodelled("nki.compiler.multi_buffer", "factor")
    return factor
