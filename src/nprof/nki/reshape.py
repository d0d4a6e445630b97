"""View transformations of kernel tensors: masks' boxes, broadcasting, flattening, 2-D transposes.

`ViewReshapes` is a mixin of `NkiTensor`; every method returns a new view of
the same memory built with `NkiTensor._compose` (no data movement, no
instruction), except `broadcast_to` of an on-chip tile, which goes through
TensorE (see `nprof.nki.compute.broadcast_operand`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from nprof.nki.index import Predicate
from nprof.nki.source import kernel_error

if TYPE_CHECKING:
    from nprof.nki.tensor import NkiTensor


class ViewReshapes:
    """Shape-changing views (see module doc)."""

    __slots__ = ()
    _compose: Any
    _dims: Any
    _base: Any
    _p0: int
    _e0: int
    shape: Any
    ndim: Any
    is_hbm: Any
    check_bounds: Any

    def restrict(self, box: list[tuple[int, int]]) -> NkiTensor:
        """The sub-view `[lo:hi]` along every dim (a mask's box, clipped to this view's sizes)."""
        per_dim = []
        sizes = []
        n = self.ndim
        for k, ((lo, hi), (_, _, size)) in enumerate(zip(box, self._dims, strict=True)):
            lo, hi = min(lo, size), min(hi, size)
            coefs = [0] * n
            coefs[k] = 1
            per_dim.append((lo, tuple(coefs)))
            sizes.append(max(0, hi - lo))
        return self._compose(per_dim, tuple(sizes), [])

    def masked(self, mask: Predicate | None, shape: tuple[int, ...] | None = None) -> NkiTensor:
        """This view narrowed by `mask` (interpreted over `shape`, default this view's shape)."""
        if mask is None:
            return cast("NkiTensor", self)  # a mixin of NkiTensor
        from nprof.nki.tensor import mask_box

        box = mask_box(mask, shape or self.shape)
        if shape is not None and shape != self.shape:
            box = [(0, 1) if size == 1 else b for size, b in zip(self.shape, box, strict=True)]
        return self.restrict(box)

    def expand(self, shape: tuple[int, ...]) -> NkiTensor:
        """This view read as `shape` (size-1 free axes repeated with a zero stride)."""
        n = self.ndim
        per_dim = []
        for k, (size, target) in enumerate(zip(self.shape, shape, strict=True)):
            coefs = [0] * n
            if size == target:
                coefs[k] = 1
            per_dim.append((0, tuple(coefs)))
        return self._compose(per_dim, tuple(shape), [])

    def pad_free(self, ndim: int) -> NkiTensor:
        """This view with trailing size-1 axes up to `ndim` axes (a [P] vector read as [P, 1])."""
        if self.ndim >= ndim:
            return cast("NkiTensor", self)
        n = ndim
        per_dim = [(0, tuple(1 if k == j else 0 for k in range(n))) for j in range(self.ndim)]
        return self._compose(per_dim, self.shape + (1,) * (n - self.ndim), [])

    def transpose2d(self) -> NkiTensor:
        """The same elements with the two axes of a 2-D view swapped (a strided view, no data movement)."""
        if self.ndim != 2:
            raise kernel_error(f"transpose2d needs a 2-D view, got shape {self.shape}")
        return self._compose([(0, (0, 1)), (0, (1, 0))], (self.shape[1], self.shape[0]), [])

    def broadcast_to(self, shape: tuple[int, ...] | list[int]) -> NkiTensor:
        """Size-1 axes repeated to `shape`: a zero-stride view in HBM (a DMA broadcast), through TensorE on chip."""
        shape = tuple(int(s) for s in shape)
        if self.ndim == 1 and len(shape) > 1 and not self.is_hbm and self.shape[0] == shape[0]:
            return self.pad_free(len(shape)).broadcast_to(shape)  # a [P] tile (a reduction) read as [P, 1]
        if len(shape) != self.ndim or any(a not in (1, b) for a, b in zip(self.shape, shape, strict=True)):
            raise kernel_error(f"cannot broadcast shape {self.shape} to {shape}")
        if self.is_hbm:
            return self.expand(shape)
        from nprof.nki import compute

        return compute.broadcast_operand(cast("NkiTensor", self), shape)

    # -- methods of AWS's `nki.tensor` class (Neuron 2.26 API reference: assert_shape, astype, expand_dims,
    #    itemsize; broadcast_to, reshape, view, dtype, ndim and shape are defined elsewhere on the class)
    def assert_shape(self, shape: tuple[int, ...] | list[int]) -> NkiTensor:
        """This tensor, after checking it has `shape` (KernelError naming both shapes otherwise)."""
        if tuple(int(s) for s in shape) != tuple(self.shape):
            raise kernel_error(f"assert_shape: the tensor has shape {tuple(self.shape)}, not {tuple(shape)}")
        return cast("NkiTensor", self)

    def astype(self, dtype: Any) -> NkiTensor:
        """A copy of this tile cast to `dtype` (a copy always occurs: `nl.copy(self, dtype=dtype)`)."""
        from nprof.nki import compute

        return compute.copy(self, dtype=dtype)

    def expand_dims(self, axis: Any) -> NkiTensor:
        """A view with a size-1 axis inserted at `axis` (`nl.expand_dims`)."""
        from nprof.nki.language_ext import expand_dims

        return expand_dims(self, axis)

    @property
    def itemsize(self) -> int:
        """Bytes of one element."""
        from nprof.arch.isa import ITEMSIZE

        return ITEMSIZE[self.dtype_name]  # type: ignore[attr-defined]

    def flatten_free(self) -> NkiTensor | None:
        """A (P, prod(free)) view when the free axes are contiguous, else None (bounds checked now)."""
        self.check_bounds()
        dims = self._dims
        if len(dims) <= 2:
            return cast("NkiTensor", self)
        stride = 1
        for _, es, size in reversed(dims[1:]):
            if size != 1 and es != stride:
                return None
            stride *= size
        n = stride
        return cast("type[NkiTensor]", type(self))(self._base, self._p0, self._e0, (dims[0], (0, 1, n)), ())

    def unflatten_free(self, free: tuple[int, ...]) -> NkiTensor:
        """The inverse of `flatten_free` for a contiguous (P, n) view."""
        self.check_bounds()
        dims: list[tuple[int, int, int]] = []
        stride = self._dims[1][1] if len(self._dims) > 1 else 1
        for size in reversed(free):
            dims.append((0, stride, size))
            stride *= size
        return cast("type[NkiTensor]", type(self))(self._base, self._p0, self._e0, (self._dims[0], *reversed(dims)), ())
