"""Lower one AOTAutograd FX graph (core ATen ops) to one Program.

Contract: `lower_graph(gm, plan)` walks the graph in order. Placeholders become HBM input tensors (named by
`plan.input_names`), graph constants become weight tensors with their values. Each `call_function` node is
lowered by its entry in `nprof.compiler.lowerings.LOWERINGS` inside an emitter scope carrying the node's
``layer``, ``hlo_name`` and user ``source``; view ops only change `View` metadata; every other op reads its
operands from HBM and writes a new HBM tensor (kind "output" when the node is a graph output, else
"internal" — DMAs to/from internal tensors are the spill saves/reloads). Nodes the registry does not know
raise `UnsupportedOpError` naming the op and the user's source line. Returns the Program and the
`OutputPlan` the runtime uses to turn device outputs back into torch tensors.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nprof.compiler import finite, graphinfo
from nprof.compiler.emit import Emitter
from nprof.compiler.views import View, numel
from nprof.device.plan import share_derived
from nprof.errors import KernelError, NprofError, UnsupportedOpError

# torch dtype name -> program dtype (the device computes in fp32; integers/bools travel as int32/uint8)
PROGRAM_DTYPE = {
    "float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "float32",
    "int64": "int32", "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "uint8",
}  # fmt: skip


# program meta key: JSON {input name: {"bernoulli": keep probability, "dtype": torch dtype}} of the ``rng.*``
# inputs the runtime draws from torch's generator, in input order, as eager torch would (`runtime.draw_rng`)
RNG_DRAWS_META = "rng_draws"
GUARD_META = "nonfinite_guard"  # JSON list: graph inputs whose non-finite values a regather would spread (`regather`)


# What an unsupported-op error advises; the eager fallback's warning leaves it out (the fallback is already on).
FALLBACK_ADVICE = (
    "; rewrite it with supported ops or set NPROF_FALLBACK=eager to run unsupported graphs on the CPU "
    "(see docs/compile.md for the op list)"
)


@dataclass(frozen=True)
class Const:
    """A compile-time constant tensor filled with one value (full, scalar_tensor, zeros_like...)."""

    value: float
    shape: tuple[int, ...]
    dtype: str  # torch dtype name


@dataclass(frozen=True)
class OutputSlot:
    """Where the runtime finds graph output i: a program tensor, a graph input, a constant, or None."""

    kind: str  # "tensor" | "input" | "input_view" (a view of a graph input, rebuilt on the host) | "const" | "none"
    name: str = ""  # program tensor name (tensor) or input index as text (input)
    shape: tuple[int, ...] = ()
    dtype: str = "float32"  # torch dtype name
    stride: tuple[int, ...] = ()
    value: float = 0.0
    offset: int = 0  # input_view: element offset into the input


@dataclass
class GraphPlan:
    """What the caller knows about a graph beyond its nodes."""

    name: str  # program name, e.g. "MODULE_<hash>_fw"
    kind: str  # "fw" | "bw" | "inference"
    input_names: Sequence[str]  # one per placeholder
    output_names: Sequence[str]  # one per graph output
    preset: str = "trn1"
    input_values: Mapping[str, np.ndarray] = field(default_factory=dict)  # compile-time values (stored as hints)
    layer_by_seq: Mapping[int, tuple[str, str | None]] = field(default_factory=dict)  # fw seq_nr -> (layer, source)
    nonfinite_inputs: frozenset[str] = frozenset()  # inputs lowered as holding +-inf/NaN (never regathered)
    regathers: bool = True  # False: no regather at all (run when a regather check failed, `regather_check`)


class Lowerer:
    """State of one lowering: the emitter, the value of every node, the output tensors."""

    def __init__(self, gm: Any, plan: GraphPlan) -> None:
        self.gm = gm
        self.plan = plan
        self.em = Emitter(plan.name, plan.preset)
        self.em.builder.regathers = plan.regathers
        self.env: dict[str, Any] = {}
        self.node: Any = None
        self._tmp = 0
        self.nonfinite: set[str] = set()  # nodes whose values may hold +-inf/NaN (`nprof.compiler.finite`)
        self.taint: dict[str, frozenset[str]] = {}  # node -> float inputs whose inf would reach it (`finite.taint`)
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        self.outputs: list[Any] = (
            list(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
        )
        self.rng_draws: dict[str, dict[str, Any]] = {}  # rng.* input -> how the runtime draws it (RNG_DRAWS_META)
        self.output_tensor: dict[str, str] = {}  # node name -> program output tensor name
        for node, name in zip(self.outputs, plan.output_names, strict=True):
            if node is not None and hasattr(node, "name") and node.name not in self.output_tensor:
                self.output_tensor[node.name] = name

    # ----- helpers for lowerings -----
    def value(self, arg: Any) -> Any:
        if hasattr(arg, "op") and hasattr(arg, "name"):
            return self.env[arg.name]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self.value(a) for a in arg)
        return arg

    def meta(self, node: Any | None = None) -> Any:
        return (node or self.node).meta.get("val")

    def new_tensor(
        self, shape: Sequence[int] | None = None, dtype: str | None = None, index: int | None = None, node: Any = None
    ) -> View:
        """A fresh HBM tensor for the result of `node` (default: the current node); it is the graph output
        tensor when that node is a graph output."""
        current = self.node
        if node is not None:
            self.node = node
        try:
            return self._new_tensor(shape, dtype, index)
        finally:
            self.node = current

    def temp_tensor(self, shape: Sequence[int], dtype: str | None) -> View:
        """A fresh internal HBM tensor for a temporary of the current node (never a graph output);
        `dtype` is a torch dtype name (None: the node's)."""
        tdtype = dtype or graphinfo.torch_dtype_name(self.meta().dtype)
        pdtype = PROGRAM_DTYPE.get(tdtype)
        if pdtype is None:
            raise UnsupportedOpError(self.unsupported_message(f"dtype {tdtype}"))
        self._tmp += 1
        name = f"{self.node.name}.tmp{self._tmp}"
        shape = tuple(int(s) for s in shape)
        self.em.hbm_tensor(name, shape, pdtype, "internal")
        return View.whole(name, pdtype, shape)

    def _new_tensor(self, shape: Sequence[int] | None, dtype: str | None, index: int | None) -> View:
        val = self.meta()
        if index is not None:
            val = val[index]
        shape = tuple(int(s) for s in (shape if shape is not None else val.shape))
        tdtype = dtype or graphinfo.torch_dtype_name(val.dtype)
        pdtype = PROGRAM_DTYPE.get(tdtype)
        if pdtype is None:
            raise UnsupportedOpError(self.unsupported_message(f"dtype {tdtype}"))
        if index is None:
            name = self.output_tensor.get(self.node.name)
        else:  # a multi-output op: use the output tensor of the getitem that picks this result
            name = next(
                (
                    self.output_tensor[u.name]
                    for u in self.node.users
                    if u.args[1:2] == (index,) and u.name in self.output_tensor
                ),
                None,
            )
        if name is not None and name not in self.em.tensors:
            self.em.hbm_tensor(name, shape, pdtype, "output")
            return View.whole(name, pdtype, shape)
        self._tmp += 1
        name = f"{self.node.name}" if index is None else f"{self.node.name}.{index}"
        if name in self.em.tensors:
            name = f"{name}#{self._tmp}"
        self.em.hbm_tensor(name, shape, pdtype, "internal")
        if self._feeds_output(self.node):
            self.em.builder.promotable.add(name)  # may become a graph output (`_outputs`): worth staging
        return View.whole(name, pdtype, shape)

    _VIEW_OPS = ("view", "reshape", "squeeze", "unsqueeze", "aten.t.", "permute", "alias", "expand", "getitem")

    def _feeds_output(self, node: Any, depth: int = 0) -> bool:
        """Does `node` reach a graph output through view ops only (so its tensor may be promoted to it)?"""
        for user in node.users:
            if not any(v in str(user.target) for v in self._VIEW_OPS):
                continue
            if user.name in self.output_tensor or (depth < 8 and self._feeds_output(user, depth + 1)):
                return True
        return False

    def unsupported_message(self, what: str) -> str:
        node = self.node
        where = graphinfo.user_source(node) if node is not None else None
        code = graphinfo.user_code(node) if node is not None else ""
        at = f" at {where}" if where else ""
        line = f" ({code})" if code else ""
        return f"cannot compile {what}{at}{line}{FALLBACK_ADVICE}"

    # ----- the walk -----
    def run(self) -> tuple[Any, list[OutputSlot]]:
        from nprof.compiler.lowerings import LOWERINGS, lookup

        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(self.plan.input_names):
            raise NprofError("internal: input names do not match the graph's placeholders")
        for node, name in zip(placeholders, self.plan.input_names, strict=True):
            val = node.meta.get("val")
            if not hasattr(val, "shape"):
                self.env[node.name] = val  # a symbolic/int input (not expected with static shapes)
                continue
            tdtype = graphinfo.torch_dtype_name(val.dtype)
            pdtype = PROGRAM_DTYPE.get(tdtype)
            if pdtype is None:
                self.node = node
                raise UnsupportedOpError(self.unsupported_message(f"an input of dtype {tdtype}"))
            shape = tuple(int(s) for s in val.shape)
            if 0 in shape:  # an empty input (e.g. embedding_bag's unused offset2bag) holds no data
                self.env[node.name] = Const(0.0, shape, tdtype)
                continue
            self.em.hbm_tensor(name, shape, pdtype, "input")
            self.env[node.name] = View.whole(name, pdtype, shape)
            self._mark_input(node, name, tdtype)
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                self._lower_constant(node)
            elif node.op == "call_function":
                self.node = node
                fn = lookup(node.target)
                if fn is None:
                    raise UnsupportedOpError(self.unsupported_message(f"op {graphinfo.op_name(node.target)!r}"))
                if finite.may_be_nonfinite(node, self.nonfinite):
                    self.nonfinite.add(node.name)
                self.em.marking_nonfinite = node.name in self.nonfinite
                self.taint[node.name] = finite.taint(node, self.taint)
                self.em.taint = self.taint[node.name]
                with self.em.scope(self.layer(node), graphinfo.hlo_name(node), graphinfo.user_source(node)):
                    try:
                        self.env[node.name] = fn(self, *node.args, **node.kwargs)
                    except UnsupportedOpError as err:
                        if str(err).startswith("cannot compile"):
                            raise
                        raise UnsupportedOpError(self.unsupported_message(str(err))) from None
                    except KernelError as err:
                        raise NprofError(f"internal compiler error in {graphinfo.hlo_name(node)}: {err}") from err
        self.em.marking_nonfinite = False
        self.em.taint = frozenset()
        assert LOWERINGS
        slots = self._outputs()
        meta = {"graph_kind": self.plan.kind, "producer": "nprof.compiler", "module": self.plan.name}
        if self.rng_draws:
            meta[RNG_DRAWS_META] = json.dumps(self.rng_draws, sort_keys=True)
        builder = self.em.builder
        program = self.em.build(meta)
        guards = json.dumps(sorted(getattr(builder, "guard_inputs", ())))  # complete once built (stages included)
        done = dataclasses.replace(program, meta={**program.meta, GUARD_META: guards})
        share_derived(program, done)  # (the list scheduler's columns and plan: the same instructions)
        return done, slots

    def _mark_input(self, node: Any, name: str, tdtype: str) -> None:
        """A float input: the taint of its own name; marked non-finite when the plan says it holds inf/NaN."""
        if not tdtype.startswith(("float", "bfloat")):
            return
        self.taint[node.name] = frozenset({name})
        self.em.builder.input_taint[name] = frozenset({name})
        if name in self.plan.nonfinite_inputs:
            self.nonfinite.add(node.name)
            self.em.builder.nonfinite.add(name)

    def layer(self, node: Any) -> str:
        layer = graphinfo.layer_from_module_stack(node)
        if layer is not None:
            return layer
        seq = node.meta.get("seq_nr")
        if seq is not None and seq in self.plan.layer_by_seq:
            return self.plan.layer_by_seq[seq][0]
        return "model" if self.plan.kind != "bw" else "backward"

    def _lower_constant(self, node: Any) -> None:
        value = getattr(self.gm, node.target)
        if not hasattr(value, "shape"):
            self.env[node.name] = value
            return
        arr = value.detach().cpu()
        tdtype = graphinfo.torch_dtype_name(arr.dtype)
        pdtype = PROGRAM_DTYPE.get(tdtype)
        if pdtype is None:
            self.node = node
            raise UnsupportedOpError(self.unsupported_message(f"a constant of dtype {tdtype}"))
        from nprof.compiler.runtime import to_numpy

        if arr.numel() == 0:
            self.env[node.name] = Const(0.0, tuple(arr.shape), tdtype)
            return
        name = f"const.{node.target}"
        self.em.hbm_tensor(name, tuple(arr.shape), pdtype, "weight", to_numpy(arr, pdtype))
        if finite.constant_nonfinite(arr):
            self.nonfinite.add(node.name)
            self.em.builder.nonfinite.add(name)
        self.env[node.name] = View.whole(name, pdtype, tuple(arr.shape))

    def release(self) -> None:
        """Drop the state of a finished lowering (the built Program does not share it). The NKI builder's HBM
        tensors point back at the builder, a reference cycle that only the cyclic GC would free, with full passes
        over the whole heap (measured on resnet18: ~200k objects, ~1 s of GC in the first step); cleared here,
        reference counting frees it all at once."""
        self.em.builder.__dict__.clear()
        self.em.__dict__.clear()
        self.__dict__.clear()

    def _outputs(self) -> list[OutputSlot]:
        from nprof.compiler.kernels.matmul import copy_kernel

        placeholders = [n.name for n in self.gm.graph.nodes if n.op == "placeholder"]
        slots: list[OutputSlot] = []
        for node, _name in zip(self.outputs, self.plan.output_names, strict=True):
            if node is None or not hasattr(node, "name"):
                slots.append(OutputSlot("none"))
                continue
            val = node.meta.get("val")
            tdtype = graphinfo.torch_dtype_name(val.dtype)
            shape = tuple(int(s) for s in val.shape)
            stride = tuple(int(s) for s in val.stride())
            if node.name in placeholders:
                slots.append(OutputSlot("input", str(placeholders.index(node.name)), shape, tdtype, stride))
                continue
            value = self.env[node.name]
            if isinstance(value, Const):
                slots.append(OutputSlot("const", "", shape, tdtype, stride, float(value.value)))
                continue
            if isinstance(value, View) and self.em.tensors[value.tensor].kind == "input":
                index = list(self.plan.input_names).index(value.tensor)
                slots.append(
                    OutputSlot("input_view", str(index), value.shape, tdtype, value.strides, 0.0, value.offset)
                )
                continue
            tensor = self.output_tensor[node.name]
            whole = self._whole_tensor(value, PROGRAM_DTYPE.get(tdtype))
            if whole is not None and whole != tensor and tensor not in self.em.tensors:
                if self.em.tensors[whole].kind == "internal":  # the graph output is all of an intermediate:
                    self.em.promote(whole, tensor)  # that tensor is the output, no copy
                whole = self.em.renames.get(whole, whole)
                self.env[node.name] = value
                slots.append(OutputSlot("tensor", whole, shape, tdtype, stride))
                continue
            if not (isinstance(value, View) and value.tensor == tensor):
                self.node = node
                with self.em.scope(self.layer(node), graphinfo.hlo_name(node), graphinfo.user_source(node)):
                    dst = self.new_tensor()
                    if dst.tensor != tensor:  # already materialised for an earlier slot
                        dst = View.whole(tensor, self.em.tensors[tensor].dtype, shape)
                    else:
                        self.em.call(copy_kernel, dst, as_operand(self, value, shape))
                self.env[node.name] = dst
            slots.append(OutputSlot("tensor", tensor, shape, tdtype, stride))
        return slots


    def _whole_tensor(self, value: Any, dtype: str | None) -> str | None:
        """The program tensor (internal or output, of `dtype`) of which `value` is a contiguous view of all
        the elements in order, or None."""
        if not isinstance(value, View) or value.offset != 0 or not value.is_contiguous:
            return None
        decl = self.em.tensors.get(value.tensor)
        if decl is None or decl.kind not in ("internal", "output") or decl.dtype != dtype:
            return None
        return value.tensor if numel(decl.shape) == numel(value.shape) else None


def as_operand(lw: Lowerer, value: Any, shape: Sequence[int]) -> View | float:
    """A View broadcast to `shape`, or a float for scalars/constants."""
    if isinstance(value, Const):
        return float(value.value)
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, View):
        if tuple(value.shape) == tuple(shape):
            return value
        lead = len(shape) - len(value.shape)
        v = value
        for _ in range(lead):
            v = v.unsqueeze(0)
        return v.expand(shape)
    raise UnsupportedOpError(lw.unsupported_message(f"an operand of type {type(value).__name__}"))


