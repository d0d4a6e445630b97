"""Lowering of torch.distributed functional collectives to CC-core instructions.

Contract: registers in `nprof.compiler.ops.LOWERINGS` the ops torch.compile traces for
`torch.distributed._functional_collectives` (and for in-place `dist.all_reduce` inside compiled code):

* `_c10d_functional.all_reduce(x, reduce_op, group_name)` -> one ALL_REDUCE (op add/maximum/minimum/
  multiply for "sum"/"max"/"min"/"product"; "avg" is refused: its divisor is the capture's worker count,
  unknown at compile time — all-reduce with "sum" and divide);
* `all_gather_into_tensor(x, group_size, group_name)` -> ALL_GATHER; `reduce_scatter_tensor(x, reduce_op,
  group_size, group_name)` -> REDUCE_SCATTER; `all_to_all_single(x, None, None, group_name)` -> ALL_TO_ALL
  (equal splits only). Their output shapes depend on the group size traced, so the instruction's group is
  `range(group_size)` when it is > 1;
* `wait_tensor(x)` and the `_c10d_functional` in-place variants' results alias their input (the device runs
  collectives synchronously on the CC-cores; the instruction's dependencies order everything).
The instruction reads the whole (contiguous) input from HBM and writes a new HBM tensor; every all-reduce group
is "all workers" (the job size is chosen at capture: `nprof capture -r N`). CC instructions go round-robin
over the preset's CC-cores (tracks `cc.<k>`). Each carries `traced_world`: the size of the group it was traced
for (torch.distributed's world size at compile time, 1 without a process group), so a capture of another
size can say how the graph scaled (`scaling_note`).
Inside a multi-process job (torchrun) the instructions exchange their data with the other processes at run
time (`nprof.device.process_group`); a collective on a subgroup of the job's ranks is refused at compile time
(UnsupportedOpError: nprof exchanges across the whole world only).
"""

from __future__ import annotations

from typing import Any

from nprof.arch.isa import Access, Engine, Opcode, Space, attrs
from nprof.compiler.lower import Lowerer
from nprof.compiler.views import View, numel
from nprof.errors import UnsupportedOpError

_REDUCE_OPS = {"sum": "add", "max": "maximum", "min": "minimum", "product": "multiply", "prod": "multiply"}
_NS = "_c10d_functional"


def _whole(v: View) -> Access:
    n = numel(v.shape)
    return Access(Space.HBM, v.tensor, v.dtype, v.offset, 1, ((1, max(n, 1)),), 0, 0)


def _input(lw: Lowerer, x: Any) -> View:
    from nprof.compiler.ops import as_contiguous, view_of

    return as_contiguous(lw, view_of(lw, x))


def _reduce_op(lw: Lowerer, reduce_op: Any) -> str:
    name = str(reduce_op).lower().rsplit(".", 1)[-1]
    if name == "avg":
        raise UnsupportedOpError(
            lw.unsupported_message("an all-reduce with reduce_op 'avg' (use 'sum' and divide by the world size)")
        )
    if name not in _REDUCE_OPS:
        raise UnsupportedOpError(lw.unsupported_message(f"a collective with reduce_op {reduce_op!r}"))
    return _REDUCE_OPS[name]


def traced_world(lw: Lowerer, group_name: Any) -> int:
    """The size of the process group a collective was traced on (1 without torch.distributed); refuses a
    subgroup of a multi-process job's ranks (see module doc)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return 1
    world = dist.get_world_size()
    if world > 1 and group_name is not None:
        from torch.distributed.distributed_c10d import _resolve_process_group

        ranks = sorted(dist.get_process_group_ranks(_resolve_process_group(group_name)))
        if ranks != list(range(world)):
            raise UnsupportedOpError(
                lw.unsupported_message(f"a collective on a subgroup (ranks {ranks} of {world}); use the world group")
            )
    return world


def _emit(lw: Lowerer, opcode: Opcode, src: View, op: str | None, group_name: Any, group_size: int = 1) -> View:
    traced = traced_world(lw, group_name)
    out = lw.new_tensor()
    em = lw.em
    core = getattr(em, "_cc_next", 0)
    em._cc_next = core + 1  # type: ignore[attr-defined]
    group = tuple(range(group_size)) if group_size > 1 else None
    em._emit(  # the emitter's generic instruction entry (dependencies, scope metadata)
        Engine.CC, opcode, (_whole(out),), (_whole(src),), attrs(op=op, group=group, traced_world=traced),
        core % em.preset.cc_cores,
    )  # fmt: skip
    return out


def _all_reduce(lw: Lowerer, x: Any, reduce_op: Any, group_name: Any = None, *_: Any) -> View:
    return _emit(lw, Opcode.ALL_REDUCE, _input(lw, x), _reduce_op(lw, reduce_op), group_name)


def _all_gather(lw: Lowerer, x: Any, group_size: int, group_name: Any = None, *_: Any) -> View:
    return _emit(lw, Opcode.ALL_GATHER, _input(lw, x), None, group_name, int(group_size))


def _reduce_scatter(lw: Lowerer, x: Any, reduce_op: Any, group_size: int, group_name: Any = None, *_: Any) -> View:
    return _emit(lw, Opcode.REDUCE_SCATTER, _input(lw, x), _reduce_op(lw, reduce_op), group_name, int(group_size))


def _all_to_all(lw: Lowerer, x: Any, output_split_sizes: Any, input_split_sizes: Any, group_name: Any = None) -> View:
    if len(set(output_split_sizes or ())) > 1 or len(set(input_split_sizes or ())) > 1:
        raise UnsupportedOpError(lw.unsupported_message("all_to_all_single with unequal splits"))
    return _emit(lw, Opcode.ALL_TO_ALL, _input(lw, x), None, group_name)


def _wait(lw: Lowerer, x: Any, *_: Any) -> Any:
    return lw.value(x)


def register_collectives(table: dict[str, Any]) -> None:
    """Add the functional-collective lowerings to the compiler's op table."""
    table[f"{_NS}.all_reduce.default"] = _all_reduce
    table[f"{_NS}.all_reduce_.default"] = _all_reduce
    table[f"{_NS}.all_gather_into_tensor.default"] = _all_gather
    table[f"{_NS}.reduce_scatter_tensor.default"] = _reduce_scatter
    table[f"{_NS}.all_to_all_single.default"] = _all_to_all
    table[f"{_NS}.wait_tensor.default"] = _wait


def ddp_notice() -> str | None:
    """One line for a multi-process job whose compiled graphs have no collectives (DDP all-reduces gradients
    in hooks outside the graphs), else None."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() <= 1:
        return None
    return (
        f"nprof: {dist.get_world_size()}-process job: collectives outside compiled graphs (DDP's gradient "
        "all-reduce) run through torch.distributed on the host, not in the graphs' device profiles; "
        "`nprof capture -s DIR -- torchrun ...` records them as CC work in each rank's system profile"
    )
