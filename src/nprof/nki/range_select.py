"""`nisa.range_select` (AWS NKI 2.26 reference; NeuronCore-v3+): one VectorE RANGE_SELECT instruction.

Each element of `on_true_tile` whose free index + `range_start` satisfies `comp_op0(i, bound0)` and
`comp_op1(i, bound1)` (bounds: one fp32 value per partition) is kept, the others become `on_false_value`;
the max of the result per partition goes to the accumulator register and to `reduce_res` when given.
`reduce_cmd` drives the register as on VectorE: `reset_reduce` starts a new max, `reduce` folds this
instruction's max into the register (a chain of range_selects over a long row), `idle`/`reset` do not read it.
The register is modelled as a hidden [P, 1] fp32 tile per kernel: read and written by the instruction itself,
so a chain costs nothing extra and orders like the hardware's register. Cost: max(MIN_II, N) VectorE cycles.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from nprof.arch.isa import Engine, Opcode
from nprof.nki import compute as _c
from nprof.nki import trace as _trace
from nprof.nki.calls import beta2
from nprof.nki.isa_enums import alu_name, fp32, reduce_cmd, reduce_name
from nprof.nki.source import kernel_error
from nprof.nki.tensor import NkiTensor

_COMPARISONS = ("is_equal", "is_lt", "is_le", "is_gt", "is_ge")
_REGISTER: weakref.WeakKeyDictionary[Any, NkiTensor] = weakref.WeakKeyDictionary()


def _register(parts: int) -> NkiTensor:
    builder = _trace.current()
    reg = _REGISTER.get(builder)
    if reg is None or reg.shape[0] < parts:
        reg = _REGISTER[builder] = _c.new_tile((128, 1), "float32")
    return reg[0:parts, :]


@beta2(("dst", "on_true_tile", "comp_op0", "comp_op1", "bound0", "bound1", "reduce_cmd", "reduce_res", "reduce_op",
        "range_start", "on_false_value", "name"), at=None)  # fmt: skip
def range_select(*, on_true_tile: Any, comp_op0: Any, comp_op1: Any, bound0: Any, bound1: Any,
                 reduce_cmd: Any = reduce_cmd.idle, reduce_res: Any = None, reduce_op: Any = np.amax,
                 range_start: int = 0, on_false_value: float | None = fp32.min, mask: Any = None,
                 dtype: Any = None, dst: Any = None, name: Any = None) -> NkiTensor:  # fmt: skip
    """See module doc (`dst`: beta 2's destination, else a new tile)."""
    x = _c.tile(on_true_tile, "on_true_tile")
    cmps = (alu_name(comp_op0), alu_name(comp_op1))
    if any(c not in _COMPARISONS for c in cmps):
        raise kernel_error(
            f"range_select comparisons must be np.equal/less/less_equal/greater/greater_equal, got {cmps}"
        )
    if reduce_op is not None and reduce_name(reduce_op) != "max":
        raise kernel_error("range_select reduces with np.max only (AWS NKI 2.26)")
    b0, b1 = _c.tile(bound0, "bound0"), _c.tile(bound1, "bound1")
    for b in (b0, b1):
        if b.shape[0] != x.shape[0] or _c._numel_free(b) != 1:
            raise kernel_error(f"range_select bounds must be [{x.shape[0]}, 1] tiles, got {b.shape}")
    cmd = int(getattr(reduce_cmd, "value", reduce_cmd))
    res = _c.result_tile(dst, x.shape, _c.dname(dtype) if dtype is not None else x.dtype_name)
    outs, ins = [res], [x, b0, b1]
    if cmd in (2, 3) or reduce_res is not None:  # reduce / reset_reduce, or a reduce_res to fill
        reg = _register(x.shape[0])
        if cmd == 2:
            ins.append(reg)
        outs.append(reg)
        if reduce_res is not None:
            outs.append(reduce_res)
    fill = fp32.min if on_false_value is None else float(on_false_value)
    views = _c.apply_mask(mask, x.shape, res, x)
    _c.emit(Engine.VECTOR, Opcode.RANGE_SELECT, [views[0], *outs[1:]], [views[1], *ins[1:]], cmp0=cmps[0],
            cmp1=cmps[1], range_start=int(range_start), fill=fill, accumulate=cmd == 2)  # fmt: skip
    return res