def lower_graph(gm: Any, plan: GraphPlan) -> tuple[Any, list[OutputSlot]]:
    """Lower `gm` (see module doc) on a fresh thread, waiting for it; its exception, if any, is raised here.

    Why a thread (measured): the same lowering of resnet18's backward, with identical work counts (Python
    calls, dependency entries scanned), took 8-10 s CPU when torch.compile's first call came from inside a
    function and 4-5 s from module level; on a fresh thread it takes 4-5 s from both. Our explanation (not
    verified inside CPython): 3.11 keeps a thread's frames on chunked data stacks, and at some caller depths
    the hot calls straddle a chunk boundary, allocating and freeing a chunk on every call; a new thread starts
    on an empty stack. The lowering needs no thread-local state of the caller (it runs outside torch's fake
    mode either way)."""
    result: list[tuple[Any, list[OutputSlot]]] = []
    error: list[BaseException] = []

    def work() -> None:
        try:
            lowerer = Lowerer(gm, plan)
            result.append(lowerer.run())
            lowerer.release()
        except BaseException as exc:  # re-raised in the caller's thread
            error.append(exc)

    worker = threading.Thread(target=work, name=f"nprof-lower-{plan.name}", daemon=True)
    worker.start()
    worker.join()
    if error:
        raise error[0]
    return result[0]
