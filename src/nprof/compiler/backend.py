"""The ``nprof`` torch.compile backend: AOTAutograd graphs -> Programs on the virtual NeuronCore.

Contract: ``torch.compile(model, backend="nprof", options={...})`` (registered through the
``torch_dynamo_backends`` entry point) or ``backend=nprof_backend``. Dynamo's graph goes through AOTAutograd
with the core-ATen decompositions (minus `ops.DECOMPOSE_SKIP`); the forward, backward and inference graphs
are each lowered to ONE Program (`lower.lower_graph`), stored in the compile cache (`cache.CompileCache`,
keyed by `graphinfo.graph_hash`) and executed on the virtual device with numerics on, so outputs and
gradients are the device's real results. A graph already in the cache is loaded, not recompiled.

Options (also environment variables): ``cache_dir`` ($NPROF_CACHE), ``fallback`` "error" (default) or
"eager" ($NPROF_FALLBACK=eager: a Dynamo graph whose forward or backward has an unsupported op, or that torch
cannot trace, runs wholly eagerly on the CPU — forward and backward — with a warning; the backward is
lowered at compile time, so an unsupported backward op is reported before the first forward runs),
``preset`` "trn1"/"trn2" ($NPROF_PRESET), ``compile_only`` ($NPROF_COMPILE_ONLY=1, set by ``nprof compile``:
compile into the cache, execute eagerly).

Importing this module (as ``torch.compile(..., backend="nprof")`` does, before tracing) sets Dynamo's
``allow_rnn`` so recurrent layers are compiled rather than skipped (`allow_rnn`).

Program tensor names: forward inputs are named after what they are in the user's code (``fc1.weight``,
``x``, from dynamo's input sources), backward inputs after the forward value they hold (``saved.relu``) or
``tangents_<i>``; outputs are ``output_<i>``, ``saved.<node>`` (activations kept for the backward) and
``grad.<input>``. Layers: forward nodes use ``nn_module_stack`` (``model.fc1``); backward nodes take the
layer of the forward node with the same ``seq_nr``, else ``backward``.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from nprof.compiler import conv1d, graphinfo
from nprof.compiler.cache import ENV_COMPILE_ONLY, CompileCache, TimingCache, log_event
from nprof.compiler.collectives import ddp_notice
from nprof.compiler.lower import (
    FALLBACK_ADVICE,
    GUARD_META,
    PROGRAM_DTYPE,
    RNG_DRAWS_META,
    GraphPlan,
    OutputSlot,
    lower_graph,
)
from nprof.compiler.packing import pack_inputs
from nprof.compiler.regather_check import CONV_CHECK_NAME, NONFINITE_CHECK_NAME, ONEHOT_CHECK_NAME
from nprof.compiler.runtime import STATS, DeviceGraph, notify, save_samples, to_numpy
from nprof.device.columns import with_columns
from nprof.device.process_group import has_collectives
from nprof.errors import NprofError, UnsupportedOpError
from nprof.gcpause import gc_paused

_OPTIONS = ("cache_dir", "fallback", "preset", "compile_only")
_NOTICES: set[str] = set()  # one-time notices already given in this process
_GRAPH_KIND = {"fw": "forward graph", "bw": "backward graph", "inference": "inference graph"}


@dataclass(frozen=True)
class BackendOptions:
    cache_dir: str | None = None
    fallback: str = "error"
    preset: str = "trn1"
    compile_only: bool = False

    @staticmethod
    def parse(options: dict[str, Any] | None) -> BackendOptions:
        opts = dict(options or {})
        unknown = [k for k in opts if k not in _OPTIONS]
        if unknown:
            raise NprofError(f"unknown nprof backend option {unknown[0]!r}; known: {', '.join(_OPTIONS)}")
        fallback = str(opts.get("fallback") or os.environ.get("NPROF_FALLBACK") or "error")
        if fallback not in ("error", "eager"):
            raise NprofError(f"fallback must be 'error' or 'eager', got {fallback!r}")
        only = opts.get("compile_only")
        if only is None:
            only = os.environ.get(ENV_COMPILE_ONLY, "") not in ("", "0")
        return BackendOptions(
            cache_dir=opts.get("cache_dir"),
            fallback=fallback,
            preset=str(opts.get("preset") or os.environ.get("NPROF_PRESET") or "trn1"),
            compile_only=bool(only),
        )


def allow_rnn() -> None:
    """Let Dynamo trace nn.LSTM/GRU/RNN (it skips them by default, so they would silently run eagerly
    outside every compiled graph); the backend lowers their unrolled decomposition."""
    import torch._dynamo

    torch._dynamo.config.allow_rnn = True


def decompositions() -> dict[Any, Any]:
    import torch
    from torch._decomp import core_aten_decompositions, get_decompositions

    from nprof.compiler.ops import DECOMPOSE_SKIP, EXTRA_DECOMPOSITIONS

    table = dict(core_aten_decompositions())
    extra = get_decompositions([getattr(torch.ops.aten, name) for name in EXTRA_DECOMPOSITIONS])
    table.update({op: fn for op, fn in extra.items() if str(op).endswith((".default", ".correction", ".Tensor"))})
    rnns = [getattr(torch.ops.aten, name).input for name in ("lstm", "gru", "rnn_tanh", "rnn_relu")]
    table.update(get_decompositions(rnns))  # unrolled into matmuls and activations, one step at a time
    table.update(conv1d.decompositions())  # 1-D as unit-height 2-D; groups > 1 by grouped_conv (tap sums, per group)
    table[torch.ops.aten.hardtanh_backward.default] = _hardtanh_backward
    table[torch.ops.aten.hardswish_backward.default] = _hardswish_backward
    table[torch.ops.aten.elu_backward.default] = _elu_backward
    table[torch.ops.aten.native_layer_norm_backward.default] = _layer_norm_backward
    table[torch.ops.aten.std.correction] = _std
    return {op: fn for op, fn in table.items() if op.name().split("::")[-1].split(".")[0] not in DECOMPOSE_SKIP}


def _hardtanh_backward(grad: Any, x: Any, lo: float, hi: float) -> Any:
    """hardtanh's (relu6's) gradient as eager's vectorised CPU kernel computes it: ``grad`` where
    ``lo < x < hi``, else 0, so 0 where x is NaN (torch's own decomposition, ``x <= lo or x >= hi`` -> 0, passes
    the gradient there; eager's scalar loop for the last few elements does too, but every full vector does not)."""
    import torch

    return torch.where((x > lo) & (x < hi), grad, torch.zeros((), dtype=grad.dtype))


def _hardswish_backward(grad: Any, x: Any) -> Any:
    """hardswish's gradient as eager's vectorised CPU kernel: NaN where x is NaN (torch's decomposition tests
    ``x <= 3`` and passes the gradient there)."""
    import torch

    inner = torch.where(x >= 3.0, grad, grad * (x / 3.0 + 0.5))
    return torch.where(x < -3.0, torch.zeros((), dtype=grad.dtype), inner)


def _elu_backward(grad: Any, alpha: float, scale: float, input_scale: float, is_result: bool, y: Any) -> Any:
    """elu's gradient as eager's vectorised CPU kernel: the positive branch where ``y > 0``, so the negative
    one (NaN) where y is NaN (torch's decomposition tests ``y <= 0`` and passes ``grad * scale`` there)."""
    import torch

    neg_coef = alpha * scale
    if is_result:
        neg = grad * input_scale * (y + neg_coef)
    else:
        neg = grad * input_scale * neg_coef * torch.exp(y * input_scale)
    return torch.where(y > 0, grad * scale, neg)


def _layer_norm_backward(grad: Any, x: Any, shape: Any, mean: Any, rstd: Any, weight: Any, bias: Any,
                         mask: Any) -> tuple[Any, Any, Any]:  # fmt: skip
    """layer norm's gradients by eager's CPU kernel's formula: ``dx = rstd * dy * w + b * x + c`` with the row sums
    ``ds = sum(dy * w * x)``, ``db = sum(dy * w)``, ``b = (db * mean - ds) * rstd^3 / n``, ``c = -b * mean -
    db * rstd / n``. Equal to torch's decomposition on finite values; where a weight or gradient is +-inf the
    decomposition's ``x_hat * sum(dy * w * x_hat)`` made -inf where eager's row is NaN."""
    axis = x.dim() - len(shape)
    dims, outer = list(range(axis, x.dim())), list(range(axis))
    n = 1
    for s in shape:
        n *= int(s)
    gw = grad * weight if weight is not None else grad
    ds, db = (gw * x).sum(dims, keepdim=True), gw.sum(dims, keepdim=True)
    b = (db * mean - ds) * rstd * rstd * rstd * (1.0 / n)
    c = -b * mean - db * rstd * (1.0 / n)
    dx = (rstd * gw + b * x + c) if mask[0] else None
    dw = (grad * ((x - mean) * rstd)).sum(outer) if mask[1] and weight is not None else None
    dbias = grad.sum(outer) if mask[2] and bias is not None else None
    return dx, dw, dbias


def _std(x: Any, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    """std as ``s * sqrt(var(x / s))`` with ``s = max |x|`` over the reduced dims (1 where that is 0): eager's
    std sums in float64, so values near 1e30 (squares 1e60) have a finite std; torch's decomposition,
    ``sqrt(var(x))`` in float32, made it inf. An inf or NaN in x still gives NaN, as eager."""
    import torch

    dims = list(range(x.dim())) if dim is None or len(dim) == 0 else [int(d) % max(x.dim(), 1) for d in dim]
    s = x.abs().amax(dims, keepdim=True)
    s = torch.where(s == 0, torch.ones((), dtype=x.dtype), s)
    out = torch.sqrt(torch.var(x / s, dims, correction=correction, keepdim=True)) * s
    return out if keepdim else out.squeeze(dims)


def nprof_backend(gm: Any, example_inputs: Sequence[Any], options: dict[str, Any] | None = None, **_: Any) -> Any:
    """The torch.compile backend (see module doc)."""
    opts = BackendOptions.parse(options)
    names = _dynamo_input_names(gm)

    def specialize(inputs: Sequence[Any]) -> Any:
        return _specialize(gm, list(inputs), opts, names)

    if not _is_dynamic(example_inputs):
        return specialize(example_inputs)
    # Dynamo made some sizes symbolic (it does after a shape change): the device runs static programs, so
    # compile one specialisation per concrete input signature, on first use.
    compiled: dict[tuple[Any, ...], Any] = {}

    def run(*args: Any) -> Any:
        key = tuple((tuple(a.shape), a.dtype) if hasattr(a, "shape") else a for a in args)
        fn = compiled.get(key)
        if fn is None:
            fn = compiled[key] = specialize(args)
        return fn(*args)

    return run


def _specialize(gm: Any, inputs: list[Any], opts: BackendOptions, names: list[str]) -> Any:
    """AOTAutograd with the nprof compilers, the backward lowered at compile time too (a failing backward
    is reported before the forward runs). If any graph cannot be lowered and the fallback is "eager", the
    whole Dynamo graph runs eagerly (forward and backward by torch's own autograd, so no saved tensor of a
    device forward ever meets an eager backward); else the error is raised."""
    import torch
    from torch._dynamo.backends.common import aot_autograd

    shared: dict[str, Any] = {"names": names, "layer_by_seq": {}, "fw_inputs": [], "failed": None}

    def compiler(kind: str) -> Any:
        return lambda agm, ex: _compile(agm, kind, opts, shared)

    # the cyclic GC paused: its full passes rescan every object AOT and the lowering build (measured on
    # resnet18: 1.95 s of GC in the first step -> 1.1 s with `Lowerer.release`)
    try:
        with gc_paused(), torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
            compiled = aot_autograd(
                fw_compiler=compiler("fw"),
                bw_compiler=compiler("bw"),
                inference_compiler=compiler("inference"),
                decompositions=decompositions(),
            )(gm, inputs)
    except NprofError:
        raise
    except torch._dynamo.exc.RestartAnalysis:  # Dynamo's signal to trace again (e.g. a float made a tensor)
        raise
    except Exception as err:  # torch could not trace the graph for AOTAutograd (not an op nprof lacks)
        if opts.fallback != "eager":
            raise NprofError(_trace_failure(gm, err)) from err
        shared["failed"] = _trace_failure(gm, err)
    if shared["failed"] is None:
        notice = None if shared.get("collectives") else ddp_notice()  # graphs without collectives of their own
        if notice is not None and not _NOTICES:
            _NOTICES.add(notice)
            warnings.warn(notice, stacklevel=2)
        return compiled
    STATS.fallbacks += 1
    why = str(shared["failed"]).replace(FALLBACK_ADVICE, "")
    warnings.warn(f"nprof: running this graph eagerly on the CPU (forward and backward): {why}", stacklevel=2)
    return gm.forward


def _trace_failure(gm: Any, err: Exception) -> str:
    """One line: why torch could not trace the graph, and where (the user's line of the graph's first op)."""
    first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    where = next((graphinfo.user_source(n) for n in gm.graph.nodes if graphinfo.user_source(n)), None)
    at = f" (graph starting at {where})" if where else ""
    return f"cannot compile this graph{at}: torch could not trace it: {type(err).__name__}: {first}"


def _is_dynamic(example_inputs: Sequence[Any]) -> bool:
    import torch

    for value in example_inputs:
        if isinstance(value, torch.SymInt):
            return True
        if isinstance(value, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in value.shape):
            return True
    return False


def _dynamo_input_names(gm: Any) -> list[str]:
    names = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        arg = node.meta.get("grapharg")
        source = getattr(getattr(arg, "source", None), "name", None)
        if callable(source):
            source = source()
        names.append(graphinfo.tensor_name_from_source(source) if source else node.name)
    return names


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            n = f"{n}#{seen[n]}"
        else:
            seen[n] = 0
        out.append(n)
    return out


def _input_names(gm: Any, kind: str, shared: dict[str, Any]) -> list[str]:
    names = []
    dyn = shared["names"]
    fw_inputs: list[str] = shared["fw_inputs"]
    for node in (n for n in gm.graph.nodes if n.op == "placeholder"):
        desc = node.meta.get("desc")
        idx = getattr(desc, "idx", None)
        cls = type(desc).__name__
        if cls == "PlainAOTInput" and isinstance(idx, int) and idx < len(dyn):
            names.append(dyn[idx])
        elif kind == "bw" and node.name.startswith("primals_") and node.name in fw_inputs:
            names.append(dyn[fw_inputs.index(node.name)] if fw_inputs.index(node.name) < len(dyn) else node.name)
        elif kind == "bw" and not node.name.startswith("tangents"):
            names.append(f"saved.{node.name}")
        else:
            names.append(node.name)
    if kind != "bw":
        shared["fw_inputs"] = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return _unique(names)


def _output_names(gm: Any, input_names: list[str], shared: dict[str, Any]) -> list[str]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    nodes = list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    descs = out.meta.get("desc") or [None] * len(nodes)
    names = []
    for i, (node, desc) in enumerate(zip(nodes, descs, strict=False)):
        cls = type(desc).__name__
        if cls == "PlainAOTOutput":
            names.append(f"output_{getattr(desc, 'idx', i)}")
        elif cls == "SavedForBackwardsAOTOutput" and node is not None:
            names.append(f"saved.{node.name}")
        elif cls == "GradAOTOutput":
            idx = getattr(getattr(desc, "grad_of", None), "idx", None)
            dyn = shared["names"]
            names.append(f"grad.{dyn[idx]}" if isinstance(idx, int) and idx < len(dyn) else f"grad_{i}")
        else:
            names.append(f"output_{i}")
    return _unique(names)


def _record_layers(gm: Any, shared: dict[str, Any]) -> None:
    for node in gm.graph.nodes:
        seq = node.meta.get("seq_nr")
        if node.op != "call_function" or seq is None:
            continue
        layer = graphinfo.layer_from_module_stack(node) or "model"
        if layer is not None:
            shared["layer_by_seq"].setdefault(seq, (layer, graphinfo.user_source(node)))


def _compile(gm: Any, kind: str, opts: BackendOptions, shared: dict[str, Any]) -> Any:
    """Lower one AOTAutograd graph (outside AOT's fake mode: its constants are real tensors, e.g. a
    ``torch.tensor([...])`` literal inside forward) and return the boxed callable that runs it."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():
        return _compile_real(gm, kind, opts, shared)


def _compile_real(gm: Any, kind: str, opts: BackendOptions, shared: dict[str, Any]) -> Any:
    from torch._functorch.aot_autograd import make_boxed_func

    if kind != "bw":
        _record_layers(gm, shared)
    input_names = _input_names(gm, kind, shared)
    output_names = _output_names(gm, input_names, shared)
    specs = []
    for node, name in zip((n for n in gm.graph.nodes if n.op == "placeholder"), input_names, strict=True):
        val = node.meta.get("val")
        if hasattr(val, "shape"):
            specs.append(
                graphinfo.InputSpec(name, tuple(int(s) for s in val.shape), graphinfo.torch_dtype_name(val.dtype))
            )
    ghash = _hash(gm, specs, kind, opts)
    cache = CompileCache(opts.cache_dir)
    module_dir = cache.module_dir(ghash)
    module = module_dir.name
    eager = make_boxed_func(gm.forward)
    try:
        try:
            program, slots = _program(gm, kind, opts, shared, cache, ghash, input_names, output_names, specs)
            shared["collectives"] = shared.get("collectives") or has_collectives(program)
        except NprofError:
            raise
        except Exception as exc:  # a bug of the lowering: say so in one line (the fallback may still run it)
            raise UnsupportedOpError(f"internal compiler error ({type(exc).__name__}: {exc})") from exc
    except UnsupportedOpError as err:
        log_event(module_dir, kind, "failed", 0, str(err))
        if opts.compile_only:  # nothing runs on the device: the graph runs eagerly as compile-only graphs do
            STATS.fallbacks += 1
            warnings.warn(f"nprof: graph {module} ({kind}) not compiled: {err}", stacklevel=2)
            return eager
        if opts.fallback != "eager":
            raise UnsupportedOpError(f"{_GRAPH_KIND[kind]}: {err}") from err.__cause__  # internal: the bug
        notify("fallback", module, time.time_ns())
        shared["failed"] = f"{_GRAPH_KIND[kind]}: {err}"
        return eager  # never run: the whole Dynamo graph runs eagerly instead (see `_specialize`)
    sample_dir = module_dir / "inputs"
    if opts.compile_only:
        dtypes = {s.name: PROGRAM_DTYPE.get(s.dtype, "float32") for s in specs}

        saved = [False]

        def run_eager(*args: Any) -> Any:
            if not saved[0]:
                arrays = {n: to_numpy(a, dtypes[n]) for n, a in zip(input_names, args, strict=True) if n in dtypes}
                save_samples(sample_dir, pack_inputs(program, arrays))  # as the runtime saves them
                saved[0] = True
            return gm.forward(*args)

        return make_boxed_func(run_eager)
    graph = DeviceGraph(program, input_names, slots, module, sample_dir, TimingCache(module_dir))

    def lower_marked(marked: frozenset[str], regathers: bool = True) -> DeviceGraph:
        mhash = _hash(gm, specs, kind, opts, marked, regathers)
        prog, mslots = _program(gm, kind, opts, shared, cache, mhash, input_names, output_names, specs, marked,
                                regathers)  # fmt: skip
        mdir = cache.module_dir(mhash)
        return DeviceGraph(prog, input_names, mslots, mdir.name, mdir / "inputs", TimingCache(mdir))

    return make_boxed_func(_guarded(graph, program, input_names, lower_marked, eager))


def _hash(
    gm: Any,
    specs: list[graphinfo.InputSpec],
    kind: str,
    opts: BackendOptions,
    marked: frozenset[str] = frozenset(),
    regathers: bool = True,
) -> str:
    """The graph's cache key (`graphinfo.graph_hash`, `marked`: the inputs lowered as non-finite, `regathers`
    False: lowered without regathers), input names in."""
    constants = [getattr(gm, n.target).detach().cpu().numpy() for n in gm.graph.nodes if n.op == "get_attr"
                 if hasattr(getattr(gm, n.target), "detach")]  # fmt: skip
    ghash = graphinfo.graph_hash(gm, specs, kind, opts.preset, constants, marked)
    if not regathers:
        ghash = graphinfo.hashlib.sha256(f"{ghash} without regathers".encode()).hexdigest()[:20]
    for s in specs:  # names are part of the program: rename -> new module
        ghash = graphinfo.hashlib.sha256(f"{ghash}{s.name}".encode()).hexdigest()[:20]
    return ghash


def _guarded(graph: DeviceGraph, program: Any, input_names: list[str], lower_marked: Any, eager: Any) -> Any:
    """The callable that runs `graph`, unless an input `program` lists under `GUARD_META` (a float input whose
    +-inf/NaN a regather would spread as NaN over whole columns, `nprof.compiler.regather`) holds a non-finite
    value: then the graph lowered with those inputs marked non-finite (`lower_marked`, on first need) runs.
    Finite inputs cost one sum each (`all_finite`). When the program that ran reports a failed check
    (`nprof.compiler.regather_check`: a value that became non-finite at run time went through a regather or a
    one-hot matmul, which spread NaN over whole columns), its results are dropped and, on the same inputs and
    the same random numbers, the graph lowered without regathers runs (on first need, its own cache module),
    or, when a one-hot matmul's or a convolution's check failed (`nprof.compiler.conv_check`; no lowering
    without them), the AOT graph runs eagerly on the CPU (`eager`, with a warning naming the op): every result
    handed back (outputs and saved tensors alike) comes from one run whose results equal eager's."""
    import torch

    guards = sorted(json.loads(program.meta.get(GUARD_META, "[]")))
    where = [input_names.index(g) for g in guards]
    lowered: dict[str, DeviceGraph] = {}
    rng = bool(json.loads(program.meta.get(RNG_DRAWS_META, "{}")))  # the program draws dropout masks

    def run(*args: Any) -> Any:
        chosen = graph
        if where and not all(all_finite(args[i]) for i in where):
            if "marked" not in lowered:
                lowered["marked"] = lower_marked(frozenset(guards))
            chosen = lowered["marked"]
        state = torch.get_rng_state() if rng else None
        outs = chosen(list(args))
        if not chosen.failed_checks:
            return outs
        refuse_in_job(chosen)
        if not chosen.failed_checks & _EAGER_ONLY:
            if "plain" not in lowered:
                lowered["plain"] = lower_marked(frozenset(), regathers=False)
            chosen = lowered["plain"]
            if state is not None:
                torch.set_rng_state(state)  # the dropout masks the dropped run drew, drawn again
            outs = chosen(list(args))
            if not chosen.failed_checks:
                return outs
        if state is not None:
            torch.set_rng_state(state)
        warnings.warn(f"nprof: graph {chosen.module}: {_eager_reason(chosen.failed_checks)}; this call ran eagerly "
                      "on the CPU", stacklevel=2)  # fmt: skip
        notify("fallback", chosen.module, time.time_ns())
        return eager(list(args))

    return run


_EAGER_ONLY = frozenset({ONEHOT_CHECK_NAME, CONV_CHECK_NAME, NONFINITE_CHECK_NAME})  # no other lowering avoids


def _eager_reason(failed: frozenset[str]) -> str:
    """Why a call ran eagerly: the ops whose device-side check (`failed`: check names) found a non-finite value."""
    if NONFINITE_CHECK_NAME in failed:
        return ("scaled_dot_product_attention, layer_norm, var/std or cumsum had a +-inf/NaN input or result, "
                "whose device results are not eager's there (eager's attention gives 0 for a row with a NaN query, "
                "its layer norm a NaN mean for a row with an inf, its var sums in float64, its cumsum adds in "
                "sequence)")  # fmt: skip
    if CONV_CHECK_NAME in failed:
        return ("a convolution (aten.convolution or convolution_backward) had a +-inf/NaN input, gradient, weight or "
                "result, and its kernels would make NaN where eager does not (0 x inf with zero padding or "
                "block-diagonal weights)")  # fmt: skip
    return ("a value that is +-inf/NaN at run time went through a one-hot matmul (an embedding or its backward), "
            "which would spread NaN over whole columns")  # fmt: skip


def all_finite(t: Any) -> bool:
    """Is every element of the float tensor `t` finite? Its sum is finite only when every element is (an inf
    or NaN makes it inf or NaN) and costs one pass over memory, without the bool tensor of ``isfinite``
    (measured on a 50257 x 768 embedding: ~6-9 ms CPU vs ~210-240 ms); a non-finite sum (finite values can
    overflow it too) is settled by ``isfinite``."""
    import torch

    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def refuse_in_job(graph: DeviceGraph) -> None:
    """Refuse (one line) to re-run a program whose collectives the other processes of a torch.distributed job
    would not run again."""
    from nprof.device.process_group import current_job

    if has_collectives(graph.program) and current_job() is not None:
        raise NprofError(
            f"nprof: graph {graph.module} put a value that became +-inf/NaN at run time through a regather, a "
            "one-hot matmul or a convolution kernel, so its results are wrong, and it cannot be re-run without them "
            "inside a multi-process job (its collectives would not match the other processes'); keep the values finite"
        )


def _program(
    gm: Any,
    kind: str,
    opts: BackendOptions,
    shared: dict[str, Any],
    cache: CompileCache,
    ghash: str,
    input_names: list[str],
    output_names: list[str],
    specs: list[graphinfo.InputSpec],
    marked: frozenset[str] = frozenset(),
    regathers: bool = True,
) -> tuple[Any, list[OutputSlot]]:
    module_dir = cache.module_dir(ghash)
    load_cpu = time.process_time()
    program = cache.load(ghash)
    if program is not None:
        try:
            manifest = json.loads((module_dir / "manifest.json").read_text())
            slots = [
                OutputSlot(**{**s, "shape": tuple(s["shape"]), "stride": tuple(s["stride"])})
                for s in manifest["outputs"]
            ]
            STATS.cache_hits += 1
            STATS.load_cpu_seconds.append((module_dir.name, time.process_time() - load_cpu))
            notify("cache_hit", module_dir.name, time.time_ns())
            log_event(module_dir, kind, "cached", len(program.instructions))
            return program, slots
        except (OSError, ValueError, KeyError, TypeError):
            pass  # unreadable manifest: compile again
    start, start_ns, start_cpu = time.perf_counter(), time.time_ns(), time.process_time()
    plan = GraphPlan(
        name=f"{module_dir.name}_{kind}",
        kind=kind,
        input_names=input_names,
        output_names=output_names,
        preset=opts.preset,
        layer_by_seq=dict(shared["layer_by_seq"]),
        nonfinite_inputs=marked,
        regathers=regathers,
    )
    program, slots = lower_graph(gm, plan)
    program = with_columns(program)  # the file's table and the simulator's plan read these: no second conversion
    manifest = {
        "module": module_dir.name,
        "kind": kind,
        "preset": opts.preset,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "instructions": len(program.instructions),
        "inputs": [s.as_json() for s in specs],
        "outputs": [asdict(s) for s in slots],
        "graph": graphinfo.graph_text(gm),
        "code": gm.code,
    }
    store_cpu = time.process_time()
    cache.store(ghash, program, manifest)
    STATS.store_cpu_seconds.append((module_dir.name, time.process_time() - store_cpu))
    seconds = time.perf_counter() - start  # lowering + writing the module
    STATS.compiled += 1
    STATS.compile_seconds.append((module_dir.name, seconds))
    STATS.compile_cpu_seconds.append((module_dir.name, time.process_time() - start_cpu))
    notify("compile", module_dir.name, start_ns)
    log_event(module_dir, kind, "compiled", len(program.instructions))
    return program, slots


allow_rnn()
