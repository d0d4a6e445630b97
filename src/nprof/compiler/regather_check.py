"""The device-side check that every cross-partition move (`nprof.compiler.regather`) of a program was exact.

Contract: a regather multiplies a kept tile by a 0/1 selection matrix on TensorE. It is exact when no moved
element is +-inf or NaN; otherwise 0 x inf = NaN lands in other output elements of the element's column. Its
result then holds a NaN: an inf or NaN moved element puts 0 x itself = NaN in every other output partition of
its matmul, so a result with at least two partitions and no NaN is exact (each output element is one moved
element times 1 plus zeros), and a one-partition result is always exact. Values that overflow at run time
(``x.exp()`` on large inputs, ``x * 1e30``) cannot be told at compile time, so `RegatherCheck.evacuate` copies
each regather's PSUM result to SBUF with one VectorE TENSOR_SCALAR (``x * 1.0``, which keeps every value and
the sign of zero) that also sums each row into a column of the program's check tile ([pmax, `COLUMNS`] fp32,
zeroed once; columns folded into the first when full). A row holding a NaN or inf has a non-finite sum (so does
one whose finite sum overflows: a false alarm, never a missed one); sums of checked rows only ever add finite
values to them. `finish` stores them (summed into one when more than `STORED_COLUMNS`) into the program output
`CHECK_NAME` (staged with the other small outputs, `nprof.compiler.staging`).
`check_failed(outputs)`: is that output present and non-finite (some regather may have been inexact)? The
backend then runs the graph lowered without regathers (`nprof.compiler.backend`), whose results are eager's.
Cost per regather: none beyond the copy it replaces (same element count; one more [P, 1] write); per program:
one memset, and a copy of each stored column into the output stage (or their DMAs).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from nprof.arch.isa import Access, Space
from nprof.nki.tensor import NkiTensor

CHECK_NAME = "check.regather"  # program output: row sums of every regathered tile (non-finite: re-run without)
ONEHOT_CHECK_NAME = "check.onehot"  # the same for one-hot matmuls (`kernels.onehot`: embedding and its backward)
CONV_CHECK_NAME = "check.conv"  # the same for the conv kernels' results (`nprof.compiler.conv_check`)
NONFINITE_CHECK_NAME = "check.nonfinite"  # results of kernels whose inf/NaN are not eager's (`nonfinite_checked`)
STORED_COLUMNS = 4  # check columns stored as they are (as many as the output stage takes); more are summed first
COLUMNS = 64  # check columns (256 bytes a partition of SBUF) before they are folded into the first


class RegatherCheck:
    """The check tile of one program (see module doc); `owns(base)` tells the builder not to free it."""

    def __init__(self, builder: Any, name: str = CHECK_NAME) -> None:
        self.builder = weakref.proxy(builder)  # no cycle: the builder is freed by reference counting alone
        self.name = name  # the program output of the sums
        self.tile: NkiTensor | None = None
        self.used = 0  # columns written so far (after the last fold)

    def owns(self, base: object) -> bool:
        return self.tile is not None and base is self.tile.base

    def evacuate(self, acc: NkiTensor, dst: NkiTensor, op: str = "multiply", operand: object = 1.0) -> NkiTensor:
        """`dst` = `acc` [P, N] `op` `operand` (default ``x * 1.0``: a copy of a regather's PSUM result), its row
        sums into the next check column; returns `dst`."""
        from nprof.nki import isa_ext

        column = self.next_column()
        parts = acc.shape[0]
        return isa_ext.tensor_scalar_reduce(data=acc, op0=op, operand0=operand, reduce_op="add",
                                            reduce_res=column[0:parts, :], dst=dst)  # fmt: skip

    def next_column(self) -> NkiTensor:
        """The next free check column [pmax, 1] (the tile made and zeroed on first use; folded when full)."""
        from nprof.nki import isa as nisa
        from nprof.nki import language as nl

        pmax = self.builder.preset.pmax
        if self.tile is None:
            self.tile = nl.ndarray((pmax, COLUMNS), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=self.tile, value=0.0, engine=nisa.gpsimd_engine)  # off the VectorE queue
        elif self.used == COLUMNS:  # fold: column 0 = the sum of all (a non-finite one stays non-finite)
            total = nisa.tensor_reduce("add", self.tile, axis=1, keepdims=True)
            nisa.tensor_copy(total, dst=self.tile[:, 0:1])
            self.used = 1
        j = self.used
        self.used += 1
        return self.tile[:, j : j + 1]

    def finish(self) -> bool:
        """Store the sums of the used check columns into `CHECK_NAME` [pmax] (inside a kernel call, before the
        output stages finish: a small output, it rides in their one DMA); False when nothing was checked."""
        from nprof.compiler.kernels.hbm import store
        from nprof.nki import isa as nisa

        if self.tile is None:
            return False
        pmax, k = self.builder.preset.pmax, self.used
        columns = self.tile
        if k > STORED_COLUMNS:
            columns, k = nisa.tensor_reduce("add", self.tile[:, 0:k], axis=1, keepdims=True), 1
        self.builder.hbm_tensor(self.name, (pmax * k,), "float32", "output", None)
        for j in range(k):  # one column a store: each a chunk the output stage takes (`staging.OutputStage`)
            store(Access(Space.HBM, self.name, "float32", j * pmax, pmax, ((1, 1),), 0, 1), columns[:, j : j + 1])
        return True


def finish_check(check: RegatherCheck) -> bool:
    """`check.finish()` as a kernel for `ProgramBuilder.call` (a plain function: the NKI tracer caches the kernels
    it is given, and a bound method would keep the check, its tile and so the builder alive)."""
    try:
        return check.finish()
    finally:
        check.tile = None


def failed_checks(outputs: Mapping[str, np.ndarray]) -> frozenset[str]:
    """The checks (`CHECK_NAME`, `ONEHOT_CHECK_NAME`) of the run that gave `outputs` (program outputs by name)
    whose sums are non-finite: a matmul of that kind may have spread a NaN (`CONV_CHECK_NAME` too:
    `nprof.compiler.conv_check`; `NONFINITE_CHECK_NAME`: see `nonfinite_checked`)."""
    return frozenset(
        name for name in (CHECK_NAME, ONEHOT_CHECK_NAME, CONV_CHECK_NAME, NONFINITE_CHECK_NAME)
        if name in outputs and not bool(np.isfinite(outputs[name]).all())
    )  # fmt: skip


def checked_copy(acc: NkiTensor, dst: NkiTensor | None = None) -> NkiTensor:
    """`acc` (the PSUM result of a one-hot matmul) copied to SBUF (into `dst` when given), its row sums checked
    by the builder's `onehot_check` when it has one (a plain copy otherwise)."""
    from nprof.nki import isa as nisa
    from nprof.nki import language as nl
    from nprof.nki import trace

    check = getattr(trace.current(), "onehot_check", None)
    if check is None:
        return nisa.tensor_copy(acc, dst=dst) if dst is not None else nisa.tensor_copy(acc)
    res = dst if dst is not None else nl.ndarray(acc.shape, dtype=nl.float32, buffer=nl.sbuf)
    check.evacuate(acc, res)
    return res


def nonfinite_checked(x: NkiTensor, op: str = "multiply", operand: object = 1.0) -> NkiTensor:
    """``x <op> operand`` (one VectorE TENSOR_SCALAR, also when ``x`` is in PSUM), its row sums
    checked by the builder's `nonfinite_check`: for results of kernels whose +-inf/NaN results are not eager's
    (flash attention's output, log-sum-exp and gradients, layer norm's saved statistics; var's results by
    `conv_check.check_kernel`). A non-finite one makes the backend
    run the call eagerly with a warning (`nprof.compiler.backend`); finite ones are eager's."""
    from nprof.nki import isa as nisa
    from nprof.nki import language as nl
    from nprof.nki import trace

    check = getattr(trace.current(), "nonfinite_check", None)
    if check is None:
        return nisa.tensor_scalar(x, op, operand)
    return check.evacuate(x, nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf), op, operand)
