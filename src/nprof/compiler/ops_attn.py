"""Lowerings of scaled-dot-product attention to the fused flash-attention kernels.

Contract: importing this module registers ``aten._scaled_dot_product_flash_attention_for_cpu`` (returns the
output [B, H, L, D] and the log-sum-exp [B, H, L] torch's backward expects) and its ``_backward`` (grad of
q, k, v) in `nprof.compiler.ops.LOWERINGS`; both are kept whole (`ops.DECOMPOSE_SKIP`), so the forward saves
the same statistics the eager backward kernel would read. Each batch x head slice runs
`kernels.attention.flash_fwd_kernel` / `flash_bwd_kernel`. Unsupported: dropout_p > 0 (raises), head size
> 128, grouped-query heads (H of k/v != H of q).
"""

from __future__ import annotations

import math
from typing import Any

from nprof.compiler.kernels.attention import flash_bwd_kernel, flash_fwd_kernel
from nprof.compiler.lower import Const, Lowerer, as_operand
from nprof.compiler.ops import LOWERINGS, register, view_of
from nprof.compiler.views import View
from nprof.errors import UnsupportedOpError

__all__ = ["LOWERINGS"]


def _check(lw: Lowerer, q: View, k: View, dropout_p: float) -> None:
    if dropout_p:
        raise UnsupportedOpError(lw.unsupported_message(f"scaled_dot_product_attention with dropout_p={dropout_p}"))
    if len(q.shape) != 4 or len(k.shape) != 4:
        raise UnsupportedOpError(lw.unsupported_message("attention on tensors that are not [B, H, L, D]"))
    if q.shape[-1] > 128 or k.shape[-1] != q.shape[-1]:
        raise UnsupportedOpError(lw.unsupported_message(f"attention with head size {q.shape[-1]} (at most 128)"))
    if k.shape[1] != q.shape[1]:
        raise UnsupportedOpError(lw.unsupported_message("attention with grouped-query heads"))


def _mask(lw: Lowerer, attn_mask: Any, shape: tuple[int, ...]) -> View | None:
    """The additive mask broadcast to [B, H, L, S] (a boolean mask becomes 0 / -inf), or None."""
    if attn_mask is None:
        return None
    value = lw.value(attn_mask)
    if isinstance(value, Const):
        if value.value == 0.0:
            return None
        raise UnsupportedOpError(lw.unsupported_message("a constant non-zero attention mask"))
    if attn_mask.meta["val"].dtype.is_floating_point is False:
        raise UnsupportedOpError(lw.unsupported_message("a boolean attention mask inside the flash kernel"))
    op = as_operand(lw, value, shape)
    assert isinstance(op, View)
    return op


def _scale(q: View, scale: float | None) -> float:
    return float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[-1])


@register("_scaled_dot_product_flash_attention_for_cpu.default")
def _sdpa_fwd(
    lw: Lowerer, query: Any, key: Any, value: Any, dropout_p: float = 0.0, is_causal: bool = False,
    *, attn_mask: Any = None, scale: float | None = None,
) -> tuple[View, View]:  # fmt: skip
    q, k, v = view_of(lw, query), view_of(lw, key), view_of(lw, value)
    _check(lw, q, k, dropout_p)
    mask = _mask(lw, attn_mask, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
    out, lse = lw.new_tensor(index=0), lw.new_tensor(index=1)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            m = mask.select(0, b).select(0, h) if mask is not None else None
            lw.em.call(flash_fwd_kernel, out.select(0, b).select(0, h), lse.select(0, b).select(0, h),
                       q.select(0, b).select(0, h), k.select(0, b).select(0, h), v.select(0, b).select(0, h),
                       m, bool(is_causal), _scale(q, scale))  # fmt: skip
    return out, lse


@register("_scaled_dot_product_flash_attention_for_cpu_backward.default")
def _sdpa_bwd(
    lw: Lowerer, grad_out: Any, query: Any, key: Any, value: Any, out: Any, logsumexp: Any,
    dropout_p: float = 0.0, is_causal: bool = False, *, attn_mask: Any = None, scale: float | None = None,
) -> tuple[View, View, View]:  # fmt: skip
    q, k, v = view_of(lw, query), view_of(lw, key), view_of(lw, value)
    _check(lw, q, k, dropout_p)
    do, o, lse = view_of(lw, grad_out), view_of(lw, out), view_of(lw, logsumexp)
    mask = _mask(lw, attn_mask, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))
    dq, dk, dv = lw.new_tensor(index=0), lw.new_tensor(index=1), lw.new_tensor(index=2)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):

            def bh(x: View) -> View:
                return x.select(0, b).select(0, h)  # noqa: B023  (called at once, inside this iteration)

            lw.em.call(flash_bwd_kernel, bh(dq), bh(dk), bh(dv), bh(do), bh(q), bh(k), bh(v), bh(o), bh(lse),
                       bh(mask) if mask is not None else None, bool(is_causal), _scale(q, scale))  # fmt: skip
    return dq, dk, dv
