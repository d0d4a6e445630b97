"""Lowerings of scaled-dot-product attention to the fused flash-attention kernels.

Contract: importing this module registers ``aten._scaled_dot_product_flash_attention_for_cpu`` (returns the
output [B, H, L, D] and the log-sum-exp [B, H, L] torch's backward expects) and its ``_backward`` (grad of
q, k, v) in `nprof.compiler.ops.LOWERINGS`; both are kept whole (`ops.DECOMPOSE_SKIP`), so the forward saves
the same statistics the eager backward kernel would read. Each batch x head slice runs
`kernels.attention.flash_fwd_kernel` / `flash_bwd_kernel`. Grouped-query attention (``enable_gqa``: Hq a
multiple of Hkv): query head h attends with key/value head h // (Hq / Hkv), as torch's rule; the backward
sums the group's dK/dV (per-query-head temporaries, then a reduction over the group). Unsupported (raise):
dropout_p > 0 — eager CPU never runs this kernel with dropout (torch's CPU flash kernel refuses it, so SDPA
with dropout reaches the backend as its math decomposition, whose `native_dropout` draws eager's mask:
`ops_nn`), head size > 128.
"""

from __future__ import annotations

import math
from typing import Any

from nprof.compiler.kernels.attention import flash_bwd_kernel, flash_fwd_kernel
from nprof.compiler.kernels.reduce import reduce_kernel
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
    if k.shape[1] < 1 or q.shape[1] % k.shape[1]:
        raise UnsupportedOpError(
            lw.unsupported_message(f"attention with {q.shape[1]} query heads over {k.shape[1]} key/value heads")
        )


def _kv_head(q: View, k: View, h: int) -> int:
    """The key/value head query head `h` attends with: torch's grouped-query rule (``enable_gqa``: k and v
    repeat_interleave'd to the query heads), head h // (Hq / Hkv); the same head without grouping."""
    return h // (q.shape[1] // k.shape[1])


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
            kv = _kv_head(q, k, h)
            lw.em.call(flash_fwd_kernel, out.select(0, b).select(0, h), lse.select(0, b).select(0, h),
                       q.select(0, b).select(0, h), k.select(0, b).select(0, kv), v.select(0, b).select(0, kv),
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
    groups = q.shape[1] // k.shape[1]
    # grouped-query heads: each query head's dK/dV go to [B, Hkv, G, S, D] temporaries, summed over G after
    dk_all, dv_all = (dk, dv) if groups == 1 else (_per_query_head(lw, k, groups), _per_query_head(lw, v, groups))
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):

            def bh(x: View, head: int = h) -> View:
                return x.select(0, b).select(0, head)  # noqa: B023  (called at once, inside this iteration)

            def kvh(x: View) -> View:
                return bh(x, h) if groups == 1 else bh(x, h // groups).select(0, h % groups)  # noqa: B023

            kv = _kv_head(q, k, h)
            lw.em.call(flash_bwd_kernel, bh(dq), kvh(dk_all), kvh(dv_all), bh(do), bh(q), bh(k, kv), bh(v, kv),
                       bh(o), bh(lse), bh(mask) if mask is not None else None, bool(is_causal),
                       _scale(q, scale))  # fmt: skip
    if groups > 1:
        lw.em.call(reduce_kernel, dk, dk_all, [2], "add", 1.0)
        lw.em.call(reduce_kernel, dv, dv_all, [2], "add", 1.0)
    return dq, dk, dv


def _per_query_head(lw: Lowerer, kv: View, groups: int) -> View:
    """A [B, Hkv, G, S, D] float32 temporary: one key/value gradient per query head of each group."""
    b, heads, s, d = kv.shape
    return lw.temp_tensor((b, heads, groups, s, d), "float32")
